"""The EnvACE controlled study at CPU scale: world rehearsal against real-environment RL.

For each seed, one warm start (role-masked SFT on the oracle's real episodes of the train
split), then role-wise GRPO from it under three conditions:

    real        real dynamics, act role only (ordinary agentic RL: every call runs)
    envace      rehearsed dynamics, both roles (the policy writes the tool responses)
    act-only    rehearsed dynamics, act role only (the rehearse role frozen)

All three are rewarded with the share of the task's gold actions their calls match
(the ``actions_share`` reward: partial credit; tau2's own reward is 0/1). Each model is evaluated
greedily on the first ``--eval-tasks`` tasks of the real test split: tau2's reward in the
real env, gold share, valid-call rate (act turns whose calls all pass validation),
rehearsal fidelity on the same tasks' calls (the oracle acts, the model rehearses:
parsed, leaf_match, exact), before training, after the warm start, and every
``--eval-every`` GRPO steps; and the real tool calls each condition ran while training.

    python examples/rehearsal_study.py --seeds 0 1 2 --out runs/rehearsal_study
    python examples/rehearsal_study.py --warm-from runs/rehearsal_study --steps 24 --conditions real envace \
        --out runs/rehearsal_study_long                      # the same warm starts, longer GRPO
    python examples/rehearsal_study.py --lora-rank 8 --seeds 0 --warm-episodes 24 --warm-steps 12 --warm-batch 2 \
        --conditions envace --steps 2 --group-size 4 --tasks-per-step 1 --eval-every 2 --eval-tasks 4 \
        --new-tokens 64 --lr 1e-3 --out runs/smollm2_lora    # SmolLM2-135M with LoRA, a short run
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import gymnasium as gym
import numpy as np

import envace_gym  # noqa: F401
from envace_gym.agents.hf import HFAgent, smollm2_path
from envace_gym.testing import tiny_model
from envace_gym.training import SFT, SFTConfig, TrainConfig, Trainer
from envace_gym.training.checkpoint import latest
from envace_gym.training.evaluation import held_out

ENV_ID = "EnvACE/tau2-mock-gen-v0"
CONDITIONS = {"real": ("real", ["act"]), "envace": ("rehearsed", ["act", "rehearse"]),
              "act-only": ("rehearsed", ["act"])}
METRICS = ("reward", "gold_share", "valid_calls", "parsed", "leaf_match", "exact")


def evaluate(policy, path, args) -> dict:
    """Greedy, on the held-out tasks: real reward, valid calls and rehearsal fidelity."""
    env = gym.make(ENV_ID, split="test", dynamics="real", max_turns=args.max_turns)
    agent = HFAgent(path, model=policy.model, tokenizer=policy.tokenizer, max_new_tokens=args.new_tokens)
    return held_out(env, agent, env.unwrapped.task_ids[:args.eval_tasks])


def warm_start(seed: int, init: Path, lr: float, args) -> tuple[dict, Path]:
    """The warm start's model (trained here, or the one ``--warm-from`` holds for this seed) and
    the evaluations before and after it."""
    out = args.out / f"seed{seed}"
    if args.warm_from:
        warm = args.warm_from / f"seed{seed}" / "warm-merged" if args.lora_rank \
            else latest(args.warm_from / f"seed{seed}" / "warm")
        return {"before": evaluate(HFAgent(init), init, args), "warm": evaluate(HFAgent(warm), init, args)}, warm
    sft = SFT(SFTConfig(model=f"hf:{init}", env_id=ENV_ID, out=str(out / "warm"), max_episodes=args.warm_episodes,
                        batch=args.warm_batch, minibatch=args.warm_batch, steps=args.warm_steps, lr=10 * lr,
                        save_every=0, seed=seed, lora_rank=args.lora_rank, tensorboard=False))
    row = {"before": evaluate(sft, init, args)}
    sft.train()
    row["warm"] = evaluate(sft, init, args)
    warm = latest(out / "warm")
    if args.lora_rank:  # the warm adapter merged into the base: each condition trains a fresh adapter on it
        warm = out / "warm-merged"
        sft.model.merge_and_unload().save_pretrained(warm)
        sft.tokenizer.save_pretrained(warm)
    return row, warm


def run_seed(seed: int, args) -> dict:
    out = args.out / f"seed{seed}"
    if args.lora_rank:
        init, lr = smollm2_path(), args.lr / 10
    elif args.warm_from:
        init, lr = args.warm_from / f"seed{seed}" / "init", args.lr
    else:
        init, lr = tiny_model(out / "init", hidden_size=args.hidden, layers=args.layers, seed=seed,
                              env_id=ENV_ID), args.lr
    phases, warm = warm_start(seed, init, lr, args)
    row = {"seed": seed, **phases}
    print(f"seed {seed} before {row['before']}\nseed {seed} warm {row['warm']}", flush=True)
    for name in args.conditions:
        dynamics, roles = CONDITIONS[name]
        trainer = Trainer(TrainConfig(
            model=f"hf:{warm}", env_id=ENV_ID, out=str(out / name), dynamics=dynamics, roles=roles,
            reward="actions_share", group_size=args.group_size, tasks_per_step=args.tasks_per_step, steps=args.steps,
            lr=lr, max_new_tokens=args.new_tokens, max_turns=args.max_turns, eval_every=0, save_every=0,
            lora_rank=args.lora_rank, tensorboard=False, seed=seed))
        curve, real_calls = [{"step": 0, "real_calls": 0, **row["warm"]}], 0
        while trainer.step < args.steps:
            record = trainer.train_step()
            # each env plays one episode a step: its calls are the ones that episode ran
            real_calls += sum(c.source == "real" for env in trainer.envs for c in env.unwrapped.episode.calls)
            if trainer.step % args.eval_every == 0 or trainer.step == args.steps:
                curve.append({"step": trainer.step, "real_calls": real_calls, "train_reward": record["reward"],
                              **evaluate(trainer, init, args)})
                print(f"seed {seed} {name} {curve[-1]}", flush=True)
        row[name] = curve
    return row


def ran(results: list[dict]) -> list[str]:
    return [name for name in CONDITIONS if name in results[0]]


def summarize(results: list[dict]) -> dict:
    """Mean over seeds of each phase's metrics, and per seed the GRPO gain in real reward and gold share."""
    table = {phase: {m: statistics.fmean(r[phase][m] for r in results) for m in METRICS}
             for phase in ("before", "warm")}
    for name in ran(results):
        table[name] = {m: statistics.fmean(r[name][-1][m] for r in results) for m in METRICS}
        table[name]["real_calls"] = statistics.fmean(r[name][-1]["real_calls"] for r in results)
        for m in ("reward", "gold_share"):
            table[name][f"{m}_gain_by_seed"] = [r[name][-1][m] - r["warm"][m] for r in results]
    return table


