"""Gold tau2 episodes through tau2's own path and through envace-gym, side by side.

tau2's path is what its gym env does per episode: build the environment (load
and validate the database), set the task's initial state, answer each call with
``Environment.get_response``, then score with ``evaluate_simulation`` (type ALL).
envace-gym's path is a Gymnasium episode of the oracle (user turns included),
whose last step scores it. Both replay the same gold calls of every task.

    python benchmarks/tau2_episode.py [--domain retail] [--live 1000]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import gymnasium as gym  # noqa: E402
import psutil  # noqa: E402
from loguru import logger  # noqa: E402

import envace_gym  # noqa: E402,F401
from envace_gym import agents  # noqa: E402

logger.disable("tau2")
from tau2.data_model.message import AssistantMessage, ToolCall  # noqa: E402
from tau2.data_model.simulation import SimulationRun, TerminationReason  # noqa: E402
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # noqa: E402
from tau2.registry import registry  # noqa: E402


def tau2_episode(domain: str, task) -> dict:
    """One gold episode on tau2's own path; seconds per phase."""
    t0 = time.perf_counter()
    env = registry.get_env_constructor(domain)()
    state = task.initial_state
    env.set_state(state.initialization_data if state else None, state.initialization_actions if state else None, [])
    t1 = time.perf_counter()
    messages, steps = [], []
    for i, action in enumerate(task.evaluation_criteria.actions or []):
        s = time.perf_counter()
        call = ToolCall(id=f"c{i}", name=action.name, arguments=action.arguments, requestor=action.requestor)
        messages.append(AssistantMessage(role="assistant", tool_calls=[call]))
        messages.append(env.get_response(call))
        steps.append(time.perf_counter() - s)
    t2 = time.perf_counter()
    run = SimulationRun(
        id="b",
        task_id=task.id,
        start_time="",
        end_time="",
        duration=0.0,
        termination_reason=TerminationReason.USER_STOP,
        messages=messages,
    )
    evaluate_simulation(simulation=run, task=task, evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain)
    t3 = time.perf_counter()
    return {"reset": t1 - t0, "steps": steps, "score": t3 - t2, "total": t3 - t0}


def envace_episode(env, oracle, task_id: str) -> dict:
    t0 = time.perf_counter()
    obs, _ = env.reset(options={"task_id": task_id})
    t1 = time.perf_counter()
    steps, done = [], False
    while not done:
        s = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(oracle.act(obs))
        steps.append(time.perf_counter() - s)
        done = terminated or truncated
    assert reward == 1.0, (task_id, info)
    return {"reset": t1 - t0, "steps": steps[:-1], "score": steps[-1], "total": time.perf_counter() - t0}


def rss_mib() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def med(xs) -> float:
    return statistics.median(xs) * 1000


def live_rss(domain: str, split: str, side: str, n: int) -> float:
    """KiB of RSS per extra live episode (one real call into each, with its state held)."""
    env = gym.make(f"EnvACE/tau2-{domain}-v0", split=split)
    ids = [t for t in env.unwrapped.task_ids if env.unwrapped.suite.grader.gold_calls(env.unwrapped.suite.task(t))]
    warm = agents.load("oracle", env=env)
    for task_id in ids:  # the per-task caches exist once per process, not per episode
        envace_episode(env, warm, task_id)
    registry.get_env_constructor(domain)()
    base, live = rss_mib(), []
    for i in range(n):
        if side == "tau2":
            e = registry.get_env_constructor(domain)()
            action = env.unwrapped.suite.task(ids[i % len(ids)]).data.evaluation_criteria.actions[0]
            e.get_response(ToolCall(id="c", name=action.name, arguments=action.arguments))
            live.append(e)
        else:
            e = gym.make(f"EnvACE/tau2-{domain}-v0", split=split)
            o = agents.load("oracle", env=e)
            obs, _ = e.reset(options={"task_id": ids[i % len(ids)]})
            e.step(o.act(obs))
            live.append((e, o))
    return (rss_mib() - base) * 1024 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domain", default="retail", choices=["retail", "airline", "telecom"])
    parser.add_argument("--split", default="base")
    parser.add_argument("--live", type=int, default=1000, help="live envace-gym episodes for the RSS test")
    parser.add_argument("--tau2-live", type=int, default=20, help="live tau2 environments for the RSS test")
    parser.add_argument("--rss", choices=["tau2", "envace"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss:
        print(live_rss(args.domain, args.split, args.rss, args.live))
        return

    env = gym.make(f"EnvACE/tau2-{args.domain}-v0", split=args.split)
    oracle = agents.load("oracle", env=env)
    suite = env.unwrapped.suite
    ids = env.unwrapped.task_ids
    tasks = [suite.task(t).data for t in ids]

    tau2 = [tau2_episode(args.domain, t) for t in tasks]
    cold = [envace_episode(env, oracle, t) for t in ids]  # first visit builds per-task caches
    warm = [envace_episode(env, oracle, t) for t in ids]

    print(f"{args.domain} ({args.split}): {len(ids)} gold episodes, median milliseconds")
    print(f"{'':16}{'reset':>10}{'step':>10}{'score':>10}{'episode':>10}")
    for name, rows in (("tau2", tau2), ("envace (first)", cold), ("envace", warm)):
        print(
            f"{name:16}{med([r['reset'] for r in rows]):10.3f}"
            f"{med([s for r in rows for s in r['steps']] or [0]):10.3f}"
            f"{med([r['score'] for r in rows]):10.3f}{med([r['total'] for r in rows]):10.3f}"
        )
    for name, rows in (("first visit", cold), ("cached", warm)):
        ratios = [a["total"] / b["total"] for a, b in zip(tau2, rows)]
        print(f"per-episode speed-up, {name}: median {statistics.median(ratios):.1f}x, min {min(ratios):.1f}x")

    # memory: each side in a fresh process, so freed heap of the other cannot hide its cost
    def per_episode(side: str, n: int) -> float:
        cmd = [
            sys.executable,
            __file__,
            "--domain",
            args.domain,
            "--split",
            args.split,
            "--rss",
            side,
            "--live",
            str(n),
        ]
        return float(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()[-1])

    tau2_per, per = per_episode("tau2", args.tau2_live), per_episode("envace", args.live)
    print(
        f"RSS per extra live episode: tau2 {tau2_per / 1024:.2f} MiB ({args.tau2_live} live), "
        f"envace {per:.1f} KiB ({args.live} live); ratio {tau2_per / per:.0f}x"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
