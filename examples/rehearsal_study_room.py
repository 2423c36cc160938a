"""The rehearsal study where RL has room to learn: conditions x model sizes x seeds on a task with a known optimum.

On ``EnvACE/plan-choice-v0`` (two plausible plans, one rewarded: docs/suites/plan-choice.md), for each
model size and seed:

1. **Warm start.** A random-init tiny model of that size (:func:`envace_gym.fixtures.tiny_model`),
   SFT-trained on the noisy oracle's real train episodes, which take the other plan in a share
   ``--noise`` of them: a warm start at about ``1 - noise``.
2. **GRPO** from it under each condition (``real``, ``envace``, ``act-only``, ``adaptive``, as in
   ``examples/rehearsal_study.py``), ``--steps`` steps of ``--tasks-per-step`` x ``--group-size``.
3. **Yardstick**, every ``--eval-every`` steps on the test split in the real env: the sampled share
   of the rewarded plan (temperature 1, ``--episodes`` episodes), the greedy reward, and the real
   calls spent so far; rehearsal fidelity (``leaf_match``: the oracle acts, the model rehearses)
   before and after.

Each (size, seed) writes ``OUT/SIZE-seedN.json`` when done, so several processes (one torch thread
each) can split the seeds or sizes between them into one ``OUT``; ``--summarize`` (and the end of
every run) gathers them into ``OUT/rehearsal_study_room.json`` and ``OUT/rehearsal_study_room.png``.

    python examples/rehearsal_study_room.py --sizes 1m 4m 16m --seeds 0 1 2 --out runs/room
    python examples/rehearsal_study_room.py --dry-run --out runs/room   # the plan and its settings, no training
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import gymnasium as gym
import torch

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.hf import HFAgent
from envace_gym.fixtures import tiny_model
from envace_gym.play.loop import run_episodes
from envace_gym.play.records import write_record
from envace_gym.training import SFT, SFTConfig, TrainConfig, Trainer
from envace_gym.training.held_out import fidelity, held_out

CONDITIONS = {  # name: dynamics, roles trained
    "real": ("real", ["act"]),
    "envace": ("rehearsed", ["act", "rehearse"]),
    "act-only": ("rehearsed", ["act"]),
    "adaptive": ("adaptive", ["act", "rehearse"]),
}
SIZES = {"1m": (192, 2), "4m": (256, 6), "16m": (512, 7)}  # name: width, layers (about 1, 4 and 16 M weights)


def measure(args, env, model, tokenizer, fidelity_too: bool) -> dict:
    """The sampled share of the rewarded plan, the greedy reward, and (``fidelity_too``) leaf_match."""
    ids = env.unwrapped.task_ids
    repeats = max(1, args.episodes // len(ids))
    sampler = HFAgent("m", model=model, tokenizer=tokenizer, max_new_tokens=args.new_tokens, temperature=1.0, seed=1)
    greedy = HFAgent("m", model=model, tokenizer=tokenizer, max_new_tokens=args.new_tokens)
    out = {"share": held_out(env, sampler, ids * repeats)["reward"], "reward": held_out(env, greedy, ids)["reward"]}
    if fidelity_too:
        out["leaf_match"] = fidelity(env, greedy, ids)["leaf_match"]
    return out


def warm_start(args, size: str, seed: int, folder: Path) -> Path:
    """SFT of a fresh model of ``size`` on the noisy oracle's episodes; returns the saved model."""
    width, layers = SIZES[size]
    init = tiny_model(folder / "init", hidden_size=width, layers=layers, seed=seed, env_id=args.env)
    env = gym.make(args.env, split="train", dynamics="real", max_turns=args.max_turns)
    noisy = agents.load("noisy-oracle", env=env, p=args.noise, seed=seed)
    episodes = folder / "noisy.jsonl"
    with episodes.open("w") as f:
        for record in run_episodes(env, noisy, env.unwrapped.task_ids, seed=seed, repeats=args.repeats):
            write_record(f, record)
    sft = SFT(
        SFTConfig(
            model=f"hf:{init}",
            env_id=args.env,
            source=str(episodes),
            out=str(folder / "sft"),
            steps=args.sft_steps,
            batch=8,
            minibatch=8,
            lr=args.sft_lr,
            save_every=0,
            tensorboard=False,
            seed=seed,
        )
    )
    sft.train()
    return folder / "sft" / f"step-{args.sft_steps}"


