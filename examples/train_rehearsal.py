"""Warm-start a tiny model on gold tau2 episodes, then train it with role-wise GRPO under rehearsal.

1. Warm start: the oracle's episodes of tau2-retail's train split under rehearsed
   dynamics (it acts with the gold actions and rehearses the real responses),
   rendered with the chat template; next-token loss as a token mean per role
   (assistant tokens: act, tool-response tokens: rehearse), summed over the roles.
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
from envace_gym.compare import compare_calls
from envace_gym.runner import run_episode
from envace_gym.testing import tiny_model
from envace_gym.training import TrainConfig, Trainer

ENV_ID = "EnvACE/tau2-retail-v0"
ROLE_OF = {"assistant": 1, "tool": 2}  # token roles; 0 is context
EVAL_ENV = {"max_turns": 6, "user_kwargs": {"max_turns": 2}}  # the scripted user ends after 2 replies


def gold_sequences(tokenizer, split: str, task_ids) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids, roles) of every gold episode, one row each, as the trainer tags a rollout: an
    assistant message is act from where the generation prompt ends, a tool message is
    rehearse from where its content begins; template text before them is context."""
    env = gym.make(ENV_ID, split=split, dynamics="rehearsed", reward="replay")
    oracle = agents.load("oracle", env=env)
    out = []
    for task_id in task_ids:
        run_episode(env, oracle, task_id)
        messages, tools = env.unwrapped.episode.messages, env.unwrapped.tools.schemas

        def render(upto, prompt=False):
            return tokenizer.apply_chat_template(messages[:upto], tools=tools, tokenize=False,
                                                 add_generation_prompt=prompt)

        ids, roles, previous = [], [], ""
        for i, message in enumerate(messages):
            text, start = render(i + 1), len(previous)
            if message["role"] == "assistant":
                start = len(render(i, prompt=True))
            elif message["role"] == "tool":
                start = text.index(message["content"], start)
            for piece, role in ((text[len(previous):start], 0), (text[start:], ROLE_OF.get(message["role"], 0))):
                piece_ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
                ids += piece_ids
                roles += [role] * len(piece_ids)
            previous = text
        out.append((torch.tensor([ids]), torch.tensor([roles])))
    return out


def role_losses(model, ids, roles) -> dict[int, torch.Tensor]:
    """Summed next-token loss and token count of each role in one row."""
    logits = model(input_ids=ids).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    target = roles[:, 1:]
    return {r: (nll[target == r].sum(), (target == r).sum()) for r in ROLE_OF.values()}


def warm_start(model, sequences, epochs: int, lr: float) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    total = epochs * len(sequences)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0 - k / total)
    model.train()
    for _ in range(epochs):
        for ids, roles in sequences:
            parts = role_losses(model, ids, roles)
            loss = sum(s / n for s, n in parts.values() if n)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
    model.eval()


def held_out_loss(model, sequences) -> dict:
    """Per-token loss of each role over the held-out gold episodes."""
    sums = {r: [0.0, 0] for r in ROLE_OF.values()}
    with torch.no_grad():
        for ids, roles in sequences:
            for r, (s, n) in role_losses(model, ids, roles).items():
                sums[r][0] += s.item()
                sums[r][1] += n.item()
    return {"loss_act": sums[1][0] / sums[1][1], "loss_rehearse": sums[2][0] / sums[2][1]}


def gold_share(episode) -> tuple[float, dict]:
    """Share of the task's gold actions matched by the episode's calls (the GRPO reward)."""
    _, parts = episode.suite.score_actions(episode.task, episode)
    checks = parts["action_checks"]
    return (sum(c["met"] for c in checks) / len(checks) if checks else 1.0), parts


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
        shares.append(gold_share(real.unwrapped.episode)[0])
    oracle = agents.load("oracle", env=real)
    calls = list(compare_calls(real, oracle, agent, task_ids))
    return {"act_reward": statistics.fmean(rewards), "gold_share": statistics.fmean(shares),
            "valid_calls": valid / turns,
            "parsed": statistics.fmean(c["parsed"] for c in calls),
            "shape": statistics.fmean(c["shape"] for c in calls),
            "leaf_match": statistics.fmean(c["leaf_match"] for c in calls),
            **held_out_loss(agent.model, sequences)}


def run_seed(seed: int, args) -> dict:
    out = args.out / f"seed{seed}"
    torch.manual_seed(seed)
    agent = agents.load(f"hf:{tiny_model(out / 'init', seed=seed)}", max_new_tokens=args.new_tokens, seed=seed)
    held_out = gym.make(ENV_ID, split="test").unwrapped.task_ids[:args.eval_tasks]
    train_ids = gym.make(ENV_ID, split="train").unwrapped.task_ids[:args.warm_tasks]
    held_out_gold = gold_sequences(agent.tokenizer, "test", held_out)
    row = {"seed": seed, "before": evaluate(agent, held_out, held_out_gold)}
    warm_start(agent.model, gold_sequences(agent.tokenizer, "train", train_ids), args.warm_epochs, lr=5e-3)
    row["warm"] = evaluate(agent, held_out, held_out_gold)
    agent.model.save_pretrained(out / "warm")
    agent.tokenizer.save_pretrained(out / "warm")
    config = TrainConfig(model=f"hf:{out / 'warm'}", env_id=ENV_ID, out=str(out / "grpo"), reward=gold_share,
                         group_size=4, tasks_per_step=1, steps=args.grpo_steps, lr=2e-4,
                         max_new_tokens=args.new_tokens, max_turns=EVAL_ENV["max_turns"],
                         env_kwargs={"user_kwargs": EVAL_ENV["user_kwargs"]}, eval_every=0,
                         save_every=args.grpo_steps, seed=seed)
    trainer = Trainer(config)
    row["grpo_rewards"] = [r["reward"] for r in trainer.train()]
    trainer.agent.sampling = {"max_new_tokens": args.new_tokens, "do_sample": False}
    row["grpo"] = evaluate(trainer.agent, held_out, held_out_gold)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/train_rehearsal"))
    parser.add_argument("--warm-tasks", type=int, default=12)
    parser.add_argument("--warm-epochs", type=int, default=12)
    parser.add_argument("--grpo-steps", type=int, default=4)
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
