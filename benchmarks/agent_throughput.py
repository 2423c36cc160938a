"""Generation throughput of the model agents on real tau2-retail prompts.

(a) ``smollm2`` on ``hf`` at batch 1 against batch 8; (b) the tiny test model on
``hf`` against ``vllm`` (skipped, with a note, where vllm is not installed). Each
row generates ``--new-tokens`` greedy tokens for the same ``--n`` act prompts
(the opening turn of different tasks). Tokens per second count generated tokens;
``processed/s`` adds the prompt tokens.

    python benchmarks/agent_throughput.py [--n 8] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import gymnasium as gym

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.fixtures import tiny_model


def measure(agent, observations, batch_size: int) -> tuple[float, float]:
    agent.generate(observations[:1])  # warm-up
    start = time.perf_counter()
    gens = []
    for i in range(0, len(observations), batch_size):
        gens += agent.generate(observations[i : i + batch_size])
    seconds = time.perf_counter() - start
    generated = sum(len(g.completion_ids) for g in gens)
    processed = generated + sum(len(g.prompt_ids) for g in gens)
    return generated / seconds, processed / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    env = gym.make("EnvACE/tau2-retail-v0", split="base")
    observations = [env.reset(options={"task_id": t})[0] for t in env.unwrapped.task_ids[: args.n]]
    rows = []
    smollm2 = agents.load("smollm2", max_new_tokens=args.new_tokens, batch_size=8)
    for batch in (1, 8):
        rows.append((f"smollm2 hf batch {batch}", *measure(smollm2, observations, batch)))
    del smollm2
    with tempfile.TemporaryDirectory() as tmp:
        path = tiny_model(tmp)
        tiny = agents.load(f"hf:{path}", max_new_tokens=args.new_tokens, batch_size=args.n)
        rows.append(("tiny hf", *measure(tiny, observations, args.n)))
        try:
            engine = agents.load(
                f"vllm:{path}",
                max_new_tokens=args.new_tokens,
                gpu_memory_utilization=0.1,
                max_model_len=12288,
                dtype="float32",
            )
            rows.append(("tiny vllm", *measure(engine, observations, args.n)))
            engine.close()
        except ImportError as e:
            print(f"(vllm row skipped: {e})")
    print(f"{args.n} tau2-retail act prompts, {args.new_tokens} new tokens each, CPU")
    print(f"{'':22}{'tokens/s':>10}{'processed/s':>13}")
    for name, gen, proc in rows:
        print(f"{name:22}{gen:10.1f}{proc:13.0f}")
    by = {name: gen for name, gen, _ in rows}
    print(f"smollm2 batch 8 / batch 1: {by['smollm2 hf batch 8'] / by['smollm2 hf batch 1']:.2f}x")
    if "tiny vllm" in by:
        print(f"tiny vllm / hf: {by['tiny vllm'] / by['tiny hf']:.2f}x")


if __name__ == "__main__":
    main()
