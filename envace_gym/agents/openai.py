"""``openai:MODEL@BASE_URL``: any OpenAI-compatible chat server, for both roles."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from envace_gym.agents.base import Agent
from envace_gym.agents.prompting import is_inline_rehearsal
from envace_gym.core.messages import format_tool_call
from envace_gym.openai_client import ChatEndpoint
from envace_gym.rehearse_prompts import prompted_messages


def to_api_messages(messages: list[dict]) -> list[dict]:
    """envace-gym messages in the wire format of the chat API (arguments as JSON text)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])},
                }
                for c in m["tool_calls"]
            ]
        if m["role"] == "tool":
            m = {"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]}
        out.append(m)
    return out


class OpenAIAgent(Agent):
    """Chat completions against ``base_url``; tool calls may come back as text or as ``tool_calls``.

    The chat API cannot be asked to write a tool message, so an inline rehearse
    turn is sent as the ``prompted`` simulator prompt of the same call. ``endpoint``
    options (``timeout``: seconds per call in all, retries included; ``max_retries``;
    ``max_reply_bytes``) go to the :class:`~envace_gym.openai_client.ChatEndpoint`, and may be
    given in the name: ``openai:MODEL@BASE_URL?timeout=10``. ``act_batch`` runs at most
    ``concurrency`` calls at once; a failing server raises ``ModelServerError`` naming the URL.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        env=None,
        *,
        api_key: str = "EMPTY",
        concurrency: int = 8,
        max_tokens: int = 512,
        temperature: float = 0.0,
        seed: int | None = None,
        **endpoint,
    ):
        self.endpoint = ChatEndpoint(base_url, model, api_key, **endpoint)
        self.concurrency = concurrency
        self.sampling = {"max_tokens": max_tokens, "temperature": temperature}
        if seed is not None:
            self.sampling["seed"] = seed
        self.name = f"openai:{model}@{base_url}"

    def act(self, obs: dict) -> str:
        messages, tools = obs["messages"], obs["tools"]
        if is_inline_rehearsal(obs):
            schema = next(t for t in tools if t["function"]["name"] == obs["tool_call"]["name"])
            messages, tools = prompted_messages(messages, obs["tool_call"], schema, []), []
        extra = {"tools": tools} if tools and obs["role"] == "act" else {}
        message = self.endpoint.chat(to_api_messages(messages), **self.sampling, **extra)
        parts = [message.content or ""]
        for call in message.tool_calls or []:
            try:
                arguments = json.loads(call.function.arguments or "{}")
            except ValueError:  # keep it: the env answers with malformed_call
                parts.append(
                    f'<tool_call>{{"name": {json.dumps(call.function.name)}, '
                    f'"arguments": {json.dumps(call.function.arguments)}}}</tool_call>'
                )
                continue
            parts.append(format_tool_call(call.function.name, arguments))
        return "\n".join(p for p in parts if p)

    def act_batch(self, observations: list[dict]) -> list[str]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self.act, observations))
