"""``noisy-oracle``: the oracle with noise, an imperfect actor for measuring private rehearsal."""

from __future__ import annotations

import copy
import random
import re

import gymnasium as gym

from envace_gym.agents.oracle import OracleAgent
from envace_gym.agents.private_rehearsal import PRIVATE_KEY, call_key
from envace_gym.core.messages import ToolCall, format_tool_call, parse_act


def _leaves(value, path=()):
    """``(path, value)`` of every leaf of a JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path, value


def _set(value, path, leaf):
    for key in path[:-1]:
        value = value[key]
    value[path[-1]] = leaf


class NoisyOracle(OracleAgent):
    """The oracle, except that each gold tool-call turn is, with probability ``p``, replaced by a
    plausible wrong call, schema-valid: one of its calls gets a wrong id or value (a digit changed,
    another enum member or another string of the task's gold calls, a number moved, a flag
    flipped), or another tool that takes the same arguments.

    Given a private-rehearsal digest (``obs["private_rehearsal"]``), it trusts what it
    imagined: it draws again, at most ``redraws`` times, while its draw has a call that an
    attempt's first turn (made from the state it is in now) saw answered with an error, or,
    when some attempt's first turn drew no error, is none of those first turns. That is one
    model of an agent learning from its attempts; a model's own use of the digest may differ.
    Its rehearse turns are the oracle's.
    """

    name = "noisy-oracle"

    def __init__(self, env: gym.Env, p: float = 0.3, seed: int | None = 0, redraws: int = 4):
        super().__init__(env)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p, self.rng, self.redraws = p, random.Random(seed), redraws

    def reseed(self, seed: int) -> None:
        self.rng = random.Random(seed)  # this copy's own generator (binds share the first one)

    def cursor(self, obs: dict) -> int:
        """The oracle's step for the act turns taken so far, on purpose: a noisy turn used its
        gold step up (the task moves on, as an agent's wrong call would), rather than retrying it."""
        return self.turns_taken(obs)

    def act(self, obs: dict) -> str:
        gold = super().act(obs)
        if obs["role"] == "rehearse":
            return gold
        firsts = [a["turns"][0]["calls"] for a in obs.get(PRIVATE_KEY, ())]
        failed = {call_key(c["name"], c["arguments"]) for calls in firsts for c in calls if c["error"]}
        verified = {
            frozenset(call_key(c["name"], c["arguments"]) for c in calls)
            for calls in firsts
            if calls and not any(c["error"] for c in calls)
        }
        for _ in range(self.redraws + 1):
            action = self._noisy(gold)
            keys = frozenset(call_key(c.name, c.arguments) for c in parse_act(action)[1])
            if not keys & failed and (not verified or keys in verified):
                break
        return action

    def _noisy(self, gold: str) -> str:
        text, calls = parse_act(gold)
        if not calls or self.rng.random() >= self.p:
            return gold
        i = self.rng.randrange(len(calls))
        wrong = self._wrong(calls[i].name, calls[i].arguments)
        if wrong is None:
            return gold
        calls[i] = wrong
        return "\n".join([text] * bool(text) + [format_tool_call(c.name, c.arguments) for c in calls])

    def _wrong(self, name: str, arguments: dict) -> ToolCall | None:
        """A schema-valid call other than ``name(arguments)``, or None when none was found."""
        tools = self._unwrapped.tools
        if name not in tools:
            return None
        for _ in range(8):
            if self.rng.random() < 0.25:
                others = [
                    t for t in tools.names if t != name and set(tools.by_name[t].get("required", [])) <= set(arguments)
                ]
                if not others:
                    continue
                other = self.rng.choice(others)
                properties = tools.by_name[other].get("properties", {})
                call = ToolCall("noise", other, {k: v for k, v in arguments.items() if k in properties})
            else:
                leaves = list(_leaves(arguments))
                if not leaves:
                    continue
                path, value = self.rng.choice(leaves)
                changed = self._changed(value, tools.by_name[name].get("properties", {}).get(path[0], {}))
                if changed is None or changed == value:
                    continue
                call = ToolCall("noise", name, copy.deepcopy(arguments))
                _set(call.arguments, path, changed)
            if tools.check(call) is None and call_key(call.name, call.arguments) != call_key(name, arguments):
                return call
        return None

    def _changed(self, value, schema: dict):
        """A plausible wrong value of the same type as ``value``."""
        if isinstance(value, bool):
            return not value
        if isinstance(value, int):
            return value + self.rng.choice((-2, -1, 1, 2))
        if isinstance(value, float):
            return round(value * self.rng.choice((0.5, 1.5)) + 1, 2)
        if not isinstance(value, str):
            return None
        enum = [e for e in schema.get("enum", []) if e != value]
        if enum:
            return self.rng.choice(enum)
        digits = [i for i, ch in enumerate(value) if ch.isdigit()]
        if digits:
            i = self.rng.choice(digits)
            return value[:i] + self.rng.choice([d for d in "0123456789" if d != value[i]]) + value[i + 1 :]
        episode = self._unwrapped.episode
        assert episode is not None  # asked during an episode
        pool = sorted(
            {
                v
                for c in self._unwrapped.suite.grader.gold_calls(episode.task)
                for _, v in _leaves(c["arguments"])
                if isinstance(v, str) and v != value and not re.search(r"\d", v)
            }
        )
        return self.rng.choice(pool) if pool else value + "s"
