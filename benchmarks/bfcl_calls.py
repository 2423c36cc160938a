"""BFCL multi-turn calls through bfcl-eval's executor and through envace-gym, side by side.

Per call: bfcl-eval's ``execute_multi_turn_func_call`` with one call string on
instances it already holds (the way its inference loop calls it, step after
step) against envace-gym's path for the same call (JSON Schema validation, then
the bound method through ``BFCLWorld.execute``) on the episode's own instances.
Both replay the ground-truth calls of every entry of the category, in order.
Also shown: the bound method alone, and one whole ``env.step`` per call.

Memory: RSS after each 100 of 1,000 oracle episodes (entries cycled, each
episode a new run), each side in a fresh process. bfcl-eval keeps every entry's
instances in a module-global cache that is never freed.

    python benchmarks/bfcl_calls.py [--category multi_turn_base] [--episodes 1000]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time

import gymnasium as gym
import psutil
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call  # noqa: E402

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.core.messages import ToolCall, format_tool_call
from envace_gym.suites.bfcl import get_suite, source


def gold_turns(category: str):
    """(entry, its ground-truth call strings per turn, the same calls parsed) for every entry."""
    suite = get_suite(category)
    for task_id, answer in source.answers(category).items():
        yield source.entries(category)[task_id], answer, suite.task(task_id)


def bfcl_side(category: str, run: str) -> list[float]:
    times = []
    long_context = "long_context" in category
    for entry, answer, _ in gold_turns(category):
        args = (entry["initial_config"], entry["involved_classes"], run, entry["id"], long_context)
        execute_multi_turn_func_call([], *args)  # creates the entry's instances
        for turn in answer:
            for call in turn:
                start = time.perf_counter()
                execute_multi_turn_func_call([call], *args)
                times.append(time.perf_counter() - start)
    return times


def envace_side(category: str) -> tuple[list[float], list[float]]:
    suite = get_suite(category)
    times, bare = [], []
    for _, _, task in gold_turns(category):
        world, tools = suite.new_world(task), suite.tools(task, 99)
        for turn in task.data.gold:
            for gold in turn:
                call = ToolCall("c", gold.name, gold.arguments)
                start = time.perf_counter()
                if tools.check(call) is None:
                    world.execute(call.name, call.arguments)
                times.append(time.perf_counter() - start)
        method_world = suite.new_world(task)
        for turn in task.data.gold:
            for gold in turn:
                method = getattr(method_world.instances[method_world.owners[gold.name]], gold.name)
                start = time.perf_counter()
                method(**gold.arguments)
                bare.append(time.perf_counter() - start)
    return times, bare


def env_step_side(category: str) -> list[float]:
    """One call per ``env.step`` (message bookkeeping and info included)."""
    env = gym.make(f"EnvACE/bfcl-{category.replace('_', '-')}-v0")
    times = []
    for _, _, task in gold_turns(category):
        env.reset(options={"task_id": task.id})
        for turn in task.data.gold:
            for gold in turn:
                action = format_tool_call(gold.name, gold.arguments)
                start = time.perf_counter()
                env.step(action)
                times.append(time.perf_counter() - start)
            env.step("Done.")
    return times


def memory(side: str, category: str, episodes: int) -> list[float]:
    """RSS in MiB after every 100 episodes (run in this process)."""
    process = psutil.Process()
    entries = list(gold_turns(category))
    out = []
    if side == "envace":
        env = gym.make(f"EnvACE/bfcl-{category.replace('_', '-')}-v0")
        oracle = agents.load("oracle", env=env)
    for i in range(episodes):
        entry, answer, task = entries[i % len(entries)]
        if side == "bfcl":
            args = (
                entry["initial_config"],
                entry["involved_classes"],
                f"run{i // len(entries)}",
                entry["id"],
                "long_context" in category,
            )
            for turn in answer:
                execute_multi_turn_func_call(turn, *args)
        else:
            obs, _ = env.reset(options={"task_id": task.id})
            done = False
            while not done:
                obs, _, terminated, truncated, _ = env.step(oracle.act(obs))
                done = terminated or truncated
        if (i + 1) % 100 == 0:
            gc.collect()
            out.append(process.memory_info().rss / 2**20)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--category", default="multi_turn_base")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--memory-side", choices=["bfcl", "envace"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_side:
        print(" ".join(f"{m:.1f}" for m in memory(args.memory_side, args.category, args.episodes)))
        return

    # every side timed on its second pass, after one untimed pass warms the same code paths
    bfcl_side(args.category, "warmup")
    bfcl = bfcl_side(args.category, "timed")
    envace_side(args.category)
    envace, bare = envace_side(args.category)
    env_step_side(args.category)
    steps = env_step_side(args.category)
    us = lambda xs: statistics.median(xs) * 1e6  # noqa: E731
    print(f"{args.category}: {len(bfcl)} ground-truth calls, median microseconds per call")
    print(f"  bfcl-eval execute_multi_turn_func_call {us(bfcl):8.1f}")
    print(f"  envace-gym validate + execute          {us(envace):8.1f}")
    print(f"  bound method alone                     {us(bare):8.1f}")
    print(f"  envace-gym env.step (one call)         {us(steps):8.1f}")
    print(
        f"  speed-up (bfcl / envace validate+execute): {us(bfcl) / us(envace):.1f}x; "
        f"mean {statistics.mean(bfcl) / statistics.mean(envace):.1f}x"
    )

    print(f"RSS (MiB) after every 100 of {args.episodes} episodes, fresh process per side:")
    for side in ("bfcl", "envace"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--category",
                args.category,
                "--episodes",
                str(args.episodes),
                "--memory-side",
                side,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        rss = [float(x) for x in out]
        print(
            f"  {side:7s} {' '.join(f'{m:6.1f}' for m in rss)}   growth {rss[-1] - rss[0]:+.1f} MiB, "
            f"{rss[-1] - rss[1]:+.1f} after episode 200"
        )


if __name__ == "__main__":
    main()
