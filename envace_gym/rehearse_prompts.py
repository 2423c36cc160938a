"""Rehearse prompts: ``inline`` (the conversation itself) and ``prompted`` (a simulator prompt)."""

from __future__ import annotations

import json

REHEARSAL_FORMATS = ("inline", "prompted")
SIMULATOR_INSTRUCTION = (
    "You are a tool executor. You never talk to anyone: given one tool call, you write exactly "
    "what the tool returns, as a single JSON object or array and nothing else.\n"
    "- Follow the tool's JSON Schema and its description; stay consistent with the earlier "
    "responses and the conversation.\n"
    "- When the call cannot succeed (an unknown id, a rule the tool enforces), return "
    '{"error": {"code": "execution_error", "message": "<what went wrong>"}}.\n'
    "- Wrap the JSON in <tool_response></tool_response>."
)


def _render(messages: list[dict]) -> str:
    lines = []
    for m in messages:
        if m["role"] == "system":
            continue
        if m.get("content"):
            lines.append(f"{m['role']}: {m['content']}")
        for c in m.get("tool_calls", []):
            lines.append(f"{m['role']} calls {c['function']['name']}({json.dumps(c['function']['arguments'])})")
    return "\n".join(lines)


def prompted_messages(messages: list[dict], call: dict, schema: dict, examples: list[tuple[dict, str]]) -> list[dict]:
    """The simulator prompt of the EnvACE paper's layout for one pending ``call``.

    ``examples`` are earlier ``(arguments, response)`` pairs of the same tool.
    """
    shown = "\n".join(f"call: {json.dumps(a)}\nresponse: {r}" for a, r in examples) or "(none)"
    user = (
        f"## Tool\n{json.dumps(schema)}\n\n## Earlier calls of this tool\n{shown}\n\n"
        f"## Conversation so far\n{_render(messages)}\n\n"
        f"## Call to answer\n{json.dumps({'name': call['name'], 'arguments': call['arguments']})}"
    )
    return [{"role": "system", "content": SIMULATOR_INSTRUCTION}, {"role": "user", "content": user}]


def episode_prompt(episode, call: dict, schema: dict, cached: list[tuple[dict, str]], shown: int) -> list[dict]:
    """:func:`prompted_messages` for a pending ``call`` of ``episode``: its examples are the ``shown`` newest
    of the ``cached`` responses of the tool and the tool's earlier answered calls in the episode."""
    examples = list(cached) + [
        (c.arguments, c.content)
        for c in episode.calls
        if c.name == call["name"] and c.ran and c.requestor == "assistant"
    ]
    return prompted_messages(episode.messages, call, schema, examples[-shown:])


class ResponseCache:
    """Real responses seen in earlier episodes, per tool (the newest ``per_tool`` kept).

    Share one instance between envs to give ``prompted`` rehearsals examples
    from outside the current episode.
    """

    def __init__(self, per_tool: int = 3):
        self.per_tool = per_tool
        self.by_tool: dict[str, list[tuple[dict, str]]] = {}

    def add(self, name: str, arguments: dict, response: str) -> None:
        items = self.by_tool.setdefault(name, [])
        items.append((arguments, response))
        del items[: -self.per_tool]

    def get(self, name: str) -> list[tuple[dict, str]]:
        return list(self.by_tool.get(name, []))
