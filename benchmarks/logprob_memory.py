"""Peak memory and time of token log-probs plus backward: the full log-softmax against chunks.

The baseline is the function the trainer used before: the whole ``[B, T, V]`` logits in
fp32, then a full ``log_softmax``. envace-gym's ``token_logprobs`` runs the head and the
log-softmax over chunks of positions, recomputed in backward. Both run on a one-layer
Qwen3-style model with Qwen's vocabulary (151,936), one sequence of T tokens; each
measurement is a fresh process, its peak resident memory above what it held once the
model and batch were built.

    python benchmarks/logprob_memory.py [--lengths 1024 2048 4096]

At the default chunk (256 positions), 2 shared CPU cores (2026-12-01; the seconds are
inflated by other jobs on the cores, the memory is not):

         T  full GiB  chunked GiB  ratio  full s  chunked s
      1024      1.64         0.48    3.4   22.67      38.21
      2048      3.39         0.49    6.8   45.24      31.37
      4096      6.89         0.51   13.5   51.68      85.93
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

VOCAB = 151_936


def full_logprobs(model, ids, mask, temperature=1.0):
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float() / temperature
    picked = logits.log_softmax(-1).gather(2, ids[:, 1:, None]).squeeze(-1)
    return __import__("torch").nn.functional.pad(picked, (1, 0))


def measure(kind: str, length: int) -> dict:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from envace_gym.training.grpo import token_logprobs

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )
    model = Qwen3ForCausalLM(config)
    ids = torch.randint(0, VOCAB, (1, length))
    mask = torch.ones_like(ids)
    fn = full_logprobs if kind == "full" else token_logprobs
    fn(model, ids[:, :64], mask[:, :64]).sum().backward()  # warm up allocator and kernels
    model.zero_grad()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    fn(model, ids, mask).sum().backward()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"kind": kind, "T": length, "extra_gib": (peak - before) / 2**20, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # internal: KIND T in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]))))
        return
    print(f"{'T':>6} {'full GiB':>9} {'chunked GiB':>12} {'ratio':>6} {'full s':>7} {'chunked s':>10}")
    for length in args.lengths:
        rows = {}
        for kind in ("full", "chunked"):
            out = subprocess.run(
                [sys.executable, __file__, "--one", kind, str(length)], check=True, capture_output=True, text=True
            ).stdout
            rows[kind] = json.loads(out.strip().splitlines()[-1])
        f, c = rows["full"], rows["chunked"]
        print(
            f"{length:>6} {f['extra_gib']:>9.2f} {c['extra_gib']:>12.2f} {f['extra_gib'] / c['extra_gib']:>6.1f} "
            f"{f['seconds']:>7.2f} {c['seconds']:>10.2f}"
        )


if __name__ == "__main__":
    main()
