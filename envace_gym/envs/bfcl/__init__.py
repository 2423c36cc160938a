"""The BFCL v4 suites: ``EnvACE/bfcl-<category>-v0`` on bfcl-eval's data and backends."""

from __future__ import annotations

from envace_gym.env import EnvACEEnv
from envace_gym.envs.bfcl import multi_turn, single_turn

CATEGORIES = multi_turn.CATEGORIES + single_turn.CATEGORIES


def get_suite(category: str) -> multi_turn.MultiTurnSuite | single_turn.SingleTurnSuite:
    """The process-wide suite of one BFCL category (its entries are read once)."""
    if category in multi_turn.CATEGORIES:
        return multi_turn.category_suite(category)
    if category in single_turn.CATEGORIES:
        return single_turn.category_suite(category)
    raise ValueError(f"unknown BFCL category {category!r}; choose from {CATEGORIES}")


def make_env(category: str, **kwargs) -> EnvACEEnv:
    """The env of one BFCL category; multi-turn ones keep bfcl-eval's per-turn step limit."""
    suite = get_suite(category)
    kwargs.setdefault("max_turns", None)
    if not suite.one_step:
        kwargs.setdefault("max_steps_per_turn", multi_turn.MAX_STEPS_PER_TURN)
    return EnvACEEnv(suite, split=kwargs.pop("split", None), **kwargs)


__all__ = ["CATEGORIES", "get_suite", "make_env"]
