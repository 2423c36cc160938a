"""SmolLM2 as an eval plays it, in transformers (``smollm2``) against vLLM's engine (``vllm:smollm2``).

The same work for both: ``--tasks`` tau2-retail test episodes of ``--max-turns`` act turns (scripted
user), then the world-model part of ``eval --world-model`` on the same tasks (shadow episodes, the
oracle acting, SmolLM2 writing each call's response). Greedy, ``--new-tokens`` per generation. A
tau2 prompt is about 5,200 tokens before the first message, so the time goes to prefill: transformers
computes every prompt whole, vLLM only the tokens its prefix cache lacks. The engine's start is timed
apart. Set ``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` on a 2-core machine (vLLM keeps one core for itself
otherwise).

    python benchmarks/smollm2_engines.py [--tasks 2] [--max-turns 3] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.play.compare import compare_calls
from envace_gym.play.loop import run_episode
from envace_gym.specs import parse_agent

ENV_ID = "EnvACE/tau2-retail-v0"
ENGINE = {"dtype": "bfloat16", "enforce_eager": True, "kv_cache_memory_bytes": 1 << 30}


def play(name: str, tasks: list[str], max_turns: int, new_tokens: int) -> dict:
    """Seconds to load ``name``, to play the episodes and to rehearse the shadow episodes' calls."""
    start = time.perf_counter()
    model = agents.load(name, max_new_tokens=new_tokens, **(ENGINE if parse_agent(name).kind == "vllm" else {}))
    loaded = time.perf_counter()
    env = gym.make(ENV_ID, split="test", max_turns=max_turns)
    turns = sum(run_episode(env, model, task_id, seed)["turns"] for seed, task_id in enumerate(tasks))
    played = time.perf_counter()
    calls = len(list(compare_calls(env, agents.load("oracle", env=env), model, tasks)))
    rehearsed = time.perf_counter()
    getattr(model, "close", lambda: None)()
    return {
        "load": loaded - start,
        "episodes": played - loaded,
        "turns": turns,
        "world": rehearsed - played,
        "calls": calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    tasks = gym.make(ENV_ID, split="test").unwrapped.task_ids[: args.tasks]
    rows = {name: play(name, tasks, args.max_turns, args.new_tokens) for name in ("smollm2", "vllm:smollm2")}
    print(f"{ENV_ID}, {len(tasks)} test tasks, at most {args.max_turns} act turns, {args.new_tokens} new tokens, CPU")
    print("| agent | load s | episodes s | act turns | s per turn | world-model s | calls | s per call |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['load']:.1f} | {r['episodes']:.1f} | {r['turns']} | {r['episodes'] / r['turns']:.2f} "
            f"| {r['world']:.1f} | {r['calls']} | {r['world'] / r['calls']:.2f} |"
        )
    hf, vllm = rows["smollm2"], rows["vllm:smollm2"]
    total = {name: r["load"] + r["episodes"] + r["world"] for name, r in rows.items()}
    print(
        f"vllm:smollm2 / smollm2: episodes {vllm['episodes'] / hf['episodes']:.2f}x, world model "
        f"{vllm['world'] / hf['world']:.2f}x, all (loads included) {total['vllm:smollm2'] / total['smollm2']:.2f}x"
    )


if __name__ == "__main__":
    main()
