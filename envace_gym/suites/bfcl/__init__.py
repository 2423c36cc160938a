"""The BFCL v4 suites: ``EnvACE/bfcl-<category>-v0`` on bfcl-eval's data and backends. A category's
module (and bfcl-eval with it) is imported when its suite is first asked for."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from envace_gym.suites.bfcl import categories

if TYPE_CHECKING:
    from envace_gym.core.suite import Suite

CATEGORIES = categories.ALL


def get_suite(category: str) -> Suite:
    """The process-wide suite of one BFCL category (its entries are read once)."""
    module: ModuleType
    if category in categories.MULTI_TURN:
        from envace_gym.suites.bfcl import multi_turn as module
    elif category in categories.SINGLE_TURN + categories.LANGUAGES:
        from envace_gym.suites.bfcl import single_turn as module
    elif category in categories.MEMORY:
        from envace_gym.suites.bfcl import memory as module
    elif category in categories.WEB_SEARCH:
        from envace_gym.suites.bfcl import web_search as module
    elif category == categories.FORMAT_SENSITIVITY:
        from envace_gym.suites.bfcl import format_sensitivity

        return format_sensitivity.format_sensitivity_suite()
    else:
        raise ValueError(f"unknown BFCL category {category!r}; choose from {CATEGORIES}")
    return module.category_suite(category)


__all__ = ["CATEGORIES", "get_suite"]
