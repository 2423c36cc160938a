"""Agents given to ``run`` as PATH.py:CLASS by tests that start it as a user would."""

import time

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.agents.oracle import OracleAgent


class Stalled(Agent):
    """Its first turn never ends (it sleeps ten minutes): a run of it is stopped mid-episode."""

    name = "stalled"

    def act(self, obs: dict) -> str:
        time.sleep(600)
        return ""


class KeyedOracle(OracleAgent):
    """The oracle, taking a secret (``api_key``) and a setting (``temperature``) as a model agent does."""

    def __init__(self, env: gym.Env, api_key: str = "EMPTY", temperature: float = 0.0):
        super().__init__(env)
        self.api_key, self.temperature = api_key, temperature
