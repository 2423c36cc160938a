"""The BFCL v4 suites: ``EnvACE/bfcl-<category>-v0`` on bfcl-eval's data and backends."""

from __future__ import annotations

from envace_gym.env import EnvACEEnv
from envace_gym.envs.bfcl import format_sensitivity, memory, multi_turn, single_turn, web_search
from envace_gym.suite import Suite

CATEGORIES = (
    *multi_turn.CATEGORIES,
    *single_turn.CATEGORIES,
    *single_turn.LANGUAGES,
    *memory.CATEGORIES,
    *web_search.CATEGORIES,
    format_sensitivity.CATEGORY,
)


def get_suite(category: str) -> Suite:
    """The process-wide suite of one BFCL category (its entries are read once)."""
    for module in (multi_turn, single_turn, memory, web_search):
        if category in module.CATEGORIES or category in getattr(module, "LANGUAGES", ()):
            return module.category_suite(category)
    if category == format_sensitivity.CATEGORY:
        return format_sensitivity.format_sensitivity_suite()
    raise ValueError(f"unknown BFCL category {category!r}; choose from {CATEGORIES}")


def make_env(category: str, **kwargs) -> EnvACEEnv:
    """The env of one BFCL category; multi-turn ones keep bfcl-eval's per-turn step limit."""
    suite = get_suite(category)
    kwargs.setdefault("max_turns", None)
    if not suite.one_step:
        kwargs.setdefault("max_steps_per_turn", multi_turn.MAX_STEPS_PER_TURN)
    return EnvACEEnv(suite, split=kwargs.pop("split", None), **kwargs)


__all__ = ["CATEGORIES", "get_suite", "make_env"]
