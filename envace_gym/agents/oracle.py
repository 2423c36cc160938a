"""The oracle: plays the task's gold actions and rehearses what the real world would answer."""

from __future__ import annotations

import copy

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.env import EnvACEEnv


class OracleAgent(Agent):
    """A perfect actor and a perfect world model for the env it plays in.

    It reads the gold plan through ``env.unwrapped`` (never through ``obs`` or
    ``info``): one gold call per act turn, the task's communicate-info items
    stated before it ends, and on a rehearse turn the real world's answer. Which
    plan step comes next is read from the observation (the act turns taken so
    far), so the same oracle can act in forks of its episode; :meth:`bind` gives
    one that rehearses a fork's world.
    """

    name = "oracle"
    runs_worlds = True

    def __init__(self, env: gym.Env):
        if env is None:
            raise ValueError("the oracle needs the env it plays in: load('oracle', env=env)")
        self.env = env
        self._episode = None
        self._plan: list = []
        self._opening = 0

    @property
    def _unwrapped(self) -> EnvACEEnv:
        return self.env.unwrapped

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
            self._episode, task = env.episode, env.episode.task
            env.suite.require_gold(task)
            self._plan = env.suite.oracle_plan(task)
            # system prompt, the suite's opening messages, the user's first message
            self._opening = len(env.suite.opening_messages(task)) + 2
        cursor = self.turns_taken(obs)
        if cursor >= len(self._plan):
            return self._plan[-1] if self._plan else "###STOP###"
        return self._plan[cursor]

    def turns_taken(self, obs: dict) -> int:
        """The act turns taken so far in the episode ``obs`` shows (one assistant message each)."""
        return sum(m["role"] == "assistant" for m in obs["messages"][self._opening:])
