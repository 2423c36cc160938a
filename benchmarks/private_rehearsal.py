"""Private rehearsal with an imperfect actor: reward against the attempt budget N.

The actor is the oracle with noise p (``NoisyOracle``: each gold tool-call turn is, with
probability p, a plausible wrong call, schema-valid). Its private attempts are answered by a
world model: ``oracle`` (what the real world would answer, on a fresh world: a perfect world
model) or ``knn`` (the nearest real response of the same tool, remembered from the oracle's
real episodes on other tasks). Committed episodes run under real dynamics and are scored by
each suite's own evaluator (``world``). For the first ``--tasks`` tasks of tau2-retail test,
tau2-airline test and BFCL multi-turn base: mean reward at N = 0, 1, 2, 4, 8 per world model,
mode and select, real calls per episode and the rehearsal cost. Writes ``results.json``,
``results.md`` (the tables) and ``private_rehearsal.png`` to ``--out``.

    python benchmarks/private_rehearsal.py [--tasks 20] [--p 0.3] [--seeds 1] [--out runs/private_rehearsal]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import gymnasium as gym

import envace_gym  # noqa: F401
from envace_gym.agents import KNNAgent, NoisyOracle, OracleAgent, PrivateRehearsal
from envace_gym.agents.private_rehearsal import SELECTS
from envace_gym.play.loop import run_episode

SUITES = {
    "tau2-retail": ("EnvACE/tau2-retail-v0", "test", "train"),
    "tau2-airline": ("EnvACE/tau2-airline-v0", "test", "train"),
    "bfcl-base": ("EnvACE/bfcl-multi-turn-base-v0", None, None),
}
BUDGETS = (0, 1, 2, 4, 8)
COST = ("real_calls", "rehearsal_attempts", "rehearsal_tokens", "rehearsal_seconds")


def filled_knn(env_id: str, split: str | None, exclude: list[str], n: int) -> KNNAgent:
    """knn holding the real responses of the oracle's real episodes on ``n`` tasks outside ``exclude``."""
    env = gym.make(env_id, split=split) if split else gym.make(env_id)
    oracle, knn = OracleAgent(env), KNNAgent()
    for task_id in [t for t in env.unwrapped.task_ids if t not in exclude][:n]:
        run_episode(env, oracle, task_id)
        for c in env.unwrapped.episode.calls:
            if c.source == "real":
                knn.remember(c.name, c.arguments, c.content)
    return knn


def measure(env, ids: list[str], budget: int, mode: str, select: str, world_model, p: float, seeds: int) -> dict:
    """Mean reward and cost per episode over ``seeds`` passes of the tasks; ``world_model()`` makes a
    fresh world model for each pass."""
    records = []
    for seed in range(seeds):
        actor = NoisyOracle(env, p=p, seed=seed)
        agent = PrivateRehearsal(actor, env, budget, mode, select, world_model=world_model())
        records += [run_episode(env, agent, t, seed=i) for i, t in enumerate(ids)]
    rewards = [r["reward"] for r in records]
    return {
        "reward": statistics.fmean(rewards),
        "stderr": statistics.stdev(rewards) / len(rewards) ** 0.5,
        "episodes": len(records),
        **{k: statistics.fmean(r[k] for r in records) for k in COST},
    }


