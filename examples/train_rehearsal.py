"""Warm-start a tiny model on gold tau2 episodes, then train it with role-wise GRPO under rehearsal.

1. Warm start (``envace_gym.training.SFT``, what ``envace-gym sft --from gold`` runs):
   the oracle's real episodes of tau2-retail's train split in the rollouts' token
   layout; next-token loss as a token mean per role (assistant tokens: act, real
   tool-response tokens: rehearse), summed over the roles.
2. Role-wise GRPO under rehearsed dynamics, rewarded with the share of the task's
   gold actions the episode's calls match (no real tool runs during training).
3. Before and after each phase, on held-out test tasks: the act role in the real
   env (tau2's reward, share of gold actions matched, act turns whose calls pass
   schema validation), the rehearse role's fidelity on held-out calls (shadow
   episodes: the oracle acts, the model rehearses, the world answers), and both
   roles' per-token loss on the held-out gold episodes.

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
from envace_gym.fixtures import tiny_model
from envace_gym.play.compare import compare_calls
from envace_gym.rewards import actions_share_reward
from envace_gym.training import SFT, SFTConfig, TrainConfig, Trainer, episode_tokens, gold_episodes, held_out_loss
from envace_gym.training.checkpoint import latest

ENV_ID = "EnvACE/tau2-retail-v0"
EVAL_ENV = {"max_turns": 6, "user_kwargs": {"max_turns": 2}}  # the scripted user ends after 2 replies


def evaluate(agent, task_ids, sequences) -> dict:
    real = gym.make(ENV_ID, split="test", **EVAL_ENV)
    rewards, shares, turns, valid = [], [], 0, 0
    for i, task_id in enumerate(task_ids):
        obs, _ = real.reset(seed=i, options={"task_id": task_id})
        done = False
        while not done:
            obs, reward, terminated, truncated, info = real.step(agent.act(obs))
            calls = info["tool_calls"]
            turns += 1
            valid += bool(calls) and all(c["source"] != "rejected" for c in calls)
            done = terminated or truncated
        rewards.append(reward)
        shares.append(actions_share_reward(real.unwrapped.episode)[0])
    oracle = agents.load("oracle", env=real)
    calls = list(compare_calls(real, oracle, agent, task_ids))
    return {
        "act_reward": statistics.fmean(rewards),
        "gold_share": statistics.fmean(shares),
        "valid_calls": valid / turns,
        "parsed": statistics.fmean(c["parsed"] for c in calls),
        "shape": statistics.fmean(c["shape"] for c in calls),
        "leaf_match": statistics.fmean(c["leaf_match"] for c in calls),
        **{
            f"loss_{role}": loss
            for role, loss in held_out_loss(agent.model, sequences, agent.tokenizer.pad_token_id).items()
        },
    }


def run_seed(seed: int, args) -> dict:
    out = args.out / f"seed{seed}"
    torch.manual_seed(seed)
    init = tiny_model(out / "init", hidden_size=args.hidden, layers=args.layers, seed=seed)
    agent = agents.load(f"hf:{init}", max_new_tokens=args.new_tokens, seed=seed)
    held_out = gym.make(ENV_ID, split="test").unwrapped.task_ids[: args.eval_tasks]
    held_out_gold = [episode_tokens(agent.tokenizer, r) for r in gold_episodes(ENV_ID, "test", args.eval_tasks)]
    row = {"seed": seed, "before": evaluate(agent, held_out, held_out_gold)}
    SFT(
        SFTConfig(
            model=f"hf:{init}",
            env_id=ENV_ID,
            out=str(out / "warm"),
            split="train",
            max_episodes=args.warm_tasks,
            epochs=args.warm_epochs,
            batch=1,
            minibatch=1,
            lr=5e-3,
            save_every=0,
            seed=seed,
            tensorboard=False,
            # a retail gold episode's context before its first trained token is about 5,000 of the tiny
            # tokenizer's tokens: cut at the default 4,096, no act or rehearse token would be trained
            max_tokens=16384,
        )
    ).train()
    warm = latest(out / "warm")
    row["warm"] = evaluate(
        agents.load(f"hf:{warm}", max_new_tokens=args.new_tokens, seed=seed), held_out, held_out_gold
    )
    config = TrainConfig(
        model=f"hf:{warm}",
        env_id=ENV_ID,
        out=str(out / "grpo"),
        reward="actions_share",
        group_size=args.group_size,
        tasks_per_step=1,
        steps=args.grpo_steps,
        lr=2e-4,
        max_new_tokens=args.new_tokens,
        max_turns=EVAL_ENV["max_turns"],
        env_kwargs={"user_kwargs": EVAL_ENV["user_kwargs"]},
        eval_every=0,
        save_every=args.grpo_steps,
        seed=seed,
    )
    trainer = Trainer(config)
    row["grpo_rewards"] = [r["reward"] for r in trainer.train()]
    trainer.agent.sampling = {"max_new_tokens": args.new_tokens, "do_sample": False}
    row["grpo"] = evaluate(trainer.agent, held_out, held_out_gold)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/train_rehearsal"))
    parser.add_argument("--hidden", type=int, default=128, help="tiny model width")
    parser.add_argument("--layers", type=int, default=2, help="tiny model depth")
    parser.add_argument("--warm-tasks", type=int, default=12)
    parser.add_argument("--warm-epochs", type=int, default=12)
    parser.add_argument("--grpo-steps", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4, help="GRPO episodes per task")
    parser.add_argument("--eval-tasks", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:
        results.append(run_seed(seed, args))
        print(json.dumps(results[-1]), flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "results.png")
    print(f"results in {args.out / 'results.json'} and {args.out / 'results.png'}")


def plot(results, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = ("before", "warm", "grpo")
    metrics = ("act_reward", "gold_share", "valid_calls", "parsed", "leaf_match", "loss_act", "loss_rehearse")
    fig, axes = plt.subplots(1, len(metrics) + 1, figsize=(3 * (len(metrics) + 1), 3.4))
    for ax, metric in zip(axes, metrics):
        for row in results:
            ax.plot(phases, [row[p][metric] for p in phases], marker="o", label=f"seed {row['seed']}")
        ax.set_title(metric)
        if not metric.startswith("loss"):
            ax.set_ylim(-0.05, 1.05)
    for row in results:
        axes[-1].plot(range(1, len(row["grpo_rewards"]) + 1), row["grpo_rewards"], marker="o")
    axes[-1].set_title("GRPO training reward")
    axes[-1].set_xlabel("step")
    axes[0].legend(fontsize=8)
    fig.suptitle("tiny model on tau2-retail: act role in the real env, rehearse role on held-out calls")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
