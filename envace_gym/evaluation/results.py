"""What ``envace-gym eval`` writes: ``results.json`` (:class:`EvalResults`), its Markdown table and a PNG."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envace_gym.evaluation.benchmarks import REPORTED

WORLD_METRICS = ("parsed", "shape", "leaf_match", "exact", "error_agree")


class BenchmarkResult(BaseModel):
    """One benchmark's score for the evaluated agent, as its leaderboard aggregates."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The benchmark: BFCL v4, tau2, VitaBench, or an env id of its own.")
    score: float | None = Field(description="The benchmark's score, 0-100; None when none of its envs ran.")
    parts: dict[str, float | None] = Field(
        description="Its parts: BFCL's groups, tau2's pass^k per domain, a mean per env; None: not run."
    )
    episodes: int = Field(description="Episodes scored.")
    failed: dict[str, int] = Field(description="Episodes that failed, by class (ended_by: error), scored 0.")
    skipped: dict[str, str] = Field(description="Envs of the benchmark not run, each with the reason.")
    missing: list[str] = Field(description="Categories of the benchmark the project does not wrap (counted 0).")
    records: list[str] = Field(description="The run records' files (JSONL), one per env.")
    real_calls: int = Field(description="Tool calls the real world answered, over all episodes.")
    coverage: dict[str, str] = Field(
        default_factory=dict,
        description="Per env (or BFCL category) of the whole benchmark: 'N/M tasks' played, or not run or wrapped.",
    )
    tasks: int = Field(default=0, description="Distinct tasks played.")
    full_tasks: int | None = Field(
        default=None, description="The whole benchmark's tasks; None where a count is unknown."
    )
    partial: bool = Field(
        default=False,
        description="The score covers less than the whole benchmark (the paper's row): not comparable with it.",
    )
    stand_in: dict[str, str] = Field(
        default_factory=dict,
        description="Envs scored on a stand-in for their real backend (web search's offline corpus), and which.",
    )
    in_overall: bool = Field(default=True, description="False: reported in a table of its own, outside the overall.")
    rehearsed_score: float | None = Field(
        default=None, description="With --rehearse N: the score under private rehearsal."
    )
    rehearsed_real_calls: int | None = Field(
        default=None, description="With --rehearse N: the real calls of those runs."
    )


class WorldModelRow(BaseModel):
    """One world model's fidelity on one benchmark's calls (shadow episodes: the real world answers,
    the world model writes its own answer first)."""

    model_config = ConfigDict(extra="forbid")
    benchmark: str
    world_model: str = Field(description="The rehearser: the agent, oracle (the bound) or knn (the baseline).")
    calls: int = Field(description="Calls compared.")
    metrics: dict[str, float] = Field(
        description="Means over the calls: parsed, shape, leaf_match, exact, error_agree."
    )
    state_dependent_calls: int = Field(description="Calls whose real answer depends on the episode's earlier calls.")
    state_dependent_leaf_match: float | None = Field(description="leaf_match over those calls alone.")
    by_tool: dict[str, dict[str, float]] = Field(description="leaf_match and calls per tool.")
    skipped: str | None = Field(default=None, description="Why this row has no calls, if it has none.")
    failed: dict[str, int] = Field(
        default_factory=dict,
        description="Shadow episodes the world model failed in, by error: each ended there, its earlier calls kept.",
    )
    determinism: dict[str, float | int | None] | None = Field(
        default=None,
        description="With eval's --replays N: how much the rehearsals of the same calls vary across N replays "
        "(replays, calls, exact: the share rehearsed alike every time, leaf: the mean agreement).",
    )


class FailureCause(BaseModel):
    """The episodes that failed for one cause: messages that differ only in their numbers (a token count,
    a task's number) are one cause, shown by its first message whole."""

    model_config = ConfigDict(extra="forbid")
    message: str = Field(description="The first such episode's error, whole (whitespace folded).")
    episodes: int = Field(description="Episodes that failed for this cause (each scored 0).")
    envs: list[str] = Field(description="The envs they were played in.")


