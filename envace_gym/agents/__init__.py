"""Agents by name (DESIGN.md): ``oracle``, ``random``, ``knn``, ``smollm2``, ``hf:``, ``vllm:`` (offline or
``@BASE_URL``), ``openai:``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.agents.knn import KNNAgent
from envace_gym.agents.oracle import OracleAgent
from envace_gym.agents.random_agent import RandomAgent

AGENTS = {"oracle": OracleAgent, "random": RandomAgent, "knn": KNNAgent}
NAMES = "oracle, random, knn, smollm2, hf:PATH, vllm:PATH, vllm:PATH@BASE_URL, openai:MODEL@BASE_URL"


def load(name: str, env: gym.Env | None = None, **kwargs: Any) -> Agent:
    """The agent called ``name`` (the names of the command line), bound to ``env`` where it needs one."""
    kind, _, arg = name.partition(":")
    if name in AGENTS:
        return AGENTS[name](env, **kwargs)
    if name == "smollm2":
        from envace_gym.agents.hf import load_smollm2

        return load_smollm2(env, **kwargs)
    if kind == "hf" and arg:
        from envace_gym.agents.hf import HFAgent

        return HFAgent(arg, env, **kwargs)
    if kind == "vllm" and "@" in arg:
        from envace_gym.agents.vllm import VLLMServerAgent

        path, _, base_url = arg.rpartition("@")
        return VLLMServerAgent(path, base_url, env, **kwargs)
    if kind == "vllm" and arg:
        from envace_gym.agents.vllm import VLLMAgent

        return VLLMAgent(arg, env, **kwargs)
    if kind == "openai" and "@" in arg:
        from envace_gym.agents.openai import OpenAIAgent
        from envace_gym.endpoint import parse_spec

        model, base_url, options = parse_spec(name, "openai:")
        return OpenAIAgent(model, base_url, env, **options | kwargs)
    raise ValueError(f"unknown agent {name!r}; use one of: {NAMES}")


__all__ = ["AGENTS", "Agent", "KNNAgent", "OracleAgent", "RandomAgent", "load"]
