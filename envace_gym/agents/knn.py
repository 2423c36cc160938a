"""``knn``: a non-neural world model that rehearses with the nearest earlier real response."""

from __future__ import annotations

import json

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.fidelity import flatten


def _tokens(arguments: dict) -> frozenset[str]:
    return frozenset(f"{path}={json.dumps(value)}" for path, value in flatten(arguments).items())


CANNOT_ACT = (
    "knn is a world model and cannot act: it answers rehearse turns only; give it as --simulator "
    "(dynamics simulated), --world-model or compare's --agent, and act with another agent"
)


class KNNAgent(Agent):
    """Answers a rehearse turn with the response of the most similar earlier call of the same tool.

    Similarity is the Jaccard overlap of the calls' flattened ``path=value``
    argument tokens (ties go to the most recent call). The memory is filled from
    every observation the agent sees: each tool message paired with its call,
    across episodes. Under ``shadow`` or ``real`` dynamics those are real
    responses. It does not act: an act turn raises ``ValueError``.
    """

    name = "knn"
    acts = False

    def __init__(self, env: gym.Env | None = None, memory: list[dict] | None = None):
        self.memory: dict[str, list[tuple[frozenset[str], str]]] = {}
        self._seen: set[tuple[str, str, str]] = set()
        for item in memory or []:
            self.remember(item["name"], item["arguments"], item["response"])

    def remember(self, name: str, arguments: dict, response: str) -> None:
        key = (name, json.dumps(arguments, sort_keys=True), response)
        if key not in self._seen:
            self._seen.add(key)
            self.memory.setdefault(name, []).append((_tokens(arguments), response))

    def _observe(self, messages: list[dict]) -> None:
        calls = {c["id"]: c["function"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])}
        for m in messages:
            call = calls.get(m.get("tool_call_id")) if m["role"] == "tool" else None
            if call is not None:
                self.remember(call["name"], call["arguments"], m["content"])

    def act(self, obs: dict) -> str:
        self._observe(obs["messages"])
        if obs["role"] == "act":
            raise ValueError(CANNOT_ACT)
        call = obs["tool_call"]
        candidates = self.memory.get(call["name"])
        if not candidates:
            return "{}"
        query = _tokens(call["arguments"])
        best = max(
            range(len(candidates)),
            key=lambda i: (len(query & candidates[i][0]) / max(1, len(query | candidates[i][0])), i),
        )
        return candidates[best][1]