def failure_causes(records: dict[str, list[dict]]) -> list[FailureCause]:
    """The failed episodes of ``records`` (run records by env id), by cause, the most frequent first."""
    causes: dict[str, FailureCause] = {}
    for env_id, rows in records.items():
        for r in rows:
            if not r.get("error"):
                continue
            message = " ".join(f"{r['ended_by']}: {r['error']}".split())
            cause = causes.setdefault(re.sub(r"\d+", "N", message), FailureCause(message=message, episodes=0, envs=[]))
            cause.episodes += 1
            if env_id not in cause.envs:
                cause.envs.append(env_id)
    return sorted(causes.values(), key=lambda c: -c.episodes)


class EvalResults(BaseModel):
    """``results.json``: the settings, each benchmark's result, the overall, and the world-model table."""

    model_config = ConfigDict(extra="forbid")
    agent: str
    user: str = Field(description="tau2's user: 'scripted' (tau2's own is an LLM) or the LLM user's MODEL@BASE_URL.")
    judge: str | None
    trials: int
    limit: int | None = Field(description="The first N tasks of each env; None: every task.")
    rehearse: int = Field(description="Private rehearsal attempts per turn in the rehearsed runs (0: none).")
    benchmarks: list[BenchmarkResult]
    overall: float | None = Field(
        description="The paper's overall: the mean of the paper benchmarks scored (of the benchmarks given, "
        "without a paper one); the paper's own is over all three."
    )
    overall_of: list[str] = Field(description="The benchmarks the overall is the mean of.")
    comparable: bool = Field(
        False, description="Whether the overall compares with the paper's: every paper benchmark scored and whole."
    )
    world_model: list[WorldModelRow] = Field(default_factory=list)
    world_model_left_out: dict[str, str] = Field(
        default_factory=dict, description="Envs without world-model rows, each with the reason."
    )
    reported: dict[str, dict[str, float]] = Field(description="The paper's reported rows, not measured here.")
    failure_causes: list[FailureCause] = Field(
        default_factory=list, description="The failed episodes of every benchmark, by cause."
    )

    @classmethod
    def read(cls, path: Path) -> EvalResults:
        """An eval's ``results.json``; ValueError naming the file and what is wrong with it, a field that
        holds a NaN or an infinity included (no table or page can show one)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError) as e:
            raise ValueError(f"{path} is not JSON: {e}") from None
        stack: list[tuple[str, Any]] = [("", data)]
        while stack:
            where, value = stack.pop()
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{path}: {where} is {value}, not a finite number")
            if isinstance(value, dict):
                stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
            elif isinstance(value, list):
                stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
        try:
            return cls.model_validate(data)
        except ValueError as e:  # pydantic's ValidationError is one
            raise ValueError(f"{path} is not an eval's results: {str(e).splitlines()[0]}") from None


def overall(benchmarks: list[BenchmarkResult]) -> float | None:
    """The mean of the benchmarks' scores that exist."""
    scores = [b.score for b in benchmarks if b.score is not None]
    return statistics.fmean(scores) if scores else None


