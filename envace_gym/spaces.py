"""Gymnasium spaces for chat observations and text actions."""

from __future__ import annotations

import json
import string
from typing import Any

import gymnasium as gym
import numpy as np

from envace_gym.core.messages import format_tool_call
from envace_gym.core.tools import ToolSet

#: whose generation a turn asks for (an observation's ``role``, a role trained): the policy acting, or
#: rehearsing a tool's response
TURN_ROLES = ("act", "rehearse")
#: the roles a chat message may have
CHAT_ROLES = ("system", "user", "assistant", "tool")


def _words(rng: np.random.Generator, n: int) -> str:
    letters = list(string.ascii_lowercase)
    return " ".join("".join(rng.choice(letters, int(rng.integers(2, 9)))) for _ in range(n))


class ObservationSpace(gym.Space[dict]):
    """``{"role", "messages", "tools", "tool_call"}``: a chat prompt for the next generation.

    ``messages`` are OpenAI chat messages, ``tools`` OpenAI function schemas, and
    ``tool_call`` the pending call (``{"id", "name", "arguments"}``) on a rehearse
    turn, None on an act turn.
    """

    def __init__(self, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict) or set(x) != {"role", "messages", "tools", "tool_call"}:
            return False
        if x["role"] not in TURN_ROLES or not isinstance(x["messages"], list) or not isinstance(x["tools"], list):
            return False
        for m in x["messages"]:
            if not (
                isinstance(m, dict)
                and m.get("role") in CHAT_ROLES
                and (m.get("content") is None or isinstance(m.get("content"), str))
            ):
                return False
        for t in x["tools"]:
            if not (
                isinstance(t, dict)
                and t.get("type") == "function"
                and isinstance(t.get("function"), dict)
                and isinstance(t["function"].get("name"), str)
            ):
                return False
        call = x["tool_call"]
        if x["role"] == "act":
            return call is None
        return isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)

    def sample(self, mask: Any = None, probability: Any = None) -> dict:
        rng = self.np_random
        name = _words(rng, 1).replace(" ", "_")
        tools = [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": _words(rng, 5),
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ]
        messages = [{"role": "system", "content": _words(rng, 8)}]
        messages += [
            {"role": ("user", "assistant")[i % 2], "content": _words(rng, 6)} for i in range(int(rng.integers(1, 5)))
        ]
        role = TURN_ROLES[int(rng.integers(2))]
        call = {"id": "call_0", "name": name, "arguments": {}} if role == "rehearse" else None
        return {"role": role, "messages": messages, "tools": tools, "tool_call": call}

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ObservationSpace)

    def __repr__(self) -> str:
        return "ObservationSpace(chat)"


class ActionSpace(gym.Space[str]):
    """Model text: an act turn (text and/or tool calls) or a rehearse turn (a tool response).

    Every string is a valid action: malformed ones get the structured error. ``sample()``
    draws, for the current tools and role, schema-valid calls, plain text and malformed
    calls on act turns, and JSON objects or malformed text on rehearse turns.
    """

    def __init__(self, tools: ToolSet, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.tools, self.role = tools, "act"

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) or (isinstance(x, dict) and ("content" in x or "tool_calls" in x))

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        rng = self.np_random
        u = rng.random()
        if self.role == "rehearse":
            if u < 0.8:
                return json.dumps({_words(rng, 1): _words(rng, 3) for _ in range(int(rng.integers(1, 4)))})
            return _words(rng, 4)
        if u < 0.6 and self.tools.names:
            name = self.tools.names[int(rng.integers(len(self.tools.names)))]
            return format_tool_call(name, self.tools.sample_arguments(name, rng))
        if u < 0.8:
            return _words(rng, int(rng.integers(3, 12)))
        broken = [
            "<tool_call>{not json</tool_call>",
            '<tool_call>{"arguments": {}}</tool_call>',
            '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
            "<tool_call>[",
        ]
        return broken[int(rng.integers(len(broken)))]

    def __eq__(self, other: Any) -> bool:
        # by value: a pickled copy (a vector env's worker checks its spaces against one) is equal
        return isinstance(other, ActionSpace) and (
            other.tools is self.tools or other.tools.schemas == self.tools.schemas
        )

    def __repr__(self) -> str:
        return f"ActionSpace(text, tools={len(self.tools.names)})"
