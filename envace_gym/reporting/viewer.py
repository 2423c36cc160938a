"""``envace-gym view``: run records, compare records and training folders as one self-contained HTML file.

Everything the page shows comes from the records, which are untrusted: they travel as one standard
JSON document (a NaN or infinity as a string) inside a ``<script type="application/json">`` block
(every ``<`` written ``\\u003c``, so nothing in them can close it), put in the page in one pass with
the training plots (so text naming a placeholder stays text), and the page's own script puts them on
screen as text nodes only, never as markup. Tables are paginated and transcripts built when opened,
so a thousand long episodes open in a few seconds. No CDN, no network: the file opens from disk.

The page opens on a summary (counts, mean reward per env, dynamics and agent, mean leaf_match per tool
as bars drawn by its script) above the tab that has data: episodes, else compared calls, else training.
An eval's folder opens on its benchmark table (measured beside reported, partial scores marked, the
coverage on hover), then one world-model panel per world model, the agent's first and the reference
rows (the oracle, knn) apart.
Fidelity and reward cells are shaded red (0) to green (1); an opened row's detail sits beside the
list (under it in a narrow window, scrolled to), and an episode and its task's compared calls link
to each other. The page's state lives in its URL fragment
(``#tab=runs&q=retail&sort=-reward&open=3&task=7``), so a view can be linked, and checked by a
headless browser. The page itself (its markup, style and script) is package data, ``viewer.html``.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from envace_gym.core.messages import escape_tags, loads_bounded
from envace_gym.fidelity import flatten
from envace_gym.play import records
from envace_gym.reporting.figures import training_figure


def _diff(real, rehearsed) -> dict:
    """The leaf paths where the two responses differ (``fidelity.flatten``'s paths)."""
    try:
        a, b = flatten(loads_bounded(real)), flatten(loads_bounded(rehearsed))
    except ValueError:
        return {"real": [], "rehearsed": []}
    return {
        "real": sorted(k for k, v in a.items() if k not in b or b[k] != v),
        "rehearsed": sorted(k for k, v in b.items() if k not in a or a[k] != v),
    }


def _episode(r: dict, source: str) -> dict:
    messages = r.get("messages") if isinstance(r.get("messages"), list) else []
    return {
        "source": source,
        "task_id": str(r.get("task_id")),
        "seed": r.get("seed"),
        "reward": r.get("reward"),
        "reward_source": r.get("reward_source"),
        "dynamics": r.get("dynamics"),
        "agent": r.get("agent"),
        "turns": r.get("turns"),
        "real_calls": r.get("real_calls"),
        "tool_calls": r.get("tool_calls"),
        "ended_by": r.get("ended_by"),
        "error": r.get("error"),
        "attempts": r.get("rehearsal_attempts"),
        "reward_info": r.get("reward_info"),
        "messages": messages,
        "opening": r.get("opening_messages", 0),
        "private_context": r.get("private_context") or [],
    }


def _call(r: dict, source: str) -> dict:
    real, rehearsed = str(r.get("real", "")), str(r.get("rehearsed", ""))
    return {
        "source": source,
        "task_id": str(r.get("task_id")),
        "tool": str(r.get("tool")),
        "arguments": r.get("arguments"),
        "real": real,
        "rehearsed": rehearsed,
        **{k: r.get(k) for k in ("parsed", "shape", "leaf_match", "error_agree", "exact")},
        "diff": _diff(real, rehearsed),
    }


def _training_svg(rows: list[dict], title: str) -> str:
    """Training curves (:func:`~envace_gym.reporting.figures.training_figure`) as one inline SVG (matplotlib's SVG backend
    writes its text XML-escaped); empty without a curve."""
    fig = training_figure(rows, title)
    if fig is None:
        return ""
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    return svg[svg.index("<svg") :]


def collect(paths: Sequence[str | Path]) -> dict:
    """The page's data from ``run`` and ``compare`` JSONL files, ``train``/``sft`` output folders and
    ``eval`` output folders (their results, runs' records and world-model calls)."""
    data: dict = {"episodes": [], "calls": [], "training": [], "evals": []}
    for path in map(Path, paths):
        if path.is_dir() and (path / "results.json").is_file():  # an eval's folder: records/ENV/..., world/ENV/...
            data["evals"].append(_eval(path))
            for kind in ("records", "world"):
                for file in sorted((path / kind).rglob("*.jsonl")):
                    env = file.parent.relative_to(path / kind).as_posix()
                    _add(data, file, str(file.relative_to(path)), env, file.stem if kind == "world" else None)
            continue
        if path.is_dir():
            metrics = path / "metrics.jsonl"
            if not metrics.is_file():
                raise ValueError(f"{path}: a training folder holds metrics.jsonl; this one does not")
            rows = records.rows(metrics)
            data["training"].append({"name": str(path), "steps": len(rows), "svg": _training_svg(rows, str(path))})
            continue
        _add(data, path, path.name)
    return data


def _add(data: dict, path: Path, source: str, env: str | None = None, world_model: str | None = None) -> None:
    """The records of a ``run`` or ``compare`` file into ``data``, each labelled with ``source``, its env
    (the record's own, else ``env``) and, for an eval's world-model calls, the world model."""
    for r in records.rows(path):
        if "rehearsed" in r and "real" in r and "tool" in r:  # a compared call: its world model, else its file's
            model = world_model or r.get("world_model") or source
            data["calls"].append({**_call(r, source), "env": env, "world_model": str(model)})
        else:
            data["episodes"].append({**_episode(r, source), "env": r.get("env_id") or env})


def _eval(folder: Path) -> dict:
    """What an eval's first screen shows, from its ``results.json``: the benchmark table (measured
    beside reported, partial scores marked, coverage) and the world-model rows, per world model."""
    from envace_gym.evaluation.results import EvalResults

    results = EvalResults.read(folder / "results.json")
    shown = [b for b in results.benchmarks if b.in_overall]
    return {
        "folder": str(folder),
        "agent": results.agent,
        "benchmarks": [
            {"name": b.name, "score": b.score, "partial": b.partial, "coverage": b.coverage, "skipped": b.skipped}
            for b in shown
        ],
        "overall": results.overall,
        "comparable": results.comparable,
        "reported": results.reported,
        "world": [
            {
                "benchmark": r.benchmark,
                "world_model": r.world_model,
                "calls": r.calls,
                "leaf_match": r.metrics.get("leaf_match"),
                "exact": r.metrics.get("exact"),
                "by_tool": r.by_tool,
                "reference": r.world_model != results.agent,
            }
            for r in results.world_model
        ],
    }


def _standard(value):
    """``value`` with each NaN or infinity as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``:
    standard JSON, which a browser's ``JSON.parse`` reads (``records.rows`` bounds the depth)."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    if isinstance(value, dict):
        return {k: _standard(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_standard(v) for v in value]
    return value


def render(paths: Sequence[str | Path], out: str | Path) -> Path:
    """Write the viewer of ``paths`` to ``out``; returns ``out``."""
    data = collect(paths)
    svgs = "".join(f'<section class="train"><h3></h3>{t["svg"]}</section>' for t in data["training"] if t["svg"])
    for t in data["training"]:
        t.pop("svg")
    parts = {"__DATA__": escape_tags(json.dumps(_standard(data), allow_nan=False)), "__SVGS__": svgs}
    html = PLACEHOLDER.sub(lambda m: parts[m[0]], PAGE)  # one pass: what is put in is never searched again
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out


PLACEHOLDER = re.compile("__DATA__|__SVGS__")
PAGE = (resources.files("envace_gym.reporting") / "viewer.html").read_text(encoding="utf-8")  # the page, package data
