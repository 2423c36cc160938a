"""Running whole episodes of an agent in an env, one JSON-ready record per episode."""

from __future__ import annotations

import time
from collections.abc import Iterator

import gymnasium as gym

from envace_gym.agents import Agent


def run_episode(env: gym.Env, agent: Agent, task_id: str, seed: int | None = None) -> dict:
    """Play one episode to its end and describe it (the ``run`` record of DESIGN.md)."""
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    n_calls, reward, done = 0, 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        n_calls += len(info["tool_calls"])
        done = terminated or truncated
    return {
        "task_id": task_id, "reward": reward, "reward_source": info["reward_source"],
        "reward_info": info["reward_info"], "dynamics": info["dynamics"], "agent": agent.name,
        "turns": info["turn"], "tool_calls": n_calls, "ended_by": info["ended_by"],
        "error": info.get("error"), "seconds": round(time.perf_counter() - start, 4),
    }


def run_episodes(env: gym.Env, agent: Agent, task_ids: list[str], seed: int = 0) -> Iterator[dict]:
    for i, task_id in enumerate(task_ids):
        yield run_episode(env, agent, task_id, seed=seed + i)
