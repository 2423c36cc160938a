"""Held-out measures of a policy: reward, partial credit and valid calls of its act role, fidelity
of its rehearse role."""

from __future__ import annotations

import statistics

import gymnasium as gym

from envace_gym import agents
from envace_gym.play.compare import compare_calls
from envace_gym.play.loop import run_episode
from envace_gym.rewards import actions_share_reward
from envace_gym.wrappers import unwrap


def held_out(env: gym.Env, agent, task_ids: list[str], seed: int = 0) -> dict:
    """Episodes of ``agent`` in ``env`` (:func:`~envace_gym.play.loop.run_episode`): mean reward, mean share
    of gold actions matched (``gold_share``, :func:`~envace_gym.rewards.actions_share_reward`), and the
    valid-call rate: the share of act turns that make at least one tool call and whose calls all pass
    validation (``error`` None in ``info["tool_calls"]``)."""
    turns: list[bool] = []  # each act turn: valid or not

    def count(role: str, info: dict) -> None:
        if role == "act":
            calls = info["tool_calls"]
            turns.append(bool(calls) and all(c["error"] is None for c in calls))

    rewards, shares = [], []
    for i, task_id in enumerate(task_ids):
        rewards.append(run_episode(env, agent, task_id, seed + i, on_step=count)["reward"])
        episode = unwrap(env).episode
        assert episode is not None  # the one just played
        shares.append(actions_share_reward(episode)[0])
    return {
        "reward": statistics.fmean(rewards),
        "gold_share": statistics.fmean(shares),
        "valid_calls": statistics.fmean(turns) if turns else 0.0,
    }


def fidelity(env: gym.Env, agent, task_ids: list[str], seed: int = 0) -> dict:
    """The rehearse role's fidelity on ``task_ids``' calls (:func:`~envace_gym.play.compare.compare_calls`:
    the oracle acts, ``agent`` rehearses, the world answers): mean ``parsed``, ``leaf_match`` and ``exact``."""
    calls = list(compare_calls(env, agents.load("oracle", env=env), agent, task_ids, seed=seed))
    return {
        m: statistics.fmean(float(c[m]) for c in calls) if calls else None for m in ("parsed", "leaf_match", "exact")
    }
