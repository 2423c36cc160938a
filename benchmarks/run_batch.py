"""Episodes per second of ``envace-gym run``'s runner with the tiny vLLM agent: batch 1 against 8.

The same ``--episodes`` episodes of ``EnvACE/tau2-mock-gen-v0`` (rehearsed dynamics, at most
``--max-turns`` act turns each, ``--new-tokens`` greedy tokens per generation) are played one
at a time and then 8 at a time (:func:`envace_gym.play.loop.run_episodes` over 8 envs: every
round's act and rehearse turns in one ``act_batch``, one vLLM ``generate`` call). The engine's
KV cache is sized explicitly (``kv_cache_memory_bytes``), as vLLM's CPU backend needs.

    python benchmarks/run_batch.py [--episodes 16] [--max-turns 4] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import gymnasium as gym

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.fixtures import tiny_model
from envace_gym.play.loop import run_episodes

ENV_ID = "EnvACE/tau2-mock-gen-v0"
ENGINE = {"gpu_memory_utilization": 0.1, "max_model_len": 4096, "dtype": "float32", "kv_cache_memory_bytes": 128 << 20}


def measure(agent, batch: int, episodes: int, max_turns: int) -> tuple[float, float]:
    """Episodes per second and act turns per second at one batch size."""
    envs = [gym.make(ENV_ID, dynamics="rehearsed", max_turns=max_turns) for _ in range(batch)]
    task_ids = envs[0].unwrapped.task_ids[:episodes]
    start = time.perf_counter()
    records = list(run_episodes(envs, agent, task_ids))
    seconds = time.perf_counter() - start
    return len(records) / seconds, sum(r["turns"] for r in records) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        agent = agents.load(f"vllm:{tiny_model(tmp)}", max_new_tokens=args.new_tokens, **ENGINE)
        measure(agent, 1, 1, args.max_turns)  # warm-up
        rows = {batch: measure(agent, batch, args.episodes, args.max_turns) for batch in (1, 8)}
        agent.close()
    print(
        f"{args.episodes} {ENV_ID} episodes, rehearsed, <= {args.max_turns} act turns, "
        f"{args.new_tokens} new tokens per generation, tiny model on vLLM"
    )
    print(f"{'':10}{'episodes/s':>12}{'act turns/s':>13}")
    for batch, (episodes, turns) in rows.items():
        print(f"batch {batch:<4}{episodes:12.2f}{turns:13.1f}")
    print(f"batch 8 / batch 1: {rows[8][0] / rows[1][0]:.2f}x episodes per second")


if __name__ == "__main__":
    main()
