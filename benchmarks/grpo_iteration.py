"""Wall time per GRPO iteration: envace-gym's Trainer against TRL's GRPOTrainer, side by side.

Both sides get the same tiny model (``envace_gym.fixtures.tiny_model``, saved once
and loaded fresh by each), the same single-turn prompts (BFCL simple_python
entries, rendered with their tools by the model's chat template), the same batch
(2 prompts x 4 completions), the same completion budget, sampling at
temperature 1, one optimizer step per iteration, no KL term, and the same reward
(bfcl-eval's AST verdict through the envace-gym env). An iteration is
generation, reward and update. Needs ``pip install -e '.[bench]'`` (TRL).

    python benchmarks/grpo_iteration.py [--iterations 6] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

import envace_gym  # noqa: F401
from envace_gym.agents.prompting import render_prompt
from envace_gym.fixtures import tiny_model
from envace_gym.training.trainer import TrainConfig, Trainer

ENV_ID = "EnvACE/bfcl-simple-python-v0"
PROMPTS, GROUP = 2, 4


def envace_side(model: Path, out: Path, args) -> list[float]:
    config = TrainConfig(
        model=f"hf:{model}",
        env_id=ENV_ID,
        out=str(out),
        dynamics="real",
        split=None,
        eval_split=None,
        group_size=GROUP,
        tasks_per_step=PROMPTS,
        steps=args.iterations,
        minibatch=PROMPTS * GROUP,
        max_new_tokens=args.new_tokens,
        eval_every=0,
        save_every=10**9,
        kl_coef=0.0,
        lr=1e-5,
        reward="world",  # the verdict TRL's side gets too
        stop_after_flat_steps=0,  # a timing run: a flat group is no reason to stop
    )
    trainer = Trainer(config)
    times = []
    for _ in range(args.iterations):
        start = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - start)
    return times


def trl_side(model: Path, out: Path, args) -> tuple[list[float], float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model)
    env = gym.make(ENV_ID)
    rows = []
    for task_id in env.unwrapped.task_ids[: PROMPTS * (args.iterations + 1)]:
        obs, _ = env.reset(options={"task_id": task_id})
        rows.append({"prompt": render_prompt(tokenizer, obs)[0], "task_id": task_id})

    def bfcl_verdict(completions, task_id, **_):
        rewards = []
        for text, tid in zip(completions, task_id):
            env.reset(options={"task_id": tid})
            rewards.append(env.step(text)[1])
        return rewards

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], 0.0

        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            self.times.append(time.perf_counter() - self.start)

    config = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=args.new_tokens,
        max_steps=args.iterations,
        learning_rate=1e-5,
        beta=0.0,
        num_iterations=1,
        temperature=1.0,
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=10**9,
        disable_tqdm=True,
        seed=0,
        shuffle_dataset=False,
        dataloader_num_workers=0,
    )
    clock = Clock()
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model),
        reward_funcs=bfcl_verdict,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    lengths = [r["completions/mean_length"] for r in trainer.state.log_history if "completions/mean_length" in r]
    return clock.times, statistics.fmean(lengths)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp) / "tiny")
        ours = envace_side(model, Path(tmp) / "envace", args)
        theirs, trl_length = trl_side(model, Path(tmp) / "trl", args)
    # the first iteration of each side warms up (allocations, compilation of kernels)
    a, b = statistics.median(ours[1:]), statistics.median(theirs[1:])
    print(
        f"GRPO iteration on {ENV_ID} prompts: {PROMPTS} prompts x {GROUP} completions, "
        f"{args.new_tokens} new tokens, tiny model, CPU; median seconds over iterations 2..{args.iterations}"
    )
    print(f"  envace-gym Trainer.train_step  {a:7.3f}   ({' '.join(f'{t:.2f}' for t in ours)})")
    print(f"  TRL GRPOTrainer step           {b:7.3f}   ({' '.join(f'{t:.2f}' for t in theirs)})")
    print(f"  TRL / envace-gym: {b / a:.2f}x (TRL's mean completion length: {trl_length:.1f} tokens)")


if __name__ == "__main__":
    main()
