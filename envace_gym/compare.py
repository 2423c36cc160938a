"""Real against rehearsed dynamics, call by call: shadow episodes and their fidelity summary."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym

from envace_gym.agents import Agent
from envace_gym.agents.base import RoleSplit

METRICS = ("parsed", "shape", "leaf_match", "error_agree", "exact")


def compare_calls(env: gym.Env, actor: Agent, rehearser: Agent, task_ids: list[str],
                  seed: int = 0) -> Iterator[dict]:
    """Shadow episodes (actions from ``actor``, rehearsals from ``rehearser``): one record per call."""
    agent = RoleSplit(actor, rehearser)
    for i, task_id in enumerate(task_ids):
        obs, info = env.reset(seed=seed + i, options={"task_id": task_id, "dynamics": "shadow"})
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(agent.act(obs))
            done = terminated or truncated
            for call in info["tool_calls"]:
                if call.get("rehearsed") is None:
                    continue  # rejected before anything ran: nothing to compare
                yield {"task_id": task_id, "tool": call["name"], "arguments": call["arguments"],
                       "real": call["real"], "rehearsed": call["rehearsed"], **call["fidelity"]}


def summarize(records: list[dict]) -> dict[str, dict]:
    """Mean of each fidelity measure per tool and over all calls (``"all"``)."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r["tool"], []).append(r)
    groups = dict(sorted(groups.items()))
    groups["all"] = records
    return {tool: {"calls": len(rows), **{m: statistics.fmean(float(r[m]) for r in rows) for m in METRICS}}
            for tool, rows in groups.items() if rows}


def plot(summary: dict[str, dict], path: Path, title: str) -> None:
    """A grouped bar chart of the fidelity measures per tool."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    tools = list(summary)
    x = np.arange(len(tools))
    width = 0.8 / len(METRICS)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(tools) + 2), 4.5))
    for i, metric in enumerate(METRICS):
        ax.bar(x + (i - len(METRICS) / 2 + 0.5) * width, [summary[t][metric] for t in tools], width,
               label=metric)
    ax.set_xticks(x, [f"{t} ({summary[t]['calls']})" for t in tools], rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("mean over calls")
    ax.set_title(title, pad=28)
    ax.legend(fontsize=8, ncols=len(METRICS), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
