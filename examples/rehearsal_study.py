"""The EnvACE controlled study at CPU scale: world rehearsal against real-environment RL.

On ``EnvACE/tau2-mock-office-v0`` (one shared database: a world the policy can learn), for
each seed:

1. **SFT curve.** Role-masked SFT of a random-init tiny model on the oracle's real train
   episodes, scored every ``--sft-eval-every`` steps on the ``validation`` split (never on
   test): tau2's reward, gold share, valid calls, and rehearsal fidelity. The **warm start**
   is the first scored budget whose validation reward reaches ``--warm-target`` (room for RL
   to move), or the fixed budget ``--warm-step``; **SFT to plateau** is the best-scoring
   budget, after ``--patience`` scores without a gain or at ``--sft-steps``.
2. **GRPO** from the warm start, ``--steps`` steps of ``--tasks-per-step`` x ``--group-size``
   episodes, under these conditions:

       real        real dynamics, act role only (ordinary agentic RL: every call runs)
       envace      rehearsed dynamics, both roles (the policy writes the tool responses)
       act-only    rehearsed dynamics, act role only (the rehearse role frozen)
       mixed       mixed dynamics (a coin per call: the world or the policy), both roles
       mixed-wm    mixed, plus the world-model loss on the real responses (--world-model-coef)
       adaptive    adaptive dynamics (the world where the policy's rehearsal of a tool is not yet
                   proved faithful, the policy elsewhere), both roles
       adaptive-wm adaptive, plus the world-model loss gated by the router (trusted tools skipped)

   All are rewarded with ``progress`` (gold calls made and communicate items stated, from
   the transcript alone: computable where no real database exists).
3. **Yardstick.** Every phase, and each condition every ``--eval-every`` steps, is played
   greedily on the whole test split in the real env: tau2's own reward, gold share and
   valid calls; rehearsal fidelity (the oracle acts, the model rehearses: parsed,
   leaf_match, exact) on the test tasks' calls every ``--fidelity-every`` steps. Real tool
   calls consumed in training are counted.

Each seed runs as its own process (one torch thread each) and rewrites
``OUT/seed{N}/results.json`` after every evaluation, so an interrupted run keeps what it
measured; the parent then writes ``OUT/results.json`` (mean and standard error over seeds,
and per-seed numbers) and the curves (``results.png``: against GRPO steps and against real
calls; ``sft_curve.png``).

    python examples/rehearsal_study.py --seeds 0 1 2 --out runs/rehearsal_study
    python examples/rehearsal_study.py --env EnvACE/tau2-mock-gen-v0 --seeds 0 --out runs/study_mock_gen
    python examples/rehearsal_study.py --summarize --out runs/rehearsal_study   # redraw from the seed files
    python examples/rehearsal_study.py --diagnose runs/rehearsal_study/seed0/warm --out runs/rehearsal_study
    python examples/rehearsal_study.py --explore runs/rehearsal_study/seed0/warm --out runs/rehearsal_study
    python examples/rehearsal_study.py --gradients runs/rehearsal_study/seed0/warm --reward strict_progress \
        --out runs/rehearsal_study
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.hf import HFAgent
from envace_gym.fixtures import tiny_model
from envace_gym.play.loop import run_episodes
from envace_gym.rewards import actions_share_reward, strict_progress_reward
from envace_gym.training import SFT, SFTConfig, TrainConfig, Trainer
from envace_gym.training.held_out import fidelity, held_out
from envace_gym.training.rollout import collect
from envace_gym.training.sft import episode_tokens, role_nll

CONDITIONS = {  # name: dynamics, roles trained, world-model loss
    "real": ("real", ["act"], False),
    "envace": ("rehearsed", ["act", "rehearse"], False),
    "act-only": ("rehearsed", ["act"], False),
    "mixed": ("mixed", ["act", "rehearse"], False),
    "mixed-wm": ("mixed", ["act", "rehearse"], True),
    "adaptive": ("adaptive", ["act", "rehearse"], False),
    "adaptive-wm": ("adaptive", ["act", "rehearse"], True),  # the loss gated by the router's estimates
}
PHASES = ("before", "warm", "plateau")
METRICS = ("reward", "sampled_reward", "gold_share", "valid_calls", "parsed", "leaf_match", "exact")


class Study:
    """One seed's study; ``record`` is rewritten to ``seed{N}/results.json`` after every evaluation."""

    def __init__(self, seed: int, args):
        self.seed, self.args = seed, args
        self.out = args.out / f"seed{seed}"
        self.out.mkdir(parents=True, exist_ok=True)
        self.init = tiny_model(
            self.out / "init", hidden_size=args.hidden, layers=args.layers, seed=seed, env_id=args.env
        )
        self.envs = {
            split: gym.make(args.env, split=split, dynamics="real", max_turns=args.max_turns)
            for split in (args.val_split, "test")
        }
        self.record: dict = {"seed": seed}
        self.trainers: dict = {}

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.record, indent=1))

    def evaluate(self, policy, split: str, fidelity_tasks: int | None, tasks: int | None = None) -> dict:
        """Greedy play on the first ``tasks`` tasks of ``split`` (None: all), and rehearsal fidelity on
        the first ``fidelity_tasks`` tasks' calls (None: all; 0: none). The agents built here seed the
        process's generators (transformers' ``set_seed``): training's are put back after, so an evaluation
        never changes what training samples."""
        states = random.getstate(), np.random.get_state(), torch.get_rng_state()
        try:
            return self._evaluate(policy, split, fidelity_tasks, tasks)
        finally:
            random.setstate(states[0])
            np.random.set_state(states[1])
            torch.set_rng_state(states[2])

    def _evaluate(self, policy, split: str, fidelity_tasks: int | None, tasks: int | None) -> dict:
        env = self.envs[split]
        ids = env.unwrapped.task_ids[: tasks or self.args.eval_tasks]
        agent = HFAgent(self.init, model=policy.model, tokenizer=policy.tokenizer, max_new_tokens=self.args.new_tokens)
        out = held_out(env, agent, ids)
        if self.args.sampled_eval:  # the sampling policy that GRPO trains, one episode per task
            sampler = HFAgent(
                self.init,
                model=policy.model,
                tokenizer=policy.tokenizer,
                max_new_tokens=self.args.new_tokens,
                temperature=self.args.temperature,
                seed=self.seed,
            )
            out["sampled_reward"] = held_out(env, sampler, ids)["reward"]
        if fidelity_tasks != 0:
            out.update(fidelity(env, agent, ids[:fidelity_tasks]))
        return out

    def sft(self) -> tuple[Path, Path]:
        """The SFT curve on validation; returns the warm-start and plateau models."""
        args = self.args
        sft = SFT(
            SFTConfig(
                model=f"hf:{self.init}",
                env_id=args.env,
                out=str(self.out / "sft"),
                max_episodes=args.sft_episodes,
                batch=args.sft_batch,
                minibatch=args.sft_batch,
                steps=args.sft_steps,
                lr=args.sft_lr,
                save_every=0,
                seed=self.seed,
                tensorboard=False,
            )
        )
        # an untrained model writes max_new_tokens every turn: the first tasks show its zero
        self.record["before"] = self.evaluate(sft, "test", None, tasks=args.before_tasks)
        curve = self.record["sft_curve"] = []
        warm = best = None
        while sft.step < args.sft_steps:
            sft.train_step()
            if sft.step % args.sft_eval_every and sft.step < args.sft_steps:
                continue
            curve.append({"step": sft.step, **self.evaluate(sft, args.val_split, args.val_fidelity)})
            print(f"seed {self.seed} sft {curve[-1]}", flush=True)
            reached = curve[-1]["reward"] >= args.warm_target if args.warm_step is None else sft.step >= args.warm_step
            if warm is None and reached:
                warm = self._keep(sft, "warm")
                self.record["warm_step"] = sft.step
            if best is None or curve[-1]["reward"] > best["reward"]:
                best = curve[-1]
                self._keep(sft, "plateau")
                self.record["plateau_step"] = sft.step
            self.save()
            if len(curve) - 1 - curve.index(best) >= args.patience:
                break
        if warm is None:  # the target was never reached: the warm start is the plateau
            warm, self.record["warm_step"] = self.out / "plateau", self.record["plateau_step"]
        self.record["warm_target"] = args.warm_target
        return warm, self.out / "plateau"

    def _keep(self, policy, name: str) -> Path:
        path = self.out / name
        shutil.rmtree(path, ignore_errors=True)
        policy.model.save_pretrained(path)
        policy.tokenizer.save_pretrained(path)
        return path

    def grpo(self, name: str, warm: Path) -> None:
        args = self.args
        dynamics, roles, world_model = CONDITIONS[name]
        trainer = Trainer(
            TrainConfig(
                model=f"hf:{warm}",
                env_id=args.env,
                out=str(self.out / name),
                dynamics=dynamics,
                roles=roles,
                reward=charging_rejected
                if args.charge_rejected
                else with_success_bonus
                if args.success_bonus
                else args.reward,
                scale_advantages=args.scale_advantages,
                group_size=args.group_size,
                tasks_per_step=args.tasks_per_step,
                minibatch=args.minibatch,
                steps=args.steps,
                lr=args.lr,
                warmup_steps=args.warmup_steps,
                clip_eps=args.clip_eps,
                kl_coef=args.kl_coef,
                world_model_coef=args.world_model_coef if world_model else 0.0,
                world_model_gate=world_model and dynamics == "adaptive",
                temperature=args.temperature,
                max_new_tokens=args.new_tokens,
                max_turns=args.max_turns,
                eval_every=0,
                save_every=0,
                tensorboard=False,
                seed=self.seed,
            )
        )
        curve = self.record[name] = [{"step": 0, "real_calls": 0, "train_reward": None, **self.record["warm"]}]
        if self.args.keep_models:
            self.trainers[name] = trainer
        real_calls, rewards = 0, []
        while trainer.step < args.steps:
            record = trainer.train_step()
            rewards.append(record["reward"])
            real_calls += record["real_calls"]  # the calls the world answered in the step's episodes
            if trainer.step % args.eval_every == 0 or trainer.step == args.steps:
                full = trainer.step % args.fidelity_every == 0 or trainer.step == args.steps
                curve.append(
                    {
                        "step": trainer.step,
                        "real_calls": real_calls,
                        "train_reward": statistics.fmean(r for r in rewards if r is not None),
                        **self.evaluate(trainer, "test", None if full else 0),
                    }
                )
                rewards = []
                print(f"seed {self.seed} {name} {curve[-1]}", flush=True)
                self.save()

    def run(self) -> None:
        if self.args.warm_from:  # an earlier study's SFT phase and warm start for this seed
            earlier = self.args.warm_from / f"seed{self.seed}"
            done = json.loads((earlier / "results.json").read_text())
            self.record.update(
                {
                    k: done[k]
                    for k in ("before", "sft_curve", "warm_step", "plateau_step", "warm", "plateau", "warm_target")
                    if k in done
                }
            )
            warm = earlier / "warm"
            if "warm" not in self.record:  # that SFT phase was stopped once its warm start was saved
                self.record["warm"] = self.evaluate(_Loaded(warm), "test", None)
        else:
            warm, plateau = self.sft()
            self.record["warm"] = self.evaluate(_Loaded(warm), "test", None)
            same = self.record["plateau_step"] == self.record["warm_step"]  # one model: scored once
            self.record["plateau"] = self.record["warm"] if same else self.evaluate(_Loaded(plateau), "test", None)
        self.save()
        for name in self.args.conditions:
            self.grpo(name, warm)
            if self.args.keep_models:  # for --diagnose
                self._keep(self.trainers.pop(name), name + "-final")


