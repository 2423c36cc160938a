"""The random agent: samples the env's action space for the current role and tools."""

from __future__ import annotations

import copy
from typing import cast

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.spaces import ActionSpace


class RandomAgent(Agent):
    """Schema-valid random calls, plain text and malformed calls; random JSON rehearsals."""

    name = "random"

    def __init__(self, env: gym.Env, seed: int | None = None):
        if env is None:
            raise ValueError("the random agent samples the env's action space: load('random', env=env)")
        self.env = env
        self.space = cast(ActionSpace, env.unwrapped.action_space)
        if seed is not None:
            self.space.seed(seed)

    def bind(self, env: gym.Env) -> RandomAgent:
        """A random agent sampling ``env``'s action space (with that space's generator)."""
        clone = copy.copy(self)
        clone.env, clone.space = env, cast(ActionSpace, env.unwrapped.action_space)
        return clone

    def reseed(self, seed: int) -> None:
        self.space.seed(seed)

    def act(self, obs: dict) -> str:
        self.space.role = obs["role"]
        return self.space.sample()
