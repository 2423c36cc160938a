"""The candidate actions of an act turn, drawn from the conversation, and the features that describe them."""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

from envace_gym.core.messages import format_tool_call, parse_act

STOP = "###STOP###"  # tau2's end-of-conversation token; other suites read it as plain text
ID_RE = re.compile(r"#\w*\d\w*|\b[A-Za-z][A-Za-z0-9]*[_-][A-Za-z0-9_-]*\d[A-Za-z0-9_-]*\b")
QUOTED_RE = re.compile(r"'([^'\n]{2,80})'|\"([^\"\n]{2,80})\"")
NUMBER_RE = re.compile(r"(?<![\w.#-])\d+(?:\.\d+)?(?![\w.-])")
OMIT = object()
CANDIDATE_FEATURES = (
    "present",
    "reply",
    "finish",
    "repeated",
    "tool_used",
    "args_in_user_text",
    "args_linked",
    "args_named",
    "n_args",
    "same_tool_as_last",
    "slot",
)
GLOBAL_FEATURES = ("turn", "calls", "last_call_error", "candidates")

#: The candidate actions of an observation.
Candidates = Callable[[dict], list[str]]


class Conversation:
    """What the candidates and features are drawn from: the values the conversation shows."""

    def __init__(self, obs: dict):
        messages = obs["messages"]
        self.user_text = "\n".join(m["content"] or "" for m in messages[1:] if m["role"] == "user")
        self.calls = [
            (c["function"]["name"], c["function"]["arguments"])
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls", [])
        ]
        self.responses = [m["content"] or "" for m in messages if m["role"] == "tool"]
        texts = [self.user_text, *self.responses]
        self.ids = list(dict.fromkeys(i for t in texts for i in ID_RE.findall(t)))
        self.quoted = list(dict.fromkeys(a or b for a, b in QUOTED_RE.findall(self.user_text)))
        self.numbers = list(dict.fromkeys(NUMBER_RE.findall(ID_RE.sub(" ", self.user_text))))
        self.linked = self._linked()
        self.last_error = bool(self.responses) and '"error"' in self.responses[-1][:20]
        self._made = {(name, json.dumps(args, sort_keys=True)) for name, args in self.calls}
        self._relevance: dict[str, tuple[float, float, float]] = {}

    def _linked(self) -> set[str]:
        """Ids that a tool response puts in one JSON object with something the user said."""
        said = self.user_text.lower()
        linked: set[str] = set()

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                leaves = [v for v in node.values() if isinstance(v, str)]
                leaves += [x for v in node.values() if isinstance(v, list) for x in v if isinstance(x, str)]
                if any(len(v) >= 3 and v.lower() in said and not ID_RE.fullmatch(v) for v in leaves):
                    linked.update(v for v in leaves if ID_RE.fullmatch(v))
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        for text in self.responses:
            try:
                walk(json.loads(text))
            except ValueError:
                pass
        return linked

    def values(self, name: str, schema: dict) -> list:
        """Candidate values for one argument: its enum, ids for ``*_id``, quoted text, numbers."""
        for key in ("anyOf", "oneOf"):
            options = [s for s in schema.get(key, []) if s.get("type") != "null"]
            if options:
                schema = options[0]
        if "enum" in schema:
            return list(schema["enum"])
        kind = schema.get("type")
        if kind == "boolean":
            return [True, False]
        if kind in ("integer", "number"):
            cast = int if kind == "integer" else float
            return [cast(float(n)) for n in self.numbers if kind == "number" or float(n).is_integer()]
        if kind == "array" and name.endswith("ids"):
            return [[i] for i in self._ids_for(name[:-4])]
        if kind not in (None, "string"):
            return []
        if name == "id" or name.endswith("_id"):
            return self._ids_for(name[:-3])
        return list(self.quoted)

    def _ids_for(self, prefix: str) -> list[str]:
        """Ids that may fill an argument named ``{prefix}_id``: those named like it (``user_3``
        for ``user_id``) and those with no word prefix (``#W2378156``), never ``task_3``; the
        ids a tool response ties to the user's words first, then those the user wrote."""
        prefix = prefix.lower()
        fits = [
            i
            for i in self.ids
            if not re.match(r"[A-Za-z]+[_-]", i.lstrip("#")) or not prefix or i.lower().startswith(prefix)
        ]
        return sorted(fits, key=lambda i: (i not in self.linked, i not in self.user_text))

    def made(self, name: str, arguments: dict) -> bool:
        """Whether the agent already made exactly this call."""
        return (name, json.dumps(arguments, sort_keys=True)) in self._made

    def relevance(self, arguments: dict) -> tuple[float, float, float]:
        """Shares of a call's argument values that the user wrote, of its ids that a tool
        response ties to the user's words, and of its quoted values that the user introduced
        with the argument's name (``titled 'Book venue'`` for ``title``). A call without
        arguments: 0.5, 0 and 0."""
        key = json.dumps(arguments, sort_keys=True)
        if key not in self._relevance:
            self._relevance[key] = self._score(arguments)
        return self._relevance[key]

    def _score(self, arguments: dict) -> tuple[float, float, float]:
        values = _leaves(arguments)
        if not values:
            return 0.5, 0.0, 0.0
        said = self.user_text.lower()
        ids = [v for v in values if isinstance(v, str) and ID_RE.fullmatch(v)]
        quoted = [(k, v) for k, v in arguments.items() if isinstance(v, str) and v in self.quoted]
        return (
            sum(str(v).lower() in said for v in values) / len(values),
            sum(v in self.linked for v in ids) / len(ids) if ids else 0.0,
            sum(self._named(k, v) for k, v in quoted) / len(quoted) if quoted else 0.0,
        )

    def _named(self, name: str, value: str) -> bool:
        said, stem = self.user_text.lower(), re.split(r"[_\W]", name.lower())[0][:5]
        return any(
            stem and stem in said[max(0, m.start() - 40) : m.start()]
            for m in re.finditer(re.escape(value.lower()), said)
        )

    def summary(self) -> str:
        """A reply that states the ids the tool responses tied to the user's request."""
        ids = [i for i in self.ids if i in self.linked] or [i for i in self.ids if i not in self.user_text]
        return f"Done. For reference: {', '.join(ids)}." if ids else "Done, your request is complete."