def charging_rejected(episode) -> tuple[float, dict]:
    """``strict_progress`` whose calls' share also counts the assistant's rejected calls (invalid
    arguments, unknown tools) as extra: ``hits / (gold + extra + rejected)``."""
    value, parts = strict_progress_reward(episode)
    rejected = sum(not c.ran and c.requestor == "assistant" for c in episode.calls)
    if not rejected:
        return value, parts
    hits = sum(c["met"] for c in parts.get("action_checks") or [])
    share = hits / (len(parts.get("action_checks") or []) + parts["extra_calls"] + rejected)
    said = parts["communicate_share"]
    value = share if said is None else (share + said) / 2
    return value, {**parts, "strict_share": share, "rejected_calls": rejected, "strict_progress": value}


def with_success_bonus(episode) -> tuple[float, dict]:
    """``strict_progress`` averaged with its all-or-nothing form (1 only when every gold call is made,
    nothing extra is executed and every item is said, as tau2's reward asks), so that a whole success
    is worth twice the partial credit that comes closest to it."""
    value, parts = strict_progress_reward(episode)
    bonus = float(value == 1.0)
    return (value + bonus) / 2, {**parts, "success": bonus}


class _Loaded:
    """A saved model as the ``policy`` that :meth:`Study.evaluate` reads."""

    def __init__(self, path: Path):
        agent = HFAgent(path)
        self.model, self.tokenizer = agent.model, agent.tokenizer


