"""How closely a rehearsed tool response reproduces the real one."""

from __future__ import annotations

import json
import statistics
from typing import Any

from envace_gym.core.errors import error_code_of


def flatten(value: Any) -> dict[str, Any]:
    """Leaf values by key path (``a.b[0].c``), computed without recursion."""
    out: dict[str, Any] = {}
    stack = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict) and item:
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in item.items())
        elif isinstance(item, list) and item:
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(item))
        else:
            out[path] = item
    return out


def fidelity(real: str, rehearsed: str) -> dict:
    """``parsed``, ``shape``, ``leaf_match``, ``error_agree`` and ``exact`` for one call.

    Both sides are tool-message contents (JSON text; rehearsals that failed to
    parse already carry the structured ``malformed_response`` error).
    """
    real_value = json.loads(real)
    rehearsed_value = json.loads(rehearsed)
    parsed = error_code_of(rehearsed_value) != "malformed_response"
    real_leaves, rehearsed_leaves = flatten(real_value), flatten(rehearsed_value)
    union = set(real_leaves) | set(rehearsed_leaves)
    shape = len(set(real_leaves) & set(rehearsed_leaves)) / len(union) if union else 1.0
    hits = sum(1 for k, v in real_leaves.items() if k in rehearsed_leaves and rehearsed_leaves[k] == v)
    return {
        "parsed": parsed,
        "shape": shape,
        "leaf_match": hits / len(real_leaves) if real_leaves else float(not rehearsed_leaves),
        "error_agree": (error_code_of(real_value) is None) == (error_code_of(rehearsed_value) is None),
        "exact": real_value == rehearsed_value,
    }


#: the measures of :func:`fidelity`, as :func:`summarize` averages them
METRICS = ("parsed", "shape", "leaf_match", "error_agree", "exact")


def summarize(records: list[dict]) -> dict[str, dict]:
    """Mean of each fidelity measure per tool and over all calls (``"all"``)."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r["tool"], []).append(r)
    groups = dict(sorted(groups.items()))
    groups["all"] = records
    return {
        tool: {"calls": len(rows), **{m: statistics.fmean(float(r[m]) for r in rows) for m in METRICS}}
        for tool, rows in groups.items()
        if rows
    }
