"""One GPU check of the trainer's scale options: bf16, gradient checkpointing, FSDP, on CUDA.

Run through ``benchmarks/gpu_check.sh`` (``torchrun --nproc_per_node 1``: NCCL over one GPU,
so ``fsdp`` shards over a one-process group; the code path is the multi-GPU one, the
communication is trivial). No hub access: every model is built here with random weights.

1. Memory: token log-probs plus backward on a Qwen3-0.6B-shaped model (28 layers, hidden 1024,
   Qwen's 151,936-token vocabulary) for one sequence of T tokens, fp32 against bf16 autocast,
   with and without gradient checkpointing: peak CUDA memory above the weights and time.
2. The trainer: two GRPO steps of a small model on ``EnvACE/tau2-mock-gen-v0`` with
   ``fsdp``, ``bf16`` and ``gradient_checkpointing`` (hf generation on the gathered weights,
   evaluation, checkpoints through the full state dict), then a resume in a fresh trainer
   whose weights must equal the checkpoint's.

Each result is a JSON line on stdout and in ``$OUT/gpu_check.jsonl`` (or ``./gpu_check.jsonl``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

VOCAB = 151_936
RESULTS = Path(os.environ.get("OUT", ".")) / "gpu_check.jsonl"


def report(record: dict) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    with RESULTS.open("a") as f:
        f.write(line + "\n")


def logprob_memory(length: int, bf16: bool, checkpointing: bool) -> dict:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from envace_gym.training.grpo import token_logprobs

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=length,
        tie_word_embeddings=True,
    )
    model = Qwen3ForCausalLM(config).cuda().train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(0, VOCAB, (1, length), device="cuda")
    mask = torch.ones_like(ids)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        logprobs = token_logprobs(model, ids, mask)
    logprobs.float().sum().backward()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    extra = (torch.cuda.max_memory_allocated() - base) / 2**30
    del model, ids, mask, logprobs
    torch.cuda.empty_cache()
    return {
        "check": "logprob_memory",
        "T": length,
        "bf16": bf16,
        "checkpointing": checkpointing,
        "peak_extra_gib": round(extra, 3),
        "seconds": round(seconds, 3),
    }


def sharded_trainer(folder: Path) -> dict:
    from envace_gym.fixtures import tiny_model
    from envace_gym.training import TrainConfig, Trainer

    model = tiny_model(folder / "model", hidden_size=512, layers=4, env_id="EnvACE/tau2-mock-gen-v0")
    config = TrainConfig(
        model=f"hf:{model}",
        env_id="EnvACE/tau2-mock-gen-v0",
        out=str(folder / "run"),
        group_size=4,
        tasks_per_step=4,
        steps=2,
        lr=1e-5,
        max_new_tokens=32,
        max_turns=4,
        eval_every=2,
        eval_tasks=2,
        save_every=1,
        tensorboard=False,
        fsdp=True,
        bf16=True,
        gradient_checkpointing=True,
    )
    torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(config)
    assert trainer.sharded and trainer.accelerator.device.type == "cuda"
    records = trainer.train()
    weights = trainer._full_weights()
    resumed = Trainer(config)
    resumed.resume()
    again = resumed._full_weights()
    same = all(torch.equal(again[k], v) for k, v in weights.items())
    return {
        "check": "sharded_trainer",
        "steps": [r["step"] for r in records],
        "resumed_step": resumed.step,
        "resumed_weights_equal": same,
        "loss_act": records[-1].get("loss/act"),
        "eval_reward": records[-1].get("eval/reward"),
        "max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
        "device": torch.cuda.get_device_name(),
    }


def main() -> None:
    report(
        {
            "check": "env",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(),
            "python": sys.version.split()[0],
        }
    )
    for length in (2048, 8192):
        for bf16, checkpointing in ((False, False), (True, False), (True, True)):
            report(logprob_memory(length, bf16, checkpointing))
    with tempfile.TemporaryDirectory() as tmp:
        report(sharded_trainer(Path(tmp)))


if __name__ == "__main__":
    main()