def failure_modes(env_id: str, model: Path, split: str, args) -> dict:
    """Why the greedy policy of ``model`` fails the tasks of ``split`` it fails, one cause per
    episode, checked in this order: cut by the turn limit, a gold call missing, every gold call
    made but the database differs (a wrong or extra write), every call right but an item unsaid;
    and, over the episodes missing a gold call, the arguments that went wrong (:func:`missed_arguments`)."""
    env = gym.make(env_id, split=split, dynamics="real", max_turns=args.max_turns)
    agent = HFAgent(model, max_new_tokens=args.new_tokens)
    causes = dict.fromkeys(("solved", "turn_limit", "missing_call", "wrong_write", "unsaid_item", "other"), 0)
    details: dict[str, int] = {}
    for i, task_id in enumerate(env.unwrapped.task_ids):
        obs, _ = env.reset(seed=i, options={"task_id": task_id})
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(agent.act(obs))
            done = terminated or truncated
        parts = info.get("reward_info", {})
        share = actions_share_reward(env.unwrapped.episode)[0]
        cause = (
            "solved"
            if reward == 1.0
            else "turn_limit"
            if truncated
            else "missing_call"
            if share < 1.0
            else "wrong_write"
            if parts.get("db") == 0.0
            else "unsaid_item"
            if parts.get("communicate") == 0.0
            else "other"
        )
        causes[cause] += 1
        if cause == "missing_call":
            for miss in missed_arguments(env.unwrapped.episode):
                details[miss] = details.get(miss, 0) + 1
    return {**causes, "missing_call_detail": dict(sorted(details.items(), key=lambda kv: -kv[1]))}


