"""The settings of ``train`` (GRPO) and ``sft``: each field's default and help are also its
command-line option's (:mod:`envace_gym.cli.options`). Imports without torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from envace_gym.config_fields import COUNT, NONNEGATIVE, POSITIVE, SEED, check_settings, setting
from envace_gym.dynamics import get as get_dynamics
from envace_gym.env_settings import EnvSettings, shared
from envace_gym.spaces import TURN_ROLES
from envace_gym.specs import parse_agent

ROLES_HELP = "Roles trained: act,rehearse | act | rehearse."
OUT_HELP = "Output folder: metrics.jsonl, metrics.png, step-N checkpoints."
ENV_KWARGS_HELP = "KEY=VALUE: more gym.make arguments (repeat; values are JSON where they parse)."
RESUMES = " May change on --resume."  # the help of a setting in RESUMABLE


@dataclass
class TrainConfig:
    """Everything a GRPO run depends on; saved as ``config.json`` in the output folder."""

    model: str = setting(
        help="hf:PATH or smollm2 (transformers), vllm:PATH (an engine in this process) or "
        "vllm:PATH@BASE_URL (a `vllm serve` started with VLLM_SERVER_DEV_MODE=1)."
    )
    env_id: str = shared("env_id", required=True)
    out: str = setting("runs/train", OUT_HELP)
    dynamics: str = shared("dynamics", "rehearsed")
    p_real: float | None = shared("p_real")
    simulator: str | None = shared("simulator")
    eval_dynamics: str = setting("real", "Evaluation dynamics.")
    reward: str | Callable | None = setting(
        None,
        "Training reward (default: strict_progress, a partial credit "
        "that varies within a group, where every training task has gold "
        "calls; else the dynamics' default).",
    )
    stop_after_flat_steps: int = setting(
        5,
        "Stop after this many steps in a row whose groups all scored alike "
        "(zero advantages: nothing to learn; 0: never)." + RESUMES,
    )
    split: str | None = setting("train", "Training tasks' split; 'all' for suites without splits (BFCL).")
    task_ids: list[str] | None = shared("task_ids")
    eval_split: str | None = setting("test", "Evaluation tasks' split, or 'all'.")
    user: str = shared("user")
    judge: str | None = shared("judge")
    group_size: int = setting(4, "Episodes per task (GRPO group).")
    tasks_per_step: int = setting(2, "Tasks per step.")
    steps: int = setting(10, "Training steps." + RESUMES)
    lr: float = setting(1e-5, "Learning rate.")
    warmup_steps: int = setting(0, "Steps of linear learning-rate warmup (from 0, before the linear decay).")
    epochs: int = setting(1, "Passes over each step's rollouts.")
    minibatch: int = setting(4, "Rows per minibatch (without --minibatch-tokens).")
    clip_eps: float = setting(0.2, "PPO clip range of the ratio.")
    kl_coef: float = setting(0.0, "KL penalty to the initial model.")
    world_model_coef: float = setting(
        0.0,
        "Add this times the cross-entropy of the real tool responses, written as rehearsals "
        "(the world-model loss), where the dynamics run real calls (real, shadow, mixed, adaptive).",
    )
    world_model_gate: bool = setting(
        False,
        "Under adaptive dynamics: leave out of the world-model loss the real responses of tools the router "
        "already trusts (their rehearsal proved faithful); the unfaithful and uncertain ones are trained.",
    )
    real_call_budget: int | None = setting(
        None, "Under adaptive dynamics: at most this many real calls per step (default: no cap)."
    )
    roles: list[str] = setting(list(TURN_ROLES), ROLES_HELP)
    baseline: str = setting("episode", "episode or row.")
    scale_advantages: bool = setting(False, "Divide the advantages by their group's standard deviation.")
    max_new_tokens: int = setting(64, "Tokens per generation.")
    temperature: float = setting(1.0, "Sampling temperature (the ratios' too).")
    max_turns: int = setting(8, "Agent turns per episode.")
    rehearsal_format: str = setting(
        "inline", "inline (one row per episode) or prompted (a row per rehearse generation)."
    )
    eval_every: int = setting(5, "Evaluate every N steps (0: never)." + RESUMES)
    eval_tasks: int = setting(4, "Held-out tasks per evaluation.")
    save_every: int = setting(5, "Checkpoint every N steps (0: only at the end)." + RESUMES)
    seed: int = setting(0, "Seed.")
    tensorboard: bool = setting(True, "Also log the metrics as TensorBoard scalars in OUT/tensorboard." + RESUMES)
    lora_rank: int = setting(0, "Train LoRA adapters of this rank on every linear layer (0: all weights).")
    bf16: bool = setting(False, "Forward passes under bf16 autocast (fp32 weights and optimizer).")
    gradient_checkpointing: bool = setting(False, "Recompute activations in backward." + RESUMES)
    minibatch_tokens: int = setting(
        0, "Pack minibatches up to this many padded tokens (0: minibatches of --minibatch rows)."
    )
    fsdp: bool = setting(
        False,
        "Shard weights, gradients and Adam states over the launched processes (torch FSDP2) instead of DDP." + RESUMES,
    )
    engine_kwargs: dict = setting(
        {}, "KEY=VALUE for a vllm:PATH model's engine (vllm.LLM's arguments; repeat)." + RESUMES
    )
    env_kwargs: dict = setting({}, ENV_KWARGS_HELP)
    rollout_workers: int = setting(
        0,
        "Step the rollout envs in this many Ray actors (users, judges, slow tools "
        "in parallel); generation stays here (0: in this process)." + RESUMES,
    )
    ray_address: str | None = setting(
        None, "With --rollout-workers: a Ray cluster to join (auto, ray://HOST:PORT); default: a local Ray." + RESUMES
    )

    #: The settings that may differ from the checkpoint's on ``--resume`` (the rest must be the same).
    RESUMABLE: ClassVar[tuple[str, ...]] = (
        "out",
        "steps",
        "eval_every",
        "save_every",
        "stop_after_flat_steps",
        "tensorboard",
        "gradient_checkpointing",
        "fsdp",
        "engine_kwargs",
        "rollout_workers",
        "ray_address",
    )

    def __post_init__(self):
        check_settings(
            self,
            {
                COUNT: (
                    "steps",
                    "group_size",
                    "tasks_per_step",
                    "epochs",
                    "minibatch",
                    "eval_tasks",
                    "max_turns",
                    "max_new_tokens",
                ),
                NONNEGATIVE: (
                    "warmup_steps",
                    "eval_every",
                    "save_every",
                    "stop_after_flat_steps",
                    "lora_rank",
                    "minibatch_tokens",
                    "rollout_workers",
                    "kl_coef",
                    "world_model_coef",
                    "real_call_budget",
                ),
                POSITIVE: ("lr", "clip_eps", "temperature"),
                SEED: ("seed",),
            },
        )
        for held_out in (False, True):  # the env's settings, checked as run checks them
            self.env_settings(held_out)
        dynamics = get_dynamics(self.dynamics)
        if self.world_model_coef and not dynamics.asks_world:
            raise ValueError(
                f"world_model_coef learns from real tool responses: dynamics {self.dynamics!r} runs no real call "
                "(real, shadow, mixed or adaptive do)"
            )
        if (self.world_model_gate or self.real_call_budget is not None) and not dynamics.routes:
            raise ValueError(
                "world_model_gate and real_call_budget route by the adaptive router: use dynamics adaptive"
            )
        if self.world_model_gate and not self.world_model_coef:
            raise ValueError("world_model_gate gates the world-model loss: give world_model_coef too")
        if self.world_model_coef and self.rehearsal_format != "inline":
            raise ValueError(
                "world_model_coef writes real responses where inline rehearsals go: use rehearsal_format inline"
            )
        if self.fsdp and self.lora_rank:
            raise ValueError("fsdp with lora_rank is not supported: LoRA trains few weights; drop fsdp")

    def env_settings(self, held_out: bool = False) -> EnvSettings:
        """The env of the training episodes, as ``run`` would play it (``held_out``: the evaluation's, its
        split and dynamics, each episode its own reward); ``env_kwargs`` go to ``gym.make`` besides."""
        dynamics = get_dynamics(self.eval_dynamics if held_out else self.dynamics)
        split = self.eval_split if held_out else self.split
        return EnvSettings(
            self.env_id,
            split="all" if split is None else split,
            task_ids=None if held_out else self.task_ids or self.env_kwargs.get("task_ids"),
            dynamics=dynamics.name,
            user=self.user,
            judge=self.judge,
            reward=None if held_out else self.reward,
            max_turns=self.max_turns,
            # the training dynamics' parameters, checked as run checks them; the held-out env takes those it uses
            **{k: getattr(self, k) for k in ("p_real", "simulator") if not held_out or k in dynamics.parameters},
        )


@dataclass
class SFTConfig:
    """An SFT run; saved as ``config.json`` in the output folder."""

    model: str = setting(help="hf:PATH or smollm2: the model to warm-start.")
    env_id: str = shared("env_id", required=True)
    out: str = setting("runs/sft", OUT_HELP)
    source: str = setting(
        "gold", "gold (the oracle's episodes of --split, real dynamics) or a RUNS.jsonl written by `envace-gym run`."
    )
    split: str | None = setting("train", "Gold episodes' split, or 'all'.")
    eval_split: str | None = setting("test", "Held-out gold episodes' split, or 'all'.")
    roles: list[str] = setting(list(TURN_ROLES), ROLES_HELP)
    epochs: int = setting(1, "Passes over the episodes (when --steps is not given)." + RESUMES)
    steps: int | None = setting(None, "Updates (default: epochs × episodes / batch)." + RESUMES)
    batch: int = setting(8, "Episodes per update.")
    minibatch: int = setting(2, "Episodes per forward pass (gradients accumulate over the batch).")
    lr: float = setting(1e-5, "Learning rate (decays linearly to 0).")
    max_episodes: int | None = setting(None, "Train on the first N episodes only.")
    max_tokens: int = setting(4096, "An episode's token sequence is cut here.")
    eval_every: int = setting(0, "Held-out loss every N steps (0: never)." + RESUMES)
    eval_tasks: int = setting(4, "Held-out episodes.")
    save_every: int = setting(50, "Checkpoint every N steps (0: only at the end)." + RESUMES)
    seed: int = setting(0, "Seed.")
    tensorboard: bool = setting(True, "Also log the metrics as TensorBoard scalars in OUT/tensorboard." + RESUMES)
    lora_rank: int = setting(0, "Train LoRA adapters of this rank on every linear layer (0: all weights).")
    gradient_checkpointing: bool = setting(False, "Recompute activations in backward." + RESUMES)
    env_kwargs: dict = setting({}, ENV_KWARGS_HELP)

    RESUMABLE: ClassVar[tuple[str, ...]] = (
        "out",
        "epochs",
        "steps",
        "eval_every",
        "save_every",
        "tensorboard",
        "gradient_checkpointing",
    )

    def __post_init__(self):
        if not parse_agent(self.model).transformers:
            raise ValueError(f"sft trains a transformers model (hf:PATH or smollm2), got {self.model!r}")
        if not set(self.roles) <= set(TURN_ROLES) or not self.roles:
            raise ValueError(f"roles must be among {TURN_ROLES}, got {self.roles}")
        check_settings(
            self,
            {
                COUNT: ("batch", "minibatch", "epochs", "eval_tasks", "max_tokens", "steps", "max_episodes"),
                NONNEGATIVE: ("eval_every", "save_every", "lora_rank"),
                POSITIVE: ("lr",),
                SEED: ("seed",),
            },
        )
