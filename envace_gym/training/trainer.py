"""The training loop: role-wise GRPO against rehearsed dynamics, evaluation against the real env."""

from __future__ import annotations

import statistics
import time
import warnings
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, cast

import gymnasium as gym
import numpy as np
import torch

from envace_gym import registration
from envace_gym.config_fields import NONNEGATIVE, check_number
from envace_gym.spaces import TURN_ROLES
from envace_gym.specs import parse_agent
from envace_gym.training import held_out
from envace_gym.training.config import TrainConfig
from envace_gym.training.grpo import ROLE_IDS, grpo_loss, token_advantages, token_logprobs
from envace_gym.training.loop import TrainingLoop
from envace_gym.training.policy import Policy
from envace_gym.training.rollout import Rollout, collect
from envace_gym.wrappers import unwrap

if TYPE_CHECKING:
    from envace_gym.agents.vllm import VLLMAgent, VLLMServerAgent
    from envace_gym.play.distributed import EnvPool


class Trainer(TrainingLoop):
    """Role-wise GRPO on one model that plays both roles (torch updates).

    Generation goes through ``hf`` (the trained model itself) or vLLM, which gets the
    trained weights after every update: for ``vllm:PATH`` an engine in this process, for
    ``vllm:PATH@BASE_URL`` a running ``vllm serve PATH`` (started with
    ``VLLM_SERVER_DEV_MODE=1``) that reloads them from ``OUT/engine-weights``.

    Under ``accelerate launch`` (DDP; on CPU, ``--multi_gpu`` with gloo) each process
    plays the groups of its share of the step's tasks, all rollouts are gathered, and
    every minibatch is split across the processes row by row with each role's loss
    normalised by the whole minibatch's token count, so the update is the one a single
    process makes on the same global batch.

    With ``fsdp`` (under ``accelerate launch``) the model is sharded in place by torch's
    ``fully_shard`` instead of being wrapped in DDP: one unit per transformer block, the
    embeddings, final norm and head in the root. The update is the same; checkpoints and
    weight pushes gather the full state dict first, so every process takes part in them.
    With ``hf`` generation every process gathers the whole weights before it plays its
    episodes (its forwards then need no other process) and drops them after.
    """

    def __init__(self, config: TrainConfig):
        self.cfg, self.out = config, Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        model = parse_agent(config.model)
        # vllm:PATH@BASE_URL: a server that reloads the weights from OUT/engine-weights; vllm:PATH: an engine here
        engine = (
            {"weights_dir": self.out / "engine-weights"}
            if model.base_url is not None
            else {"in_process": True, **config.engine_kwargs}
        )
        self.policy = Policy(
            model,
            seed=config.seed,
            lr=config.lr,
            steps=config.steps,
            warmup_steps=config.warmup_steps,
            lora_rank=config.lora_rank,
            gradient_checkpointing=config.gradient_checkpointing,
            fsdp=config.fsdp,
            reference=bool(config.kl_coef),
            engine_kwargs=engine,
            max_new_tokens=config.max_new_tokens,
            temperature=config.temperature,
        )
        # gets the weights of every update: a vllm: model's agent
        self.engine = None if self.policy.generates else cast("VLLMAgent | VLLMServerAgent", self.policy.agent)
        # the env's settings, decided once: gym.make's keywords, the reward, the router (adaptive dynamics)
        resolved = config.env_settings().resolve(purpose="train", budget=config.real_call_budget)
        self.reward, self.router = resolved.reward, resolved.router
        make = {**resolved.make_kwargs, "rehearsal_format": config.rehearsal_format, **config.env_kwargs}
        n_envs = len(self._my_tasks(range(config.tasks_per_step))) * config.group_size
        if config.rollout_workers:  # the envs in Ray actors, stepped there in parallel
            from envace_gym.play.distributed import EnvPool

            # each worker's envs keep a router of their own: this process's, whose budget is refilled each
            # step, would reach them as copies that are never refilled
            pooled = {k: v for k, v in make.items() if k != "router"}
            self.envs: list[gym.Env] | EnvPool = EnvPool(
                resolved.env_id, n_envs, config.rollout_workers, pooled, config.ray_address
            )
            self.task_ids = make.get("task_ids") or registration.suite(resolved.env_id, config.split).task_ids
        else:
            self.envs = envs = [gym.make(resolved.env_id, **make) for _ in range(n_envs)]
            self.task_ids = unwrap(envs[0]).task_ids
        self.order = list(np.random.default_rng(config.seed).permutation(len(self.task_ids)))
        self.step, self.cursor, self.flat_steps, self.real_calls = 0, 0, 0, 0
        self.play_settings = {
            "env_id": config.env_id,
            "max_turns": config.max_turns,
            "max_new_tokens": config.max_new_tokens,
        }

    @cached_property
    def eval_env(self) -> gym.Env:
        """The held-out env, made at the first evaluation (none with ``eval_every=0``)."""
        resolved = self.cfg.env_settings(held_out=True).resolve(per_episode=True)
        return gym.make(resolved.env_id, **resolved.make_kwargs, **self.cfg.env_kwargs)

    optimizer = property(lambda self: self.policy.optimizer)
    scheduler = property(lambda self: self.policy.scheduler)
    sharded = property(lambda self: self.policy.sharded)
    rank = property(lambda self: self.policy.rank)
    world = property(lambda self: self.policy.world)

    def _full_weights(self, on_every_process: bool = False) -> dict[str, torch.Tensor]:
        """The whole weights, as the engine gets them (:meth:`Policy.full_weights`)."""
        return self.policy.full_weights(on_every_process)

    def _my_tasks(self, tasks):
        return list(tasks)[self.rank :: self.world]

    def _logprobs(self, model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Token log-probs on the training device (bf16 autocast when configured), back on the CPU."""
        device = self.accelerator.device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16):
            out = token_logprobs(model, ids.to(device), mask.to(device), self.cfg.temperature)
        return out.float().cpu()

    def resume(self) -> None:
        """Continue from the latest checkpoint in ``out``
        (:meth:`~envace_gym.training.loop.TrainingLoop.resume`), then give the engine the resumed
        weights; every process calls this."""
        super().resume()
        self._sync_engine()

    def checkpoint_state(self) -> dict:
        return {"real_calls": self.real_calls, "router": self.router.state_dict() if self.router else None}

    def restore(self, state: dict) -> None:
        if self.router and state.get("router"):  # the main process's estimates (docs: adaptive)
            self.router.load_state_dict(state["router"])
        real_calls = state.get("real_calls") or 0
        check_number("checkpoint state: real_calls", real_calls, NONNEGATIVE, whole=True)
        self.real_calls = int(real_calls)

    def train_step(self) -> dict:
        start = time.perf_counter()
        tasks = [self.task_ids[self.order[(self.cursor + i) % len(self.order)]] for i in range(self.cfg.tasks_per_step)]
        self.cursor += self.cfg.tasks_per_step
        self.model.eval()
        mine = self._my_tasks(range(len(tasks)))
        if self.router:
            self.router.refill()  # --real-call-budget is per step
        with self.policy.unsharded():
            rollouts = collect(
                self.agent,
                self.envs,
                [tasks[i] for i in mine],
                self.cfg.group_size,
                seed=self.cfg.seed + 1000 * self.step + 100 * self.rank,
                world_targets=bool(self.cfg.world_model_coef),
                skip_world=self.router.faithful if self.router and self.cfg.world_model_gate else None,
            )
        for r in rollouts:  # the task's index in the step and a batch-wide episode id, as on one process
            r.episode = mine[r.group] * self.cfg.group_size + r.episode % self.cfg.group_size
            r.group = mine[r.group]
        if self.world > 1:
            from accelerate.utils import gather_object

            rollouts = sorted(gather_object(rollouts), key=lambda r: r.group)
        sampled = time.perf_counter()
        # an episode whose reward failed (a judge's server, say) is not learnt from, nor in any baseline
        errors = {r.episode: r.info["error"] for r in rollouts if r.info.get("error")}
        kept = [r for r in rollouts if r.episode not in errors]
        if kept:
            stats = self.update(kept)
        else:  # nothing to learn from; the schedule still counts the step
            stats = {"lr": self.scheduler.get_last_lr()[0]}
            self.scheduler.step()
        self.step += 1
        tokens = sum(len(r.ids) for r in rollouts)
        ended = {r.episode: r.info for r in rollouts if "real_calls" in r.info}  # one per episode
        real_calls = sum(info["real_calls"] for info in ended.values())
        self.real_calls += real_calls
        episodes: dict[int, dict] = {}  # rows summed into their episodes (prompted rows share one)
        for r in kept:
            e = episodes.setdefault(r.episode, {"reward": r.reward, "act": 0, "rehearse": 0})
            for role in TURN_ROLES:
                e[role] += r.generations[role]
        record = {
            "step": self.step,
            "tasks": tasks,
            "reward": statistics.fmean(e["reward"] for e in episodes.values()) if episodes else None,
            "reward_errors": len(errors),
            "reward_error": next(iter(errors.values()), None),
            "rows": len(rollouts),
            "tokens": tokens,
            "tokens_per_s": tokens / (time.perf_counter() - start),
            "real_calls": real_calls,
            "real_calls/total": self.real_calls,
            "world/trained": sum(info["world"]["trained"] for info in ended.values()),
            "world/skipped_faithful": sum(info["world"]["skipped_faithful"] for info in ended.values()),
            "rollout_s": sampled - start,
            "update_s": time.perf_counter() - sampled,
            **stats,
        }
        for role in TURN_ROLES:
            having = [e["reward"] for e in episodes.values() if e[role]]
            record[f"reward/{role}"] = statistics.fmean(having) if having else None
        self._check_spread(record, episodes)
        return record

    def _check_spread(self, record: dict, episodes: dict[int, dict]) -> None:
        """Add the step's reward spread and its groups of equal rewards to ``record``; warn when every group
        scored alike (every advantage is 0), and stop after ``stop_after_flat_steps`` such steps in a row."""
        groups: dict[int, list[float]] = {}
        for episode, e in episodes.items():
            groups.setdefault(episode // self.cfg.group_size, []).append(e["reward"])
        rewards = [e["reward"] for e in episodes.values()]
        record["reward_std"] = statistics.pstdev(rewards) if rewards else None
        record["flat_groups"] = sum(max(g) == min(g) for g in groups.values())
        flat = bool(groups) and record["flat_groups"] == len(groups)
        self.flat_steps = self.flat_steps + 1 if flat else 0
        if not flat:
            return
        why = (
            f"step {self.step}: every group's episodes scored alike (reward {rewards[0]:.3f} each)"
            if len(set(rewards)) == 1
            else f"step {self.step}: within each group the episodes scored alike"
        )
        partial = (
            ""
            if self.reward in ("strict_progress", "progress")
            else "a reward with partial credit (--reward strict_progress or progress), "
        )
        advice = (
            f"so every advantage is 0 and nothing is learnt; {partial}a larger --group-size, a higher "
            "--temperature or a warm start (`envace-gym sft`) gives groups a spread"
        )
        if self.cfg.stop_after_flat_steps and self.flat_steps >= self.cfg.stop_after_flat_steps:
            raise TrainingStalled(
                f"{why}, {self.flat_steps} steps in a row, {advice} (--stop-after-flat-steps 0 trains on regardless)"
            )
        warnings.warn(f"{why}, {advice}", RuntimeWarning, stacklevel=2)

    def update(self, rollouts: list[Rollout]) -> dict:
        cfg = self.cfg
        width = max(len(r.ids) for r in rollouts)
        pad = self.tokenizer.pad_token_id

        def rows(values, fill, dtype):
            return torch.tensor([v + [fill] * (width - len(v)) for v in values], dtype=dtype)

        ids = rows([r.ids for r in rollouts], pad, torch.long)
        mask = rows([[1] * len(r.ids) for r in rollouts], 0, torch.long)
        roles = rows([r.roles for r in rollouts], ROLE_IDS["context"], torch.long)
        old = rows([r.logprobs for r in rollouts], 0.0, torch.float32)
        rewards = torch.tensor([r.reward for r in rollouts])
        groups = torch.tensor([r.group for r in rollouts])
        episodes = torch.tensor([r.episode for r in rollouts])
        gens = {role: torch.tensor([r.generations[role] for r in rollouts]) for role in TURN_ROLES}
        advantages = token_advantages(rewards, groups, roles, gens, cfg.baseline, cfg.scale_advantages, episodes)
        weights = {role: 1.0 if role in cfg.roles else 0.0 for role in TURN_ROLES}
        weights["world"] = cfg.world_model_coef
        ref = None
        if self.policy.reference is not None:
            with torch.no_grad():
                ref = self._logprobs(self.policy.reference, ids, mask)
        self.policy.train_model.train()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        collected: dict[str, list[float]] = {}
        lengths = [len(r.ids) for r in rollouts]
        for _ in range(cfg.epochs):
            for rows_all in minibatches(lengths, cfg.minibatch, cfg.minibatch_tokens):
                counts = {role: int((roles[rows_all] == ROLE_IDS[role]).sum()) for role in ROLE_IDS}
                if not any(counts[role] and weights[role] for role in weights):
                    continue  # no tokens of a trained role in this minibatch (the same on every process)
                mb, share = rows_all[self.rank :: self.world], float(self.world)
                if not mb:  # fewer rows than processes: run one row at weight 0 so DDP stays in step
                    mb, share = rows_all[:1], 0.0
                w = max(lengths[i] for i in rows_all)  # this minibatch's own width
                logprobs = self._logprobs(self.policy.train_model, ids[mb, :w], mask[mb, :w])
                loss, stats = grpo_loss(
                    logprobs,
                    old[mb, :w],
                    advantages[mb, :w],
                    roles[mb, :w],
                    cfg.clip_eps,
                    None if ref is None else ref[mb, :w],
                    cfg.kl_coef,
                    weights,
                    counts,
                    cfg.world_model_coef,
                )
                stats["forward_tokens"] = len(mb) * w
                # DDP averages gradients over processes; each holds a share of the token sums
                loss = loss * share + 0.0 * logprobs.sum()
                self.optimizer.zero_grad()
                self.accelerator.backward(loss)
                self.accelerator.clip_grad_norm_(trainable, 1.0)
                self.optimizer.step()
                for k, v in stats.items():
                    collected.setdefault(k, []).append(v)
        out = {k: statistics.fmean(v) for k, v in collected.items()}
        if "forward_tokens" in collected:
            out["forward_tokens"] = max(collected["forward_tokens"])  # the largest forward of the step
        out["lr"] = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        self._sync_engine()
        for role in TURN_ROLES:
            chosen = advantages[roles == ROLE_IDS[role]]
            if chosen.numel():
                out[f"advantage_mean/{role}"] = chosen.mean().item()
                out[f"advantage_std/{role}"] = chosen.std(unbiased=False).item()
        return out

    def _sync_engine(self) -> None:
        """Push the trained weights to the vLLM engine (a served one: from the main process only)."""
        if self.engine is None:
            return
        served = hasattr(self.engine, "weights_dir")
        weights = self._full_weights(on_every_process=not served)
        if not served or self.accelerator.is_main_process:
            self.engine.load_weights(weights.items())
        if served:
            self.accelerator.wait_for_everyone()

    def evaluate(self) -> dict:
        """The held-out measures (:mod:`~envace_gym.training.held_out`) on ``eval_tasks`` tasks: reward,
        ``gold_share`` and ``valid_calls`` under ``eval_dynamics``, rehearsal fidelity (shadow)."""
        self.model.eval()
        ids = unwrap(self.eval_env).task_ids[: self.cfg.eval_tasks]
        measures = held_out.held_out(self.eval_env, self.agent, ids) | held_out.fidelity(self.eval_env, self.agent, ids)
        return {f"eval/{name}": value for name, value in measures.items()}


class TrainingStalled(ValueError):
    """Training stopped: its groups' rewards have not varied for ``stop_after_flat_steps`` steps."""


def minibatches(lengths: list[int], rows: int, tokens: int = 0) -> list[list[int]]:
    """Consecutive row indices per minibatch: ``rows`` at a time, or, with ``tokens`` > 0, as
    many as fit ``tokens`` once padded to the longest of them (a longer row goes alone)."""
    if not tokens:
        return [list(range(i, min(i + rows, len(lengths)))) for i in range(0, len(lengths), rows)]
    out: list[list[int]] = []
    for i, length in enumerate(lengths):
        if out and (len(out[-1]) + 1) * max(length, *(lengths[j] for j in out[-1])) <= tokens:
            out[-1].append(i)
        else:
            out.append([i])
    return out
