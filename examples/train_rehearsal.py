"""Warm-start a tiny model on gold tau2 episodes, then train it with role-wise GRPO under rehearsal.

1. Warm start: the oracle's episodes of tau2-retail's train split under rehearsed
   dynamics (it acts with the gold actions and rehearses the real responses),
   rendered with the chat template; next-token loss on the assistant (act) and
   tool-response (rehearse) tokens.
2. Role-wise GRPO under rehearsed dynamics (reward: gold-action match), a few steps.
3. Before and after each phase, on held-out test tasks: the act role's reward in
   the real env, and the rehearse role's fidelity on held-out calls (shadow
   episodes: the oracle acts, the model rehearses, the world answers).

    python examples/train_rehearsal.py --seeds 0 1 2 --out runs/train_rehearsal
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import gymnasium as gym
import torch

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.compare import compare_calls
from envace_gym.runner import run_episode
from envace_gym.testing import tiny_model
from envace_gym.training import TrainConfig, Trainer


def gold_sequences(tokenizer, task_ids):
    """(ids, trained-token mask) per gold episode: act and rehearse messages are trained."""
    env = gym.make("EnvACE/tau2-retail-v0", split="train", dynamics="rehearsed", reward="replay")
    oracle = agents.load("oracle", env=env)
    out = []
    for task_id in task_ids:
        run_episode(env, oracle, task_id)
        messages, tools = env.unwrapped.episode.messages, env.unwrapped.tools.schemas
        ids, mask, previous = [], [], ""
        for i, message in enumerate(messages):
            text = tokenizer.apply_chat_template(messages[:i + 1], tools=tools, tokenize=False)
            piece = tokenizer(text[len(previous):], add_special_tokens=False)["input_ids"]
            ids += piece
            mask += [message["role"] in ("assistant", "tool")] * len(piece)
            previous = text
        out.append((torch.tensor([ids]), torch.tensor([mask])))
    return out


def warm_start(model, sequences, epochs: int, lr: float) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        for ids, mask in sequences:
            labels = torch.where(mask.bool(), ids, -100)
            loss = model(input_ids=ids, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()


def evaluate(agent, task_ids) -> dict:
    real = gym.make("EnvACE/tau2-retail-v0", split="test", max_turns=4)
    rewards = [run_episode(real, agent, t)["reward"] for t in task_ids]
    oracle = agents.load("oracle", env=real)
    calls = list(compare_calls(real, oracle, agent, task_ids))
    return {"act_reward": statistics.fmean(rewards),
            "parsed": statistics.fmean(c["parsed"] for c in calls),
            "leaf_match": statistics.fmean(c["leaf_match"] for c in calls),
            "shape": statistics.fmean(c["shape"] for c in calls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/train_rehearsal"))
    parser.add_argument("--warm-tasks", type=int, default=16)
    parser.add_argument("--warm-epochs", type=int, default=8)
    parser.add_argument("--grpo-steps", type=int, default=3)
    parser.add_argument("--eval-tasks", type=int, default=4)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:
        torch.manual_seed(seed)
        path = tiny_model(args.out / f"seed{seed}" / "init", seed=seed)
        agent = agents.load(f"hf:{path}", max_new_tokens=48, seed=seed)
        held_out = gym.make("EnvACE/tau2-retail-v0", split="test").unwrapped.task_ids[:args.eval_tasks]
        train_ids = gym.make("EnvACE/tau2-retail-v0", split="train").unwrapped.task_ids[:args.warm_tasks]
        row = {"seed": seed, "before": evaluate(agent, held_out)}
        warm_start(agent.model, gold_sequences(agent.tokenizer, train_ids), args.warm_epochs, lr=3e-3)
        row["warm"] = evaluate(agent, held_out)
        warm = args.out / f"seed{seed}" / "warm"
        agent.model.save_pretrained(warm)
        agent.tokenizer.save_pretrained(warm)
        config = TrainConfig(model=f"hf:{warm}", env_id="EnvACE/tau2-retail-v0", out=str(args.out / f"seed{seed}" / "grpo"),
                             group_size=4, tasks_per_step=1, steps=args.grpo_steps, lr=1e-4,
                             max_new_tokens=48, max_turns=3, eval_every=0, save_every=args.grpo_steps, seed=seed)
        trainer = Trainer(config)
        trainer.train()
        trainer.agent.sampling = {"max_new_tokens": 48, "do_sample": False}
        row["grpo"] = evaluate(trainer.agent, held_out)
        results.append(row)
        print(json.dumps(row))
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "results.png")
    print(f"results in {args.out / 'results.json'} and {args.out / 'results.png'}")


def plot(results, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases, metrics = ("before", "warm", "grpo"), ("act_reward", "parsed", "leaf_match", "shape")
    fig, axes = plt.subplots(1, len(metrics), figsize=(13, 3.4))
    for ax, metric in zip(axes, metrics):
        for row in results:
            ax.plot(phases, [row[p][metric] for p in phases], marker="o", label=f"seed {row['seed']}")
        ax.set_title(metric)
        ax.set_ylim(-0.05, 1.05)
    axes[0].legend(fontsize=8)
    fig.suptitle("tiny model on tau2-retail: act reward (real env) and rehearsal fidelity (held-out calls)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