def missed_arguments(episode) -> list[str]:
    """For each gold assistant call the episode did not make: ``"no NAME call"`` when no call of
    that tool ran, else the gold argument keys that the nearest call of that tool got wrong or
    left out (``"NAME.KEY"``)."""
    made = [(c.name, c.arguments or {}) for c in episode.calls if c.requestor == "assistant" and c.ran]
    out = []
    for gold in episode.suite.grader.gold_calls(episode.task):
        if gold["requestor"] != "assistant":
            continue
        args = gold["arguments"] or {}
        same = [a for name, a in made if name == gold["name"]]
        wrong = min(([k for k in args if a.get(k) != args[k]] for a in same), key=len, default=None)
        if wrong is None:
            out.append(f"no {gold['name']} call")
        out.extend(f"{gold['name']}.{k}" for k in wrong or [])
    return out


def exploration(env_id: str, model: Path, split: str, args, tasks: int = 60) -> dict:
    """Whether sampling at ``--temperature`` finds what greedy decoding misses, the signal GRPO learns
    from: on the first ``tasks`` tasks of ``split``, the greedy episode and ``--group-size`` sampled
    ones each (tau2's reward), counted per task."""
    envs = [gym.make(env_id, split=split, dynamics="real", max_turns=args.max_turns) for _ in range(args.group_size)]
    ids = envs[0].unwrapped.task_ids[:tasks]
    greedy = {
        r["task_id"]: r["reward"] for r in run_episodes(envs, HFAgent(model, max_new_tokens=args.new_tokens), ids)
    }
    sampler = HFAgent(model, max_new_tokens=args.new_tokens, temperature=args.temperature, seed=0)
    sampled: dict[str, list[float]] = {t: [] for t in ids}
    for record in run_episodes(envs, sampler, ids, repeats=args.group_size):
        sampled[record["task_id"]].append(record["reward"])
    failed = [t for t in ids if greedy[t] < 1.0]
    return {
        "tasks": len(ids),
        "samples_per_task": args.group_size,
        "greedy_solved": len(ids) - len(failed),
        "sample_success": statistics.fmean(r for t in ids for r in sampled[t]),
        "greedy_failed_some_sample_solved": sum(max(sampled[t]) == 1.0 for t in failed),
        "greedy_failed_no_sample_solved": sum(max(sampled[t]) < 1.0 for t in failed),
        "greedy_solved_sample_success": statistics.fmean(r for t in ids if t not in failed for r in sampled[t])
        if len(failed) < len(ids)
        else None,
        "groups_all_equal": sum(len(set(sampled[t])) == 1 for t in ids),
    }


