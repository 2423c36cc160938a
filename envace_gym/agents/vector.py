"""Agents for Gymnasium vector envs of EnvACE envs (``gym.make_vec``, sync or async)."""

from __future__ import annotations

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.agents.oracle import OracleAgent


class VectorOracle(Agent):
    """The oracle for every sub-env of a vector env: ``act_batch(obs)`` gives one action each.

    The oracle reads the gold plan and the real world through its env, so each action is
    computed where that sub-env lives (``venv.call("act_with", OracleAgent)``; in the worker
    process of an async vector env), on the sub-env's current observation: pass the
    observations the vector env returned last. ``agents.load("oracle", env=venv)`` builds it.
    """

    name = "oracle"

    def __init__(self, venv: gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv):
        self.venv = venv

    def act(self, obs: dict) -> str:
        raise TypeError("VectorOracle acts for all sub-envs at once: use act_batch(observations)")

    def act_batch(self, observations) -> list[str]:
        if len(observations) != self.venv.num_envs:
            raise ValueError(f"expected {self.venv.num_envs} observations (one per sub-env), got {len(observations)}")
        return list(self.venv.call("act_with", OracleAgent))