def default_candidates(obs: dict, tools: list[dict] | None = None, per_tool: int = 12, limit: int = 32) -> list[str]:
    """Candidate act actions for ``obs``: a reply, a final reply, then tool calls, best first.

    A tool's calls fill each argument from the conversation (:meth:`Conversation.values`)
    and are the product of those choices, an optional argument also left out; at most
    ``per_tool`` per tool, ``limit`` in all. A tool with a required argument that nothing
    in the conversation can fill is left out. The calls are ranked by
    :meth:`Conversation.relevance` (ties in the tools' order), calls already made last, so
    that a slot tends to mean the same thing from one turn to the next.
    """
    return _candidates(Conversation(obs), tools if tools is not None else obs["tools"], per_tool, limit)


def _candidates(conv: Conversation, tools: list[dict], per_tool: int, limit: int) -> list[str]:
    summary = conv.summary()
    calls: list[tuple[str, dict]] = []

    def rank(call: tuple[str, dict]) -> tuple:
        return conv.made(*call), -sum(conv.relevance(call[1]))

    for tool in tools:
        fn = tool["function"]
        params = fn.get("parameters") or {}
        required = set(params.get("required", []))
        choices = []
        for arg, schema in (params.get("properties") or {}).items():
            values = conv.values(arg, schema)
            if arg in required:
                if not values:
                    break
                choices.append([(arg, v) for v in values])
            elif values:
                choices.append([(arg, OMIT), *((arg, v) for v in values)])
        else:
            combos = (c for c in itertools.product(*choices) if _distinct_text(c))
            tool_calls = [(fn["name"], {k: v for k, v in c if v is not OMIT}) for c in itertools.islice(combos, 512)]
            calls += sorted(tool_calls, key=rank)[:per_tool]
    ranked = sorted(calls, key=rank)
    out = [summary, f"{summary} {STOP}", *(format_tool_call(*c) for c in ranked)]
    return list(dict.fromkeys(out))[:limit]


# the wrapper -----------------------------------------------------------------


def _distinct_text(combo: tuple) -> bool:
    """No quoted text fills two arguments of one call."""
    texts = [v for _, v in combo if isinstance(v, str)]
    return len(texts) == len(set(texts))


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[str, dict] | None:
    """``(name, arguments)`` of a candidate's first well-formed tool call, else None (a reply)."""
    calls = [c for c in parse_act(text)[1] if c.error is None]
    return (calls[0].name, calls[0].arguments) if calls else None


def _leaves(value: Any) -> list:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


# a policy that scores every candidate with the same network (needs torch and stable-baselines3) --