def gradient_agreement(env_id: str, model: Path, args, tasks: int = 8, batches: int = 4) -> dict:
    """Where one GRPO step's gradient points, against SFT's: on ``batches`` disjoint sets of ``tasks``
    train tasks, the act role's SFT gradient of ``model`` (the oracle's episodes) and two GRPO gradients
    (``--group-size`` sampled episodes per task, ``--reward``, two sampling seeds). Cosines: GRPO
    against SFT on the same tasks, two GRPO samples of the same tasks, and each method across task
    sets (how much of a batch's direction is shared by other batches rather than its own noise)."""
    trainer = Trainer(
        TrainConfig(
            model=f"hf:{model}",
            env_id=env_id,
            out=str(args.out / "gradients"),
            dynamics="real",
            roles=["act"],
            reward=args.reward,
            group_size=args.group_size,
            tasks_per_step=tasks,
            minibatch=tasks * args.group_size,
            steps=1,
            lr=1e-30,
            temperature=args.temperature,
            max_new_tokens=args.new_tokens,
            max_turns=args.max_turns,
            eval_every=0,
            save_every=0,
            tensorboard=False,
            seed=0,
        )
    )  # lr ~0: update() leaves the weights as they are
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    env = gym.make(env_id, split="train", dynamics="real", max_turns=args.max_turns)
    ids = env.unwrapped.task_ids[: tasks * batches]
    sets = [ids[k * tasks : (k + 1) * tasks] for k in range(batches)]

    def grpo(task_set: list[str], seed: int) -> torch.Tensor:
        trainer.update(collect(trainer.agent, trainer.envs, task_set, args.group_size, seed=seed))
        return torch.cat([p.grad.flatten() for p in params]).clone()

    def sft(task_set: list[str]) -> torch.Tensor:
        records = run_episodes(env, agents.load("oracle", env=env), task_set)
        nll, count = role_nll(
            trainer.model, [episode_tokens(trainer.tokenizer, r) for r in records], trainer.tokenizer.pad_token_id
        )["act"]
        trainer.model.zero_grad()
        (nll / count).backward()
        return torch.cat([p.grad.flatten() for p in params]).clone()

    def cos(a: torch.Tensor, b: torch.Tensor) -> float:
        return torch.nn.functional.cosine_similarity(a, b, dim=0).item()

    g_sft = [sft(t) for t in sets]
    g_rl = [(grpo(t, 2 * k), grpo(t, 2 * k + 1)) for k, t in enumerate(sets)]
    pairs = [(i, j) for i in range(batches) for j in range(i + 1, batches)]
    return {
        "model": str(model),
        "tasks_per_set": tasks,
        "episodes_per_grpo_gradient": tasks * args.group_size,
        "grpo_vs_sft_same_tasks": statistics.fmean(cos(a, g) for (a, _), g in zip(g_rl, g_sft)),
        "grpo_vs_grpo_same_tasks": statistics.fmean(cos(a, b) for a, b in g_rl),
        "grpo_across_task_sets": statistics.fmean(cos(g_rl[i][0], g_rl[j][0]) for i, j in pairs),
        "sft_across_task_sets": statistics.fmean(cos(g_sft[i], g_sft[j]) for i, j in pairs),
    }