def tables(rows: list[dict], n_tasks: int, seeds: int, p: float) -> str:
    def cell(suite, wm, mode, select, n):
        return next(
            r
            for r in rows
            if r["suite"] == suite
            and r["budget"] == n
            and (n == 0 or (r["world_model"], r["mode"], r["select"]) == (wm, mode, select))
        )

    head = "| suite | world model | mode | select | " + " | ".join(f"N={n}" for n in BUDGETS) + " |"
    lines = [
        f"Mean reward ({n_tasks} tasks per suite x {seeds} seed(s), noise p={p}; N=0 is the same "
        "actor without rehearsal):",
        "",
        head,
        "|" + "---|" * (4 + len(BUDGETS)),
    ]
    combos = sorted(
        {(r["suite"], r["world_model"], r["mode"], r["select"]) for r in rows if r["budget"]},
        key=lambda c: (list(SUITES).index(c[0]), c[1] != "oracle", c[2], SELECTS.index(c[3])),
    )
    for combo in combos:
        lines.append(
            f"| {' | '.join(combo)} | " + " | ".join(f"{cell(*combo, n)['reward']:.3f}" for n in BUDGETS) + " |"
        )
    lines += [
        "",
        "Cost per episode (parallel, best):",
        "",
        "| suite | world model | N | real calls | attempts | rehearsal tokens | rehearsal s | reward ± s.e. |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for suite, wm in sorted({(c[0], c[1]) for c in combos}, key=lambda c: (list(SUITES).index(c[0]), c[1])):
        for n in BUDGETS:
            r = cell(suite, wm, "parallel", "best", n)
            lines.append(
                f"| {suite} | {wm} | {n} | {r['real_calls']:.2f} | {r['rehearsal_attempts']:.1f} | "
                f"{r['rehearsal_tokens']:.0f} | {r['rehearsal_seconds']:.3f} | "
                f"{r['reward']:.3f} ± {r['stderr']:.3f} |"
            )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SUITES), figsize=(5 * len(SUITES), 5), sharey=True)
    for ax, suite in zip(axes, SUITES):
        base = next(r["reward"] for r in rows if r["suite"] == suite and r["budget"] == 0)
        combos = sorted(
            {(r["world_model"], r["mode"], r["select"]) for r in rows if r["suite"] == suite and r["budget"]}
        )
        for wm, mode, select in combos:
            ys = [base] + [
                next(
                    r["reward"]
                    for r in rows
                    if r["suite"] == suite
                    and r["budget"] == n
                    and (r["world_model"], r["mode"], r["select"]) == (wm, mode, select)
                )
                for n in BUDGETS[1:]
            ]
            ax.plot(
                range(len(BUDGETS)),
                ys,
                color=f"C{SELECTS.index(select)}",
                linestyle="-" if wm == "oracle" else "--",
                marker="o" if mode == "parallel" else "s",
                alpha=1.0 if mode == "parallel" else 0.45,
                label=f"{select} · {wm} · {mode}",
            )
        ax.set_xticks(range(len(BUDGETS)), [str(n) for n in BUDGETS])
        ax.set_title(suite)
        ax.set_xlabel("attempts N")
    axes[0].set_ylabel("mean reward")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncols=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20, help="the first N tasks of each suite")
    parser.add_argument("--p", type=float, default=0.3, help="the actor's noise")
    parser.add_argument("--seeds", type=int, default=1, help="passes over the tasks (the actor's noise seeds)")
    parser.add_argument("--modes", default="parallel,sequential")
    parser.add_argument("--knn-tasks", type=int, default=30, help="tasks whose real responses knn remembers")
    parser.add_argument("--out", type=Path, default=Path("runs/private_rehearsal"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows, start = [], time.perf_counter()
    for suite, (env_id, split, other_split) in SUITES.items():
        env = gym.make(env_id, split=split) if split else gym.make(env_id)
        ids = env.unwrapped.task_ids[: args.tasks]
        knn = filled_knn(env_id, other_split, ids, args.knn_tasks)
        world_models = {"oracle": lambda env=env: OracleAgent(env), "knn": lambda knn=knn: copy.deepcopy(knn)}
        rows.append(
            {"suite": suite, "budget": 0, **measure(env, ids, 0, "parallel", "best", lambda: None, args.p, args.seeds)}
        )
        for wm, world_model in world_models.items():
            for mode in args.modes.split(","):
                for select in SELECTS:
                    for n in BUDGETS[1:]:
                        result = measure(env, ids, n, mode, select, world_model, args.p, args.seeds)
                        rows.append(
                            {"suite": suite, "world_model": wm, "mode": mode, "select": select, "budget": n, **result}
                        )
        print(f"{suite}: done at {time.perf_counter() - start:.0f} s", flush=True)
    text = tables(rows, args.tasks, args.seeds, args.p)
    print(text)
    (args.out / "results.json").write_text(json.dumps(rows, indent=1))
    (args.out / "results.md").write_text(text + "\n")
    plot(rows, args.out / "private_rehearsal.png")
    print(f"{time.perf_counter() - start:.0f} s · {args.out}/results.md, results.json, private_rehearsal.png")


if __name__ == "__main__":
    main()
