"""Agents by name: ``oracle``, ``random``, ``knn``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.agents.knn import KNNAgent
from envace_gym.agents.oracle import OracleAgent
from envace_gym.agents.random_agent import RandomAgent

AGENTS = {"oracle": OracleAgent, "random": RandomAgent, "knn": KNNAgent}


def load(name: str, env: gym.Env | None = None, **kwargs: Any) -> Agent:
    """The agent called ``name`` (the names of the command line), bound to ``env`` where it needs one."""
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; available: {sorted(AGENTS)}")
    return AGENTS[name](env, **kwargs)


__all__ = ["AGENTS", "Agent", "KNNAgent", "OracleAgent", "RandomAgent", "load"]