def _cell(value: Any) -> str:
    return "" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def markdown(results: EvalResults) -> str:
    """The paper's table (benchmarks, then overall), the agent's row and the reported rows beside; the
    parts, the world-model table and every skipped env and failure class below."""
    table = [b for b in results.benchmarks if b.in_overall]
    names = [b.name for b in table]
    user = "scripted user" if results.user == "scripted" else f"LLM user {results.user}"
    user = f", tau2 with the {user}" if "tau2" in names else ""
    some = len(results.overall_of) < len([b for b in table if b.name in REPORTED["EnvACE-8B"]])
    of = f" (of {', '.join(results.overall_of)})" if some and results.overall_of else ""
    overall_cell = _cell(results.overall) + (
        " (partial)" if results.overall is not None and not results.comparable else ""
    )
    lines = [
        f"| model | {' | '.join(names)} | overall{of} |",
        "|---" * (len(names) + 2) + "|",
        f"| {results.agent} (measured{user}) | "
        + " | ".join(_cell(b.score) + (" (partial)" if b.partial and b.score is not None else "") for b in table)
        + f" | {overall_cell} |",
    ]
    if results.rehearse:
        lines.append(
            f"| {results.agent} + rehearsal N={results.rehearse} (measured) | "
            + " | ".join(_cell(b.rehearsed_score) for b in table)
            + f" | {_cell(overall([b.model_copy(update={'score': b.rehearsed_score}) for b in table]))} |"
        )
    for model, reported in results.reported.items():
        lines.append(
            f"| {model} (reported) | " + " | ".join(_cell(reported.get(n)) for n in [*names, "overall"]) + " |"
        )
    partial = [b.name for b in results.benchmarks if b.partial and b.score is not None]
    if partial or (results.overall is not None and not results.comparable):
        lines += [
            "",
            f"(partial): covers less than the whole benchmark{'s' if len(partial) > 1 else ''} "
            f"({', '.join(partial) or 'the paper evaluation'}); not comparable with the reported rows. "
            "The coverage is under each benchmark.",
        ]
    for b in results.benchmarks:
        lines.append("")
        whole = f"{b.tasks} of {b.full_tasks if b.full_tasks is not None else '?'} tasks"
        apart = "" if b.in_overall else " (reported apart, outside the overall, as its leaderboard reports it)"
        lines.append(f"**{b.name}**{apart}: {b.episodes} episodes, {whole}, {b.real_calls} real calls")
        if not b.in_overall:
            lines += ["", "| model | accuracy | " + " | ".join(b.parts) + " |", "|---" * (len(b.parts) + 2) + "|"]
            lines += [f"| {results.agent} | {_cell(b.score)} | " + " | ".join(map(_cell, b.parts.values())) + " |", ""]
        lines += [f"- stand-in: {env} scored on the {what}" for env, what in b.stand_in.items()]
        if b.coverage:
            lines.append("- coverage: " + ", ".join(f"{name} {what}" for name, what in b.coverage.items()))
        if b.rehearsed_score is not None:
            lines.append(
                f"- private rehearsal N={results.rehearse}: {_cell(b.rehearsed_score)} "
                f"(gain {_cell(b.rehearsed_score - (b.score or 0.0))}), {b.rehearsed_real_calls} real calls"
            )
        if b.in_overall:
            lines += [f"- {part}: {'not run' if v is None else _cell(v)}" for part, v in b.parts.items()]
        lines += [f"- failed, {why}: {n} episodes (scored 0)" for why, n in b.failed.items()]
        lines += [f"- not run, {env}: {why}" for env, why in b.skipped.items()]
        if b.missing:
            lines.append(f"- not wrapped (counted 0): {', '.join(b.missing)}")
    if results.world_model:
        lines += ["", "**World model** (shadow episodes; leaf_match over all calls, and over state-dependent ones)", ""]
        probed = next((row.determinism["replays"] for row in results.world_model if row.determinism), None)
        same = f" same over {probed} replays (exact, leaf) |" if probed else ""
        lines += ["| benchmark | world model | calls | " + " | ".join(WORLD_METRICS) + " | state-dependent |" + same]
        lines += ["|---" * (len(WORLD_METRICS) + 4 + bool(probed)) + "|"]
        for row in results.world_model:
            cells = " | ".join(_cell(row.metrics.get(m)) for m in WORLD_METRICS)
            state = f"{_cell(row.state_dependent_leaf_match)} ({row.state_dependent_calls})"
            note = f" ({row.skipped})" if row.skipped else ""
            probe = row.determinism or {}
            same_cell = f" {_cell(probe.get('exact'))}, {_cell(probe.get('leaf'))} |" if probed else ""
            lines.append(f"| {row.benchmark} | {row.world_model}{note} | {row.calls} | {cells} | {state} |{same_cell}")
        lines += [""] + [
            f"- {row.benchmark}, {row.world_model} failed, {why}: {n} episodes (ended there)"
            for row in results.world_model
            for why, n in row.failed.items()
        ]
        lines += [f"- no world-model row, {env}: {why}" for env, why in results.world_model_left_out.items()]
    if results.failure_causes:
        lines += ["", "**Failed episodes, by cause** (each scored 0)", ""]
        for cause in results.failure_causes:
            where = ", ".join(cause.envs)
            lines.append(f"- {cause.episodes} episode{'s' * (cause.episodes > 1)} ({where}): {cause.message}")
    return "\n".join(lines) + "\n"


def reported() -> dict[str, dict[str, float]]:
    """The paper's rows, as results.json keeps them."""
    return {model: dict(row) for model, row in REPORTED.items()}
