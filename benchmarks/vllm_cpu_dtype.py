"""SmolLM2 in vLLM's CPU engine, bfloat16 against float32, side by side: the engine's start, its first
generation of a long prompt (about 3,000 tokens, 16 new tokens, greedy) and two more of the same length.

On a CPU without bfloat16 instructions (no AVX512-BF16 or AMX: ``grep -o 'avx512_bf16\\|amx' /proc/cpuinfo``
prints nothing) the first generation is where bfloat16 costs: the tests' engines run in float32 for it.
Each dtype runs in a process of its own, one after the other. Set ``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` on a
2-core machine.

    python benchmarks/vllm_cpu_dtype.py [--dtypes bfloat16 float32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def measure(dtype: str) -> dict:
    """Seconds to start an engine in ``dtype`` and for each of three generations of a long prompt."""
    from vllm import LLM, SamplingParams

    from envace_gym.agents.hf import smollm2_path

    start = time.perf_counter()
    llm = LLM(str(smollm2_path()), dtype=dtype, enforce_eager=True, kv_cache_memory_bytes=1 << 30, max_model_len=8192)
    out = {"dtype": dtype, "start_s": round(time.perf_counter() - start, 1), "generate_s": []}
    prompt = " ".join(f"word{i}" for i in range(1500))
    for k in range(3):  # a distinct last token each time: the prefix cache serves the rest
        began = time.perf_counter()
        llm.generate([f"{prompt} {k}"], SamplingParams(max_tokens=16, temperature=0), use_tqdm=False)
        out["generate_s"].append(round(time.perf_counter() - began, 2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's dtype
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    print("| dtype | engine start (s) | first generation (s) | next two (s) |")
    print("|---|---|---|---|")
    for dtype in args.dtypes:
        child = subprocess.run([sys.executable, __file__, "--one", dtype], capture_output=True, text=True, check=True)
        row = json.loads(child.stdout.strip().splitlines()[-1])
        first, *rest = row["generate_s"]
        print(f"| {dtype} | {row['start_s']} | {first} | {', '.join(map(str, rest))} |")


if __name__ == "__main__":
    main()
