"""The oracle: plays the task's gold actions and rehearses what the real world would answer."""

from __future__ import annotations

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.env import EnvACEEnv


class OracleAgent(Agent):
    """A perfect actor and a perfect world model for the env it plays in.

    It reads the gold plan through ``env.unwrapped`` (never through ``obs`` or
    ``info``): one gold call per act turn, the task's communicate-info items
    stated before it ends, and on a rehearse turn the real world's answer.
    """

    name = "oracle"

    def __init__(self, env: gym.Env):
        if env is None:
            raise ValueError("the oracle needs the env it plays in: load('oracle', env=env)")
        self.env = env
        self._episode = None
        self._plan: list = []
        self._cursor = 0

    @property
    def _unwrapped(self) -> EnvACEEnv:
        return self.env.unwrapped

    def act(self, obs: dict) -> str:
        env = self._unwrapped
        if obs["role"] == "rehearse":
            call = obs["tool_call"]
            return env.real_response(call["name"], call["arguments"]).content
        if env.episode is not self._episode:
            self._episode, self._cursor = env.episode, 0
            self._plan = env.suite.oracle_plan(env.episode.task)
        if self._cursor >= len(self._plan):
            return self._plan[-1] if self._plan else "###STOP###"
        self._cursor += 1
        return self._plan[self._cursor - 1]