def mean_se(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "se": None}
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return {"mean": statistics.fmean(values), "se": se}


def summarize(runs: list[dict]) -> dict:
    """Each phase's and condition's final metrics: mean and standard error over seeds, per-seed values,
    and for each condition its gain over the warm start in each seed."""
    table = {}
    for phase in PHASES:
        have = [r for r in runs if phase in r]
        if have:
            table[phase] = {
                m: {**mean_se([r[phase].get(m) for r in have]), "by_seed": [r[phase].get(m) for r in have]}
                for m in METRICS
            }
    for phase in ("warm_step", "plateau_step"):
        table[phase] = [r.get(phase) for r in runs]
    for name in CONDITIONS:
        have = [r for r in runs if len(r.get(name, [])) > 1]
        if not have:
            continue
        last = [r[name][-1] for r in have]
        row = {m: {**mean_se([p.get(m) for p in last]), "by_seed": [p.get(m) for p in last]} for m in METRICS}
        row["steps"] = [p["step"] for p in last]
        row["real_calls"] = [p["real_calls"] for p in last]
        for m in ("reward", "sampled_reward", "gold_share", "leaf_match"):
            gains = [
                p[m] - r["warm"][m] if p.get(m) is not None and r["warm"].get(m) is not None else None
                for p, r in zip(last, have)
            ]
            row[f"{m}_gain"] = {**mean_se(gains), "by_seed": gains}
        table[name] = row
    return table


def plot(runs: list[dict], out: Path, env_id: str) -> None:
    """``results.png``: reward, gold share and leaf_match of each condition against GRPO steps (mean
    over seeds, band: min to max) and reward against real calls; ``sft_curve.png``: the SFT curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("reward", "step"), ("gold_share", "step"), ("leaf_match", "step"), ("reward", "real_calls")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (metric, x) in zip(axes, panels):
        for name in CONDITIONS:
            curves = [[p for p in r[name] if p.get(metric) is not None] for r in runs if len(r.get(name, [])) > 1]
            n = min((len(c) for c in curves), default=0)
            if n == 0:
                continue
            xs = np.array([[p[x] for p in c[:n]] for c in curves]).mean(0)
            ys = np.array([[p[metric] for p in c[:n]] for c in curves])
            ax.plot(xs, ys.mean(0), marker="o", ms=3, label=name)
            ax.fill_between(xs, ys.min(0), ys.max(0), alpha=0.2)
        for phase, style in (("warm", ":"), ("plateau", "--")):
            values = [r[phase][metric] for r in runs if phase in r and r[phase].get(metric) is not None]
            if values:
                ax.axhline(statistics.fmean(values), color="gray", ls=style, lw=1)
        ax.set_title(f"test {metric}")
        ax.set_xlabel("GRPO step" if x == "step" else "real tool calls consumed in training")
        ax.set_ylim(-0.05, 1.05)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{env_id}, all test tasks, {len(runs)} seed(s); dotted: warm start, dashed: SFT to plateau")
    fig.tight_layout()
    fig.savefig(out / "results.png", dpi=100)
    plt.close(fig)

    sft_metrics = ("reward", "gold_share", "valid_calls", "leaf_match")
    fig, axes = plt.subplots(1, len(sft_metrics), figsize=(4 * len(sft_metrics), 3.4))
    for ax, metric in zip(axes, sft_metrics):
        for r in runs:
            points = [p for p in r.get("sft_curve", []) if p.get(metric) is not None]
            ax.plot(
                [p["step"] for p in points], [p[metric] for p in points], marker="o", ms=3, label=f"seed {r['seed']}"
            )
        ax.set_title(f"validation {metric}")
        ax.set_xlabel("SFT step")
        ax.set_ylim(-0.05, 1.05)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "sft_curve.png", dpi=100)
    plt.close(fig)


def markdown(summary: dict) -> str:
    """The summary as a Markdown table: mean ± standard error over seeds, and each seed's value."""

    def cell(entry: dict) -> str:
        if entry["mean"] is None:
            return "-"
        se = f" ± {entry['se']:.2f}" if entry.get("se") is not None else ""
        seeds = ", ".join("-" if v is None else f"{v:.2f}" for v in entry["by_seed"])
        return f"{entry['mean']:.2f}{se} ({seeds})"

    names = {
        "before": "before training",
        "warm": "warm start (SFT)",
        "plateau": "SFT to plateau",
        "real": "GRPO, real",
        "envace": "GRPO, envace",
        "act-only": "GRPO, act-only",
        "mixed": "GRPO, mixed",
        "mixed-wm": "GRPO, mixed + world-model loss",
        "adaptive": "GRPO, adaptive",
        "adaptive-wm": "GRPO, adaptive + gated world-model loss",
    }
    lines = [
        "| row | test reward (tau2) | gold share | rehearsal leaf_match | reward gain over warm | real calls in GRPO |",
        "|---|---|---|---|---|---|",
    ]
    for key, name in names.items():
        if key not in summary:
            continue
        row = summary[key]
        gain = cell(row["reward_gain"]) if "reward_gain" in row else ""
        calls = ", ".join(str(c) for c in row["real_calls"]) if "real_calls" in row else ""
        lines.append(
            f"| {name} | {cell(row['reward'])} | {cell(row['gold_share'])} | {cell(row['leaf_match'])} | "
            f"{gain} | {calls} |"
        )
    return "\n".join(lines) + "\n"


