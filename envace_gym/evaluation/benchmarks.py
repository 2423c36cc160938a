"""The paper's benchmarks, each scored as its own leaderboard scores it, and the paper's reported rows.

- **BFCL v4**: each wrapped category's accuracy (the mean of the env's reward, bfcl-eval's checker
  verdict), then bfcl-eval's own summary helpers in its leaderboard's layout: non-live, live,
  irrelevance, multi-turn and agentic, weighted 10/10/10/30/40. A category not wrapped counts 0, as
  in bfcl-eval's table, and is listed by name.
- **tau2**: per domain, pass^k for k up to the trials with tau2's own ``pass_hat_k`` and success test,
  averaged over tasks; the benchmark is the mean of the domains' pass^1.
- **VitaBench**: per domain the mean reward, as its runner averages; the benchmark is their mean.

A score is on the paper's scale, 0-100.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from envace_gym.suites.bfcl import categories as bfcl_categories

BFCL_PREFIX = "EnvACE/bfcl-"


def bfcl_category(env_id: str) -> str:
    """bfcl-eval's name of a wrapped category: ``EnvACE/bfcl-multi-turn-base-v0`` is ``multi_turn_base``."""
    return env_id.removeprefix(BFCL_PREFIX).removesuffix("-v0").replace("-", "_")


def bfcl_summary_helpers():
    """bfcl-eval's leaderboard module. Its import also loads bfcl-eval's table of model handlers, each
    vendor's SDK with it (installed ``--no-deps``, they are absent); the summary helpers never read that
    table, so it is given as empty while the module loads."""
    import sys
    import types

    name = "bfcl_eval.constants.model_config"
    if "bfcl_eval.eval_checker.eval_runner_helper" not in sys.modules and name not in sys.modules:
        sys.modules[name] = types.ModuleType(name, "not loaded: the vendor SDKs are absent")
        sys.modules[name].MODEL_CONFIG_MAPPING = {}
        try:
            import bfcl_eval.eval_checker.eval_runner_helper  # noqa: F401
        finally:
            del sys.modules[name]
    return sys.modules["bfcl_eval.eval_checker.eval_runner_helper"]


@functools.cache
def absent_category(name: str) -> dict:
    """bfcl-eval's entry for a category without results: accuracy 0, its entry count (read from its
    dataset, so kept once per process) and display N/A."""
    return bfcl_summary_helpers().get_category_score({}, name)


def bfcl_score(rewards: dict[str, list[float]]) -> dict:
    """BFCL v4's overall and group accuracies (0-100) from each played env's rewards, by bfcl-eval's
    summary helpers; categories without episodes are bfcl-eval's N/A (0 in the sums)."""
    helpers = bfcl_summary_helpers()
    calculate_unweighted_accuracy = helpers.calculate_unweighted_accuracy
    calculate_weighted_accuracy = helpers.calculate_weighted_accuracy
    calculate_percentage_weighted_accuracy = helpers.calculate_percentage_weighted_accuracy
    get_category_score = helpers.get_category_score

    played = {
        bfcl_category(env_id): {"accuracy": statistics.fmean(r), "total_count": len(r)}
        for env_id, r in rewards.items()
        if r
    }

    def cat(name: str) -> dict:
        return get_category_score(played, name) if name in played else dict(absent_category(name))

    simple = calculate_unweighted_accuracy([cat("simple_python"), cat("simple_java"), cat("simple_javascript")])
    non_live_parts = [simple, cat("multiple"), cat("parallel"), cat("parallel_multiple")]
    non_live = calculate_unweighted_accuracy(non_live_parts, display_na_if_category_missing=False)
    live_parts = [cat("live_simple"), cat("live_multiple"), cat("live_parallel"), cat("live_parallel_multiple")]
    live = calculate_weighted_accuracy(live_parts, display_na_if_category_missing=False)
    multi_turn_parts = [cat(f"multi_turn_{c}") for c in ("base", "miss_func", "miss_param", "long_context")]
    multi_turn = calculate_unweighted_accuracy(multi_turn_parts, display_na_if_category_missing=False)
    web_search = calculate_unweighted_accuracy([cat("web_search_base"), cat("web_search_no_snippet")])
    memory = calculate_unweighted_accuracy([cat("memory_kv"), cat("memory_vector"), cat("memory_rec_sum")])
    agentic = calculate_unweighted_accuracy([web_search, memory], display_na_if_category_missing=False)
    irrelevance = calculate_unweighted_accuracy([cat("irrelevance"), cat("live_irrelevance")])
    overall = calculate_percentage_weighted_accuracy(
        [non_live, live, irrelevance, multi_turn, agentic], [10, 10, 10, 30, 40], display_na_if_category_missing=False
    )
    groups = {"non_live": non_live, "live": live, "irrelevance": irrelevance, "multi_turn": multi_turn}
    groups["agentic"] = agentic
    return {
        "score": 100 * overall["accuracy"],
        # a group none of whose categories ran is not run (None), not 0
        "parts": {
            name: 100 * g["accuracy"] if any(c in played for c in BFCL_GROUPS[name]) else None
            for name, g in groups.items()
        },
        "categories": {name: 100 * c["accuracy"] for name, c in sorted(played.items())},
    }


#: BFCL v4's leaderboard groups, by the categories in each
BFCL_GROUPS = {
    "non_live": ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple"),
    "live": ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"),
    "irrelevance": ("irrelevance", "live_irrelevance"),
    "multi_turn": ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"),
    "agentic": ("web_search_base", "web_search_no_snippet", "memory_kv", "memory_vector", "memory_rec_sum"),
}


