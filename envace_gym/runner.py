"""Running whole episodes of an agent in an env, one JSON-ready record per episode."""

from __future__ import annotations

import time
from collections.abc import Iterator

import gymnasium as gym

from envace_gym.agents import Agent
from envace_gym.endpoint import ModelServerError


def run_episode(env: gym.Env, agent: Agent, task_id: str, seed: int | None = None) -> dict:
    """Play one episode to its end and describe it (the ``run`` record of DESIGN.md).

    An agent whose model server fails ends the episode: reward 0, ``ended_by`` ``agent_error``
    and the failure in ``error``.

    The record also holds the transcript, what ``envace-gym sft`` trains on: ``messages``
    (the conversation at the end), ``tools`` (the tool schemas), ``opening_messages`` (how
    many leading messages the episode opened with: system prompt, the suite's opening, the
    user's first message; every later assistant message is the agent's) and ``real_call_ids``
    (the tool calls the real world answered; the other tool messages were rehearsed,
    simulated, replayed or validation errors).
    """
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    opening = len(obs["messages"])
    n_calls, reward, done, failure = 0, 0.0, False, None
    while not done:
        try:
            action = agent.act(obs)
        except ModelServerError as e:
            failure = str(e)
            break
        obs, reward, terminated, truncated, info = env.step(action)
        n_calls += len(info["tool_calls"])
        done = terminated or truncated
    episode = env.unwrapped.episode
    return {
        "task_id": task_id, "reward": reward, "reward_source": info.get("reward_source"),
        "reward_info": info.get("reward_info", {}), "dynamics": info["dynamics"], "agent": agent.name,
        "turns": info["turn"], "tool_calls": n_calls, "ended_by": "agent_error" if failure else info["ended_by"],
        "error": failure or info.get("error"), "seconds": round(time.perf_counter() - start, 4),
        "messages": list(episode.messages), "tools": env.unwrapped.tools.schemas, "opening_messages": opening,
        "real_call_ids": [c.id for c in episode.calls if c.source == "real" and c.requestor == "assistant"],
    }


def run_episodes(env: gym.Env, agent: Agent, task_ids: list[str], seed: int = 0) -> Iterator[dict]:
    for i, task_id in enumerate(task_ids):
        yield run_episode(env, agent, task_id, seed=seed + i)
