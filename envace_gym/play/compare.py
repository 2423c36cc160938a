"""Real against rehearsed dynamics, call by call: shadow episodes and their fidelity summary."""

from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym

from envace_gym.agents import Agent
from envace_gym.agents.base import RoleSplit
from envace_gym.fidelity import METRICS, fidelity
from envace_gym.messages import escape_tags
from envace_gym.play.loop import run_episode
from envace_gym.play.records import CompareRecord
from envace_gym.response import execute
from envace_gym.wrappers import unwrap


def compare_calls(
    env: gym.Env,
    actor: Agent,
    rehearser: Agent,
    task_ids: list[str],
    seed: int = 0,
    failures: list[tuple[str, str]] | None = None,
) -> Iterator[dict]:
    """Shadow episodes (actions from ``actor``, rehearsals from ``rehearser``), played by
    :func:`~envace_gym.play.loop.run_episode`: one record per call. With a ``failures`` list, an agent's
    exception ends its episode (the calls before it are kept) and is appended as
    ``(task_id, "Type: message")``; without one, it is raised as a RuntimeError naming the task."""
    agent, inner = RoleSplit(actor, rehearser), unwrap(env)
    calls: list[dict] = []
    for i, task_id in enumerate(task_ids):

        def shadowed(role: str, info: dict, task_id: str = task_id) -> None:
            for call in info["tool_calls"]:
                if call.get("rehearsed") is None:
                    continue  # rejected before anything ran: nothing to compare
                record = CompareRecord(
                    task_id=task_id,
                    tool=call["name"],
                    arguments=call["arguments"],
                    real=call["real"],
                    rehearsed=call["rehearsed"],
                    **call["fidelity"],
                    state_dependent=depends_on_state(inner, call) if inner.suite.private_worlds else None,
                )
                calls.append(record.model_dump())

        played = run_episode(env, agent, task_id, seed + i, options={"dynamics": "shadow"}, on_step=shadowed)
        yield from calls
        calls.clear()
        if played["ended_by"] == "agent_error":  # a model's failure: a dead server, a prompt past its context
            if failures is None:
                raise RuntimeError(f"task {task_id}: {played['error']}")
            failures.append((task_id, played["error"]))


def determinism(replays: list[list[dict]]) -> dict:
    """How much a world model's rehearsals of the same calls vary across replays of the same shadow
    episodes (each a list of :func:`compare_calls` records): over the calls every replay made (by task,
    position and call), ``exact`` is the share whose rehearsals are all the same JSON value and ``leaf``
    the mean leaf agreement of each pair of them (:func:`~envace_gym.fidelity.fidelity`'s
    ``leaf_match``, taken both ways). A world model that answers one call differently each time is
    a finding: its rehearsals are samples, not a world."""
    keyed: list[dict[tuple, str]] = []
    for records in replays:
        seen: Counter[tuple] = Counter()
        by_call = {}
        for r in records:
            call = (r["task_id"], r["tool"], json.dumps(r["arguments"], sort_keys=True))
            seen[call] += 1
            by_call[(*call, seen[call])] = r["rehearsed"]
        keyed.append(by_call)
    common = set(keyed[0]).intersection(*keyed[1:]) if keyed else set()
    if len(replays) < 2 or not common:
        return {"replays": len(replays), "calls": len(common), "exact": None, "leaf": None}
    exact, leaf = [], []
    for key in sorted(common):
        texts = [by_call[key] for by_call in keyed]
        exact.append(len({json.dumps(_value(t), sort_keys=True) for t in texts}) == 1)
        pairs = list(itertools.combinations(texts, 2))
        leaf.append(
            statistics.fmean((fidelity(a, b)["leaf_match"] + fidelity(b, a)["leaf_match"]) / 2 for a, b in pairs)
        )
    return {
        "replays": len(replays),
        "calls": len(common),
        "exact": statistics.fmean(exact),
        "leaf": statistics.fmean(leaf),
    }


def depends_on_state(env, call: dict) -> bool:
    """Whether ``call``'s real answer in ``env``'s episode differs from its answer on the task's fresh
    world (as JSON values): an answer that earlier calls of the episode shaped."""
    fresh = execute(env.suite, env.suite.new_world(env.episode.task), call["name"], call["arguments"], env.limits)
    return _value(escape_tags(fresh.content)) != _value(call["real"])


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def figure(summary: dict[str, dict], title: str):
    """Horizontal grouped bars of the fidelity measures, one row per tool (full names, in the
    table's order): the figure grows in height with the tools, so 80 of them stay readable."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    tools = list(summary)
    y = np.arange(len(tools))
    height = 0.8 / len(METRICS)
    fig, ax = plt.subplots(figsize=(8.0, 1.6 + 0.4 * len(tools)))
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


def plot(summary: dict[str, dict], path: Path, title: str) -> None:
    """:func:`figure` as a PNG, its margins fitted to the longest tool name."""
    import matplotlib.pyplot as plt

    fig = figure(summary, title)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