def tau2_score(records: dict[str, list[dict]]) -> dict:
    """pass^k per domain (tau2's ``pass_hat_k`` over each task's trials, then the mean over tasks, k up
    to the fewest trials of a task), and the benchmark's score, the mean of the domains' pass^1."""
    from tau2.metrics.agent_metrics import is_successful, pass_hat_k

    domains = {}
    for env_id, rows in records.items():
        if not rows:
            continue
        trials: dict[str, list[bool]] = {}
        for r in rows:
            trials.setdefault(r["task_id"], []).append(is_successful(r["reward"]))
        most = min(len(t) for t in trials.values())
        domains[domain_name(env_id)] = {
            f"pass^{k}": 100 * statistics.fmean(pass_hat_k(len(t), sum(t), k) for t in trials.values())
            for k in range(1, most + 1)
        }
    return {
        "score": statistics.fmean(d["pass^1"] for d in domains.values()) if domains else None,
        "parts": {f"{name} {k}": v for name, d in domains.items() for k, v in d.items()},
    }


def mean_score(records: dict[str, list[dict]]) -> dict:
    """The mean reward per env (VitaBench's runner's average, and any suite's), and their mean."""
    parts = {domain_name(e): 100 * statistics.fmean(r["reward"] for r in rows) for e, rows in records.items() if rows}
    return {"score": statistics.fmean(parts.values()) if parts else None, "parts": parts}


def domain_name(env_id: str) -> str:
    """``EnvACE/tau2-retail-v0`` is ``retail``: an env's short name in a table."""
    name = env_id.split("/")[-1].removesuffix("-v0")
    for prefix in ("tau2-", "vitabench-", "bfcl-"):
        name = name.removeprefix(prefix)
    return name


@dataclass(frozen=True)
class Benchmark:
    """A benchmark of the table: its envs, the split it is scored on, how its records become a score
    (``score(records by env id) -> {"score", "parts", ...}``), what it needs, and what it leaves out."""

    name: str
    env_ids: tuple[str, ...]
    score: Callable[[dict[str, list[dict]]], dict]
    split: str | None = None
    needs_judge: bool = False
    has_world: Callable[[str], bool] = lambda env_id: True  # which envs have a world (calls that run)
    missing: tuple[str, ...] = field(default_factory=tuple)
    in_overall: bool = True  # False: reported in a table of its own, as its leaderboard reports it


def _bfcl(records: dict[str, list[dict]]) -> dict:
    return bfcl_score({e: [r["reward"] for r in rows] for e, rows in records.items()})


BFCL_IDS = tuple(bfcl_categories.env_id(c) for c in bfcl_categories.ALL if c != bfcl_categories.FORMAT_SENSITIVITY)

#: The paper's three benchmarks, in its table's order.
PAPER = (
    Benchmark(
        "BFCL v4",
        BFCL_IDS,
        _bfcl,
        has_world=lambda env_id: "multi-turn" in env_id,
    ),
    Benchmark("tau2", tuple(f"EnvACE/tau2-{d}-v0" for d in ("retail", "airline", "telecom")), tau2_score, "test"),
    Benchmark(
        "VitaBench",
        ("EnvACE/vitabench-delivery-v0", "EnvACE/vitabench-instore-v0"),
        mean_score,
        needs_judge=True,
    ),
)


def _format_sensitivity(records: dict[str, list[dict]]) -> dict:
    """bfcl-eval's format-sensitivity report: the accuracy over every task, then the spread of the formats'
    accuracies (``max delta``, ``std``) and each format's, as its leaderboard's own table shows them."""
    from envace_gym.suites.bfcl.format_sensitivity import format_sensitivity_score

    by_task: dict[str, list[float]] = {}
    for rows in records.values():
        for r in rows:
            by_task.setdefault(r["task_id"], []).append(r["reward"])
    report = format_sensitivity_score(by_task)
    formats = {name: value for name, value in report["configs"].items() if value is not None}
    return {"score": report["accuracy"], "parts": {"max delta": report["max_delta"], "std": report["std"], **formats}}


#: Played with the paper's set and reported apart, outside the overall: BFCL v4's format sensitivity,
#: which bfcl-eval's leaderboard leaves out of its overall (a non-scoring category) and reports on its own.
APART = (
    Benchmark(
        "BFCL v4 format sensitivity",
        (bfcl_categories.env_id(bfcl_categories.FORMAT_SENSITIVITY),),
        _format_sensitivity,
        has_world=lambda env_id: False,
        in_overall=False,
    ),
)


KNOWN = PAPER + APART  #: what ``eval --suites paper`` plays


def own_benchmark(env_id: str) -> Benchmark:
    """A benchmark of one env outside the paper's (an MCP or FinMCP-format suite, a module's id): its
    mean reward."""
    return Benchmark(env_id, (env_id,), mean_score)


#: The EnvACE paper's reported rows (not measured here): benchmark scores and the overall, None where
#: the paper's summary gives no number.
REPORTED = {
    "EnvACE-8B": {"BFCL v4": 46.04, "tau2": 36.7, "VitaBench": 16.0, "overall": 32.91},
    "Qwen3-8B": {"overall": 28.48},
    "EnvScaler-8B": {"overall": 31.92},
    "AWM-14B": {"overall": 32.54},
    "EnvACE-8B + rehearsal, parallel": {"tau2": 40.9},
    "EnvACE-8B + rehearsal, sequential": {"tau2": 38.5},
}