def write_summary(args) -> dict:
    runs = [json.loads(p.read_text()) for p in sorted(args.out.glob("seed*/results.json"))]
    summary = summarize(runs)
    (args.out / "results.md").write_text(markdown(summary))
    (args.out / "results.json").write_text(
        json.dumps(
            {
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "summary": summary,
                "runs": runs,
            },
            indent=1,
        )
    )
    plot(runs, args.out, args.env)
    return summary


def report(path: Path, found) -> None:
    """A diagnostic's results, written to ``path`` and printed."""
    path.write_text(json.dumps(found, indent=1))
    print(json.dumps(found, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="EnvACE/tau2-mock-office-v0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/rehearsal_study"))
    parser.add_argument("--summarize", action="store_true", help="only redraw results from the seed files")
    parser.add_argument(
        "--dry-run", action="store_true", help="train nothing: check the settings and write them to OUT/settings.json"
    )
    parser.add_argument("--diagnose", type=Path, nargs="+", help="saved models: count why each fails the test tasks")
    parser.add_argument(
        "--explore",
        type=Path,
        nargs="+",
        help="saved models: how often sampling solves train tasks that greedy decoding fails",
    )
    parser.add_argument(
        "--gradients",
        type=Path,
        nargs="+",
        help="saved models: cosines between GRPO and SFT gradients, and across batches",
    )
    parser.add_argument("--hidden", type=int, default=256, help="tiny model width")
    parser.add_argument("--layers", type=int, default=4, help="tiny model depth")
    parser.add_argument("--sft-episodes", type=int, default=3000)
    parser.add_argument("--sft-steps", type=int, default=2500, help="most SFT steps")
    parser.add_argument("--sft-batch", type=int, default=8)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-eval-every", type=int, default=250)
    parser.add_argument("--val-fidelity", type=int, default=50, help="validation tasks whose calls are rehearsed")
    parser.add_argument("--before-tasks", type=int, default=20, help="test tasks the untrained model plays")
    parser.add_argument(
        "--val-split",
        default="validation",
        help="the split the SFT curve is scored on (mock-gen has none: give test with --warm-step, so it "
        "selects nothing)",
    )
    parser.add_argument("--warm-target", type=float, default=0.3)
    parser.add_argument(
        "--warm-step",
        type=int,
        help="a fixed SFT budget for the warm start (a multiple of --sft-eval-every) instead of --warm-target",
    )
    parser.add_argument("--patience", type=int, default=3, help="SFT scores without a gain before the plateau")
    parser.add_argument("--conditions", nargs="+", choices=list(CONDITIONS), default=list(CONDITIONS))
    parser.add_argument(
        "--reward",
        default="progress",
        help="a reward name: progress, strict_progress (extra calls count against the share), ...",
    )
    parser.add_argument(
        "--charge-rejected",
        action="store_true",
        help="strict_progress, with a call the env rejected also counted as an extra call",
    )
    parser.add_argument(
        "--success-bonus",
        action="store_true",
        help="strict_progress averaged with 1 if it is 1 (a whole success), else 0",
    )
    parser.add_argument("--scale-advantages", action="store_true", help="divide advantages by the group's std")
    parser.add_argument("--warm-from", type=Path, help="an earlier study's folder: reuse its SFT phase per seed")
    parser.add_argument("--keep-models", action="store_true", help="save each condition's final model")
    parser.add_argument("--steps", type=int, default=300, help="GRPO steps per condition")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--minibatch", type=int, default=4, help="episodes per optimizer step")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--warmup-steps", type=int, default=0, help="GRPO steps of linear lr warmup")
    parser.add_argument("--clip-eps", type=float, default=0.2)
    parser.add_argument("--kl-coef", type=float, default=0.0)
    parser.add_argument("--world-model-coef", type=float, default=1.0, help="the mixed-wm condition's coefficient")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--fidelity-every", type=int, default=150)
    parser.add_argument(
        "--sampled-eval",
        action="store_true",
        help="also score the sampling policy (--temperature, one episode per task): sampled_reward",
    )
    parser.add_argument("--eval-tasks", type=int, help="score on the first N tasks of a split (default: all)")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.summarize:
        print(json.dumps(write_summary(args), indent=1))
        return
    if args.dry_run:  # a sweep's command lines, checked without its hours
        missing = [s for s in args.seeds if args.warm_from and not (args.warm_from / f"seed{s}" / "warm").is_dir()]
        if missing:
            parser.error(f"--warm-from {args.warm_from} has no warm start for seeds {missing}")
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        (args.out / "settings.json").write_text(json.dumps(settings, indent=1))
        print(json.dumps(settings, indent=1))
        return
    if args.explore:
        torch.set_num_threads(int(os.environ.get("STUDY_THREADS", "1")))
        report(
            args.out / "exploration.json",
            {str(path): exploration(args.env, path, "train", args) for path in args.explore},
        )
        return
    if args.gradients:
        torch.set_num_threads(int(os.environ.get("STUDY_THREADS", "1")))
        report(args.out / "gradients.json", [gradient_agreement(args.env, path, args) for path in args.gradients])
        return
    if args.diagnose:
        report(
            args.out / "failure_modes.json",
            {str(path): failure_modes(args.env, path, "test", args) for path in args.diagnose},
        )
        return
    if len(args.seeds) == 1:
        torch.set_num_threads(int(os.environ.get("STUDY_THREADS", "1")))
        Study(args.seeds[0], args).run()
        write_summary(args)
        return
    base = [a for a in sys.argv[1:]]
    at = base.index("--seeds") if "--seeds" in base else None
    if at is not None:  # drop the seed list: each child gets one
        end = at + 1
        while end < len(base) and not base[end].startswith("--"):
            end += 1
        del base[at:end]
    children = [
        subprocess.Popen(
            [sys.executable, __file__, *base, "--seeds", str(seed)],
            stdout=(args.out / f"seed{seed}.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        for seed in args.seeds
    ]
    codes = [child.wait() for child in children]
    summary = write_summary(args)
    print(json.dumps(summary, indent=1))
    print(
        f"results in {args.out / 'results.json'}, {args.out / 'results.png'}, {args.out / 'sft_curve.png'}"
        f"; child exit codes {codes}"
    )


if __name__ == "__main__":
    main()