def run(args, size: str, seed: int) -> dict:
    """One (size, seed): its warm start, then every condition's curve."""
    folder = args.out / f"{size}-seed{seed}"
    env = gym.make(args.env, split="test", dynamics="real", max_turns=args.max_turns)
    started = time.perf_counter()
    warm = warm_start(args, size, seed, folder)
    policy = HFAgent(warm)
    result: dict = {"size": size, "seed": seed, "warm": measure(args, env, policy.model, policy.tokenizer, True)}
    print(f"{size} seed {seed} warm start {result['warm']}", flush=True)
    for name in args.conditions:
        dynamics, roles = CONDITIONS[name]
        trainer = Trainer(
            TrainConfig(
                model=f"hf:{warm}",
                env_id=args.env,
                out=str(folder / name),
                dynamics=dynamics,
                roles=roles,
                group_size=args.group_size,
                tasks_per_step=args.tasks_per_step,
                steps=args.steps,
                lr=args.lr,
                max_new_tokens=args.new_tokens,
                max_turns=args.max_turns,
                eval_every=0,
                save_every=0,
                stop_after_flat_steps=0,
                tensorboard=False,
                seed=seed,
            )
        )
        curve = [{"step": 0, "real_calls": 0, "train_reward": None, **result["warm"]}]
        calls, rewards = 0, []
        while trainer.step < args.steps:
            record = trainer.train_step()
            calls, rewards = calls + record["real_calls"], rewards + [record["reward"]]
            if trainer.step % args.eval_every == 0 or trainer.step == args.steps:
                last = trainer.step == args.steps
                point = measure(args, env, trainer.model, trainer.tokenizer, last)
                curve.append(
                    {"step": trainer.step, "real_calls": calls, "train_reward": statistics.fmean(rewards), **point}
                )
                rewards = []
                print(f"{size} seed {seed} {name} {curve[-1]}", flush=True)
        result[name] = {
            "curve": curve,
            "real_calls": calls,
            "leaf_match": {"before": result["warm"]["leaf_match"], "after": curve[-1]["leaf_match"]},
        }
    result["seconds"] = time.perf_counter() - started
    (args.out / f"{size}-seed{seed}.json").write_text(json.dumps(result, indent=1))
    return result


def summarize(out: Path, settings: dict) -> None:
    """Gather ``OUT/*-seed*.json`` into ``OUT/rehearsal_study_room.json`` and its figure: test share against
    steps per condition (mean over seeds), one panel per size, and real calls against steps."""
    from matplotlib.figure import Figure

    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*-seed*.json"))]
    (out / "rehearsal_study_room.json").write_text(json.dumps({"settings": settings, "runs": runs}, indent=1))
    sizes = [s for s in SIZES if any(r["size"] == s for r in runs)]
    if not sizes:
        return
    fig = Figure(figsize=(4 * (len(sizes) + 1), 3.5))
    axes = fig.subplots(1, len(sizes) + 1, squeeze=False)[0]
    for ax, size in zip(axes, sizes):
        for name in CONDITIONS:
            curves = [r[name]["curve"] for r in runs if r["size"] == size and name in r]
            if curves:
                n = min(map(len, curves))
                steps = [p["step"] for p in curves[0][:n]]
                ax.plot(steps, [statistics.fmean(c[i]["share"] for c in curves) for i in range(n)], label=name)
        ax.set(title=f"{size}: rewarded share (test, sampled)", xlabel="GRPO step", ylim=(0, 1.02))
    calls = axes[-1]
    for name in CONDITIONS:
        curves = [r[name]["curve"] for r in runs if name in r]
        if curves:
            n = min(map(len, curves))
            steps = [p["step"] for p in curves[0][:n]]
            calls.plot(steps, [statistics.fmean(c[i]["real_calls"] for c in curves) for i in range(n)], label=name)
    calls.set(title="real calls in training (all sizes)", xlabel="GRPO step")
    calls.legend()
    fig.tight_layout()
    fig.savefig(out / "rehearsal_study_room.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="EnvACE/plan-choice-v0")
    parser.add_argument("--noise", type=float, default=0.5, help="the noisy oracle's share of wrong plans")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["1m"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--conditions", nargs="+", choices=list(CONDITIONS), default=list(CONDITIONS))
    parser.add_argument("--repeats", type=int, default=4, help="noisy episodes per train task")
    parser.add_argument("--sft-steps", type=int, default=120)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=64, help="sampled test episodes per measure")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/rehearsal_study_room"))
    parser.add_argument("--dry-run", action="store_true", help="print the runs and write OUT/settings.json only")
    parser.add_argument("--summarize", action="store_true", help="gather the finished runs in OUT")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in ("dry_run", "summarize")
    }
    if args.dry_run or args.summarize:
        if args.dry_run:
            (args.out / "settings.json").write_text(json.dumps(settings, indent=1))
            for size in args.sizes:
                for seed in args.seeds:
                    print(f"{size} (width {SIZES[size][0]}, {SIZES[size][1]} layers) seed {seed}: {args.conditions}")
            return
        summarize(args.out, settings)
        return
    torch.set_num_threads(1)
    for size in args.sizes:
        for seed in args.seeds:
            run(args, size, seed)
            summarize(args.out, settings)


if __name__ == "__main__":
    main()
