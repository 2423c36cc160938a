"""What the LLM paths cost on a CPU, in CPU seconds of one thread (``time.process_time``: other jobs
on the machine change it little, unlike wall time): a SmolLM2 act turn at 64 and at 256 new tokens,
and GRPO steps of a tiny SFT-trained model on ``EnvACE/tau2-mock-office-v0`` at 2 x 8 and 8 x 8
episodes (generation and update).

    python benchmarks/cpu_costs.py [--model PATH]   # PATH: a trained tiny model (default: SFT one, 1,200 steps)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gymnasium as gym
import torch
from prefix_cache import ENV_ID, trained_model

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.training import TrainConfig, Trainer


def smollm2_turns() -> None:
    env = gym.make(ENV_ID, split="test")
    obs, _ = env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    for tokens in (64, 256):
        agent = agents.load("smollm2", max_new_tokens=tokens)
        start = time.process_time()
        gen = agent.generate([obs])[0]
        print(
            f"smollm2 act turn: {len(gen.prompt_ids)}-token prompt, {len(gen.completion_ids)} new tokens: "
            f"{time.process_time() - start:.1f} CPU s"
        )


def grpo_steps(model: Path, out: Path) -> None:
    for tasks, minibatch in ((2, 4), (8, 16)):
        trainer = Trainer(
            TrainConfig(
                model=f"hf:{model}",
                env_id=ENV_ID,
                out=str(out / f"grpo-{tasks}x8"),
                dynamics="real",
                roles=["act"],
                reward="strict_progress",
                group_size=8,
                tasks_per_step=tasks,
                minibatch=minibatch,
                steps=10,
                lr=3e-4,
                max_new_tokens=48,
                max_turns=5,
                eval_every=0,
                save_every=0,
                tensorboard=False,
            )
        )
        for _ in range(3):
            start = time.process_time()
            record = trainer.train_step()
            cpu = time.process_time() - start
            wall = record["rollout_s"] + record["update_s"]
            print(
                f"GRPO step, {tasks} x 8 episodes: {cpu:.1f} CPU s (generation {record['rollout_s'] / wall:.0%} "
                f"of its wall time, update {record['update_s'] / wall:.0%}; {record['tokens']} tokens)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a trained tiny model (default: SFT one)")
    parser.add_argument("--out", type=Path, default=Path("runs/cpu_costs"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    smollm2_turns()
    grpo_steps(args.model or trained_model(args.out, 1200), args.out)


if __name__ == "__main__":
    main()
