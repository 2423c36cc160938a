"""What the step limits cost: bounded calls against unbounded ones, side by side in one run.

1. Gold tau2-retail episodes (oracle, real dynamics) with the default ``Limits`` (every call
   under the watchdog) against ``Limits(call_seconds=None)`` (no watchdog).
2. One ``calculate`` call with a power (which tau2's suite runs in a forked child: its cost is not
   bounded by its length) against the same call in-process (the suite's ``stateless_tools``
   emptied), with torch imported as in training.

    python benchmarks/call_limits.py [--episodes 40] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import torch  # noqa: F401  (a training process's size makes fork cost what it costs there)

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.core.limits import Limits
from envace_gym.core.messages import format_tool_call
from envace_gym.play.loop import run_episode


def episodes_per_second(limits: Limits, n: int) -> float:
    env = gym.make("EnvACE/tau2-retail-v0", limits=limits)
    oracle = agents.load("oracle", env=env)
    ids = (env.unwrapped.task_ids * n)[:n]
    start = time.perf_counter()
    for task_id in ids:
        run_episode(env, oracle, task_id)
    return n / (time.perf_counter() - start)


def call_ms(isolated: bool, n: int) -> float:
    env = gym.make("EnvACE/tau2-retail-v0")
    suite = env.unwrapped.suite
    kept = suite.stateless_tools
    suite.stateless_tools = kept if isolated else frozenset()
    try:
        env.reset(options={"task_id": "5"})
        action = format_tool_call("calculate", {"expression": "(1234 + 5678) ** 2 / 7"})
        times = []
        for _ in range(n):
            start = time.perf_counter()
            env.step(action)
            times.append(time.perf_counter() - start)
            if env.unwrapped.episode.ended_by:
                env.reset(options={"task_id": "5"})
        return 1000 * statistics.median(times)
    finally:
        suite.stateless_tools = kept


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    episodes_per_second(Limits(call_seconds=None), args.episodes)  # builds and caches each task's worlds
    rates: dict[str, list[float]] = {"bounded": [], "unbounded": []}
    for _ in range(3):  # interleaved, so that neither side gets a quieter machine
        rates["bounded"].append(episodes_per_second(Limits(), args.episodes))
        rates["unbounded"].append(episodes_per_second(Limits(call_seconds=None), args.episodes))
    bounded, unbounded = (statistics.median(rates[k]) for k in ("bounded", "unbounded"))
    print(
        f"gold tau2-retail episodes/s: bounded {bounded:.1f} · unbounded {unbounded:.1f} · "
        f"ratio {bounded / unbounded:.2f}"
    )
    forked, inline = call_ms(True, args.calls), call_ms(False, args.calls)
    print(
        f"calculate step, median ms: isolated (fork) {forked:.2f} · in-process {inline:.2f} · "
        f"ratio {forked / inline:.1f}"
    )


if __name__ == "__main__":
    main()
