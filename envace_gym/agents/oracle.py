"""The oracle: plays the task's gold actions and rehearses what the real world would answer."""

from __future__ import annotations

import copy
from collections import Counter
from functools import lru_cache
from typing import Any

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.core.episode import Episode, recording_key
from envace_gym.core.messages import parse_act
from envace_gym.env import EnvACEEnv
from envace_gym.wrappers import unwrap


def _step_needs(step: Any) -> tuple[bool, Counter]:
    """What doing a plan step takes: whether it calls tools, and its calls (by recording key) or message."""
    text, calls = parse_act(step)
    if calls:
        return True, Counter(recording_key(c.name, c.arguments) for c in calls)
    return False, Counter({text.strip(): 1})


_text_step_needs = lru_cache(maxsize=4096)(_step_needs)  # a text step is parsed once, not at every act


class OracleAgent(Agent):
    """A perfect actor and a perfect world model for the env it plays in.

    It reads the gold plan through ``env.unwrapped`` (never through ``obs`` or
    ``info``): one gold call per act turn, the task's communicate-info items
    stated before it ends, and on a rehearse turn the real world's answer. Which
    plan step comes next is read from the episode (:meth:`cursor`: the first step
    not done yet), so the same oracle can act in forks of its episode and continues
    its plan after foreign turns; :meth:`bind` gives one that rehearses a fork's world.
    """

    name = "oracle"
    runs_worlds = True

    def __init__(self, env: gym.Env):
        if env is None:
            raise ValueError("the oracle needs the env it plays in: load('oracle', env=env)")
        if not isinstance(env.unwrapped, EnvACEEnv):
            raise ValueError(
                f"the oracle reads the gold answers of an env in this process, and a "
                f"{type(env.unwrapped).__name__} has none (gold answers never cross the wire): "
                "play a remote env with a model agent, or with actions recorded in process"
            )
        self.env = env
        self._episode: Episode | None = None
        self._plan: list = []
        self._opening = 0

    @property
    def _unwrapped(self) -> EnvACEEnv:
        return unwrap(self.env)

    def bind(self, env: gym.Env) -> OracleAgent:
        clone = copy.copy(self)
        clone.env = env
        return clone

    def act(self, obs: dict) -> str:
        env = self._unwrapped
        if obs["role"] == "rehearse":
            call = obs["tool_call"]
            return env.real_response(call["name"], call["arguments"]).content
        if env.episode is not self._episode:
            assert env.episode is not None  # a turn of an episode
            self._episode, task = env.episode, env.episode.task
            env.suite.grader.require_gold(task)
            self._plan = env.suite.grader.oracle_plan(task)
            # system prompt, the suite's opening messages, the user's first message
            self._opening = len(env.suite.opening_messages(task)) + 2
        cursor = self.cursor(obs)
        if cursor >= len(self._plan):
            return self._plan[-1] if self._plan else "###STOP###"
        return self._plan[cursor]

    def cursor(self, obs: dict) -> int:
        """The first plan step this episode has not done yet: a call step is done once the
        assistant made its calls (same names and arguments, validated or not), a message step
        once the assistant said it; each made call or said message does one step. So foreign
        turns (a hostile or private-rehearsal agent's) skip no gold step, in forks too."""
        episode = self._unwrapped.episode
        assert episode is not None  # asked during an episode
        made = Counter(recording_key(c.name, c.arguments) for c in episode.calls if c.requestor == "assistant")
        said = Counter(
            (m.get("content") or "").strip() for m in episode.messages[self._opening :] if m["role"] == "assistant"
        )
        for i, step in enumerate(self._plan):
            calls, done = (_text_step_needs if isinstance(step, str) else _step_needs)(step)
            pool = made if calls else said
            if any(pool[key] < n for key, n in done.items()):
                return i
            pool.subtract(done)
        return len(self._plan)

    def turns_taken(self, obs: dict) -> int:
        """The act turns taken so far in the episode ``obs`` shows (one assistant message each)."""
        return sum(m["role"] == "assistant" for m in obs["messages"][self._opening :])
