"""The figures of runs, comparisons, evaluations and training, drawn without pyplot (the caller's matplotlib
backend stays as it is): each ``*_figure`` gives a matplotlib ``Figure``, each ``plot_*`` writes one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envace_gym.fidelity import METRICS
from envace_gym.play.records import rows

if TYPE_CHECKING:
    from envace_gym.evaluation.results import BenchmarkResult, EvalResults


#: The training curves: (title, metric keys of metrics.jsonl's rows).
TRAINING_PANELS = (
    ("reward by role", ("reward", "reward/act", "reward/rehearse")),
    ("loss", ("loss/act", "loss/rehearse", "eval/loss/act", "eval/loss/rehearse")),
    ("KL and clip fraction", ("kl/act", "kl/rehearse", "clip_fraction/act", "clip_fraction/rehearse")),
    ("held-out evaluation", ("eval/reward", "eval/leaf_match", "eval/parsed")),
)


def _figure(**kwargs):
    """A matplotlib ``Figure`` (no pyplot: the caller's backend stays as it is), matplotlib imported
    here: a command that draws nothing does not pay for it."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def training_figure(metrics: list[dict], title: str = ""):
    """The curves of a training run's ``metrics.jsonl`` rows over its steps, one panel of
    :data:`TRAINING_PANELS` per group with a number: a matplotlib figure, or None without one."""

    def points(key: str) -> list[tuple]:
        return [(r["step"], r[key]) for r in metrics if isinstance(r.get(key), (int, float)) and "step" in r]

    panels = [(name, [k for k in keys if points(k)]) for name, keys in TRAINING_PANELS]
    panels = [(name, keys) for name, keys in panels if keys]
    if not panels:
        return None
    fig = _figure(figsize=(3.6 * len(panels), 2.8))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (name, keys) in zip(axes[0], panels):
        for key in keys:
            ax.plot(*zip(*points(key)), marker="o", ms=2, label=key)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_training(path: Path, png: Path) -> None:
    """The training curves of ``metrics.jsonl`` (:func:`training_figure`) as a PNG."""
    fig = training_figure(rows(path)) or _figure()  # no curve yet: an empty figure
    fig.savefig(png, dpi=110)


def fidelity_figure(summary: dict[str, dict], title: str):
    """Horizontal grouped bars of the fidelity measures, one row per tool (full names, in the
    table's order): the figure grows in height with the tools, so 80 of them stay readable."""
    import numpy as np

    tools = list(summary)
    y = np.arange(len(tools))
    height = 0.8 / len(METRICS)
    fig = _figure(figsize=(8.0, 1.6 + 0.4 * len(tools)))
    ax = fig.subplots()
    for i, metric in enumerate(METRICS):
        ax.barh(y + (i - len(METRICS) / 2 + 0.5) * height, [summary[t][metric] for t in tools], height, label=metric)
    ax.set_yticks(y, [f"{t} ({summary[t]['calls']})" for t in tools], fontsize=8)
    ax.set_ylim(len(tools) - 0.5, -0.5)  # the first tool on top
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("mean over calls")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title, pad=24)
    ax.legend(fontsize=8, ncols=len(METRICS), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return fig


def plot_fidelity(summary: dict[str, dict], path: Path, title: str) -> None:
    """:func:`fidelity_figure` as a PNG, its margins fitted to the longest tool name."""
    fidelity_figure(summary, title).savefig(path, dpi=120, bbox_inches="tight")


def eval_figure(results: EvalResults):
    """A bar per benchmark: real, under private rehearsal, and the agent's world-model leaf_match (x100),
    each labelled with its value, or "not run" (a benchmark without a score) or "no row" (no world model)."""
    import numpy as np

    shown = [b for b in results.benchmarks if b.in_overall]  # the ones reported apart have tables of their own
    names = [b.name for b in shown]
    own = {
        r.benchmark: r.metrics["leaf_match"]
        for r in results.world_model
        if r.world_model == results.agent and "leaf_match" in r.metrics
    }
    series = {"real": [b.score for b in shown]}
    if results.rehearse:
        series[f"rehearsal N={results.rehearse}"] = [b.rehearsed_score for b in shown]
    if results.world_model:
        series["world model (leaf_match x100)"] = [100 * own[n] if n in own else None for n in names]
    x, width = np.arange(len(names)), 0.8 / len(series)
    fig = _figure(figsize=(1.8 + 1.6 * len(names), 3.6))
    ax = fig.subplots()
    for i, (name, values) in enumerate(series.items()):
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, [v or 0.0 for v in values], width, label=name)
        absent = "no row" if name.startswith("world model") else "not run"
        for bar, b, v in zip(bars, shown, values):
            if b.partial:
                bar.set_hatch("//")
            where = (bar.get_x() + bar.get_width() / 2, bar.get_height())
            text = absent if v is None else f"{v:.1f}"
            ax.annotate(text, where, xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7)

    def label(b: BenchmarkResult) -> str:
        notes = [f"partial: {b.tasks}/{b.full_tasks or '?'} tasks"] * b.partial
        return b.name + "".join(f"\n({note})" for note in notes + ["stand-in backend"] * bool(b.stand_in))

    ax.set_xticks(x, [label(b) for b in shown])
    ax.set_ylim(0, 108)  # room for a full bar's label
    ax.set_ylabel("score (0-100)")
    hatched = " (hatched: partial, not comparable with the paper's rows)" if any(b.partial for b in shown) else ""
    ax.set_title(f"{results.agent}: the paper's benchmarks{hatched}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig


def plot_eval(results: EvalResults, path: Path) -> None:
    """:func:`eval_figure` written to ``path``."""
    eval_figure(results).savefig(path, dpi=120, bbox_inches="tight")
