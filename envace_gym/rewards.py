"""Terminal rewards and their provenance (``info["reward_source"]``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Union

from envace_gym.suite import Episode

RewardFn = Callable[[Episode], Union[float, tuple[float, dict]]]
DEFAULT_REWARD = {"real": "world", "shadow": "world", "rehearsed": "actions",
                  "simulated": "actions", "replay": "actions", "mixed": "actions"}
WORLD_DYNAMICS = ("real", "shadow")


def world_reward(episode: Episode) -> tuple[float, dict]:
    """The suite's real evaluator on the episode's own world."""
    return episode.suite.evaluate(episode.task, episode.world, episode)


def actions_reward(episode: Episode) -> tuple[float, dict]:
    """Match of the episode's calls against the task's gold actions."""
    return episode.suite.score_actions(episode.task, episode)


def replay_reward(episode: Episode) -> tuple[float, dict]:
    """The episode's calls executed on a fresh world afterwards, then evaluated."""
    return episode.suite.evaluate(episode.task, episode.replayed_world(), episode)


REWARDS: dict[str, RewardFn] = {"world": world_reward, "actions": actions_reward, "replay": replay_reward}


def check_reward(reward: str | RewardFn, dynamics: str) -> None:
    if callable(reward):
        return
    if reward not in REWARDS:
        raise ValueError(f"unknown reward {reward!r}; use one of {sorted(REWARDS)} or a callable")
    if reward == "world" and dynamics not in WORLD_DYNAMICS:
        raise ValueError(f"reward='world' reads the real world, which {dynamics!r} dynamics never "
                         "touch; use reward='replay' or 'actions'")


def compute_reward(reward: str | RewardFn, episode: Episode) -> tuple[float, str, dict]:
    """``(value, source, parts)`` for a finished episode."""
    source = reward if isinstance(reward, str) else getattr(reward, "__name__", "callable")
    if episode.truncated:
        return 0.0, source, {"note": "episode truncated before it ended"}
    out = (REWARDS[reward] if isinstance(reward, str) else reward)(episode)
    value, parts = out if isinstance(out, tuple) else (out, {})
    return float(value), source, parts