def plot(results: list[dict], png: Path) -> None:
    """A curve per condition (mean over seeds, band: min to max) for each metric against GRPO steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(3.2 * len(METRICS), 3.4))
    for ax, metric in zip(axes, METRICS):
        for name in ran(results):
            steps = [p["step"] for p in results[0][name]]
            values = np.array([[p[metric] or 0.0 for p in r[name]] for r in results])
            ax.plot(steps, values.mean(0), marker="o", ms=3, label=name)
            ax.fill_between(steps, values.min(0), values.max(0), alpha=0.2)
        ax.axhline(statistics.fmean(r["before"][metric] or 0.0 for r in results), color="gray", ls=":", lw=1)
        ax.set_title(metric)
        ax.set_xlabel("GRPO step (0: warm start)")
        ax.set_ylim(-0.05, 1.05)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{ENV_ID}, held-out test tasks, {len(results)} seed(s); dotted: before training")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/rehearsal_study"))
    parser.add_argument("--hidden", type=int, default=256, help="tiny model width")
    parser.add_argument("--layers", type=int, default=4, help="tiny model depth")
    parser.add_argument("--lora-rank", type=int, default=0, help="> 0: SmolLM2-135M with LoRA instead")
    parser.add_argument("--warm-episodes", type=int, default=2000)
    parser.add_argument("--warm-steps", type=int, default=500)
    parser.add_argument("--warm-from", type=Path, help="an earlier study's folder: reuse its seeds' warm starts")
    parser.add_argument("--warm-batch", type=int, default=8, help="episodes per warm-start step")
    parser.add_argument("--conditions", nargs="+", choices=list(CONDITIONS), default=list(CONDITIONS))
    parser.add_argument("--steps", type=int, default=8, help="GRPO steps per condition")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO learning rate (warm start: 10x)")
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=20)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--max-turns", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:  # the files are rewritten after each seed: a cut run keeps what it finished
        results.append(run_seed(seed, args))
        summary = summarize(results)
        (args.out / "results.json").write_text(json.dumps({"args": vars(args), "summary": summary,
                                                           "runs": results}, indent=1, default=str))
        plot(results, args.out / "results.png")
    print(json.dumps(summary, indent=1))
    print(f"results in {args.out / 'results.json'} and {args.out / 'results.png'}")


if __name__ == "__main__":
    main()
