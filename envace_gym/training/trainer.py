"""The training loop: role-wise GRPO against rehearsed dynamics, evaluation against the real env."""

from __future__ import annotations

import copy
import json
import random
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from envace_gym import agents
from envace_gym.compare import compare_calls
from envace_gym.runner import run_episode
from envace_gym.training import checkpoint, sharding
from envace_gym.training.grpo import ROLE_IDS, ROLES, grpo_loss, token_advantages, token_logprobs
from envace_gym.training.rollout import Rollout, collect


@dataclass
class TrainConfig:
    """Everything a run depends on; saved as ``config.json`` in the output folder."""

    model: str
    env_id: str
    out: str
    dynamics: str = "rehearsed"
    eval_dynamics: str = "real"
    reward: str | Callable | None = None  # None: the env's default for ``dynamics`` (actions under rehearsal)
    split: str | None = "train"
    eval_split: str | None = "test"
    group_size: int = 4
    tasks_per_step: int = 2
    steps: int = 10
    lr: float = 1e-5
    warmup_steps: int = 0  # steps of linear learning-rate warmup from 0, before the linear decay
    epochs: int = 1
    minibatch: int = 4
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    roles: list[str] = field(default_factory=lambda: list(ROLES))
    baseline: str = "episode"
    scale_advantages: bool = False
    max_new_tokens: int = 64
    temperature: float = 1.0
    max_turns: int = 8
    rehearsal_format: str = "inline"  # or "prompted": every rehearse generation its own row
    eval_every: int = 5  # 0: never
    eval_tasks: int = 4
    save_every: int = 5  # 0: only at the end
    seed: int = 0
    tensorboard: bool = True  # also log the metrics as TensorBoard scalars in OUT/tensorboard
    lora_rank: int = 0  # > 0: train LoRA adapters of this rank (peft) on every linear layer instead
    bf16: bool = False  # forward passes under bf16 autocast; weights, gradients and optimizer stay fp32
    gradient_checkpointing: bool = False  # recompute each layer's activations in backward
    minibatch_tokens: int = 0  # > 0: minibatches packed up to this many (padded) tokens, not `minibatch` rows
    fsdp: bool = False  # under a process group: weights, gradients and Adam states sharded (torch FSDP2)
    engine_kwargs: dict = field(default_factory=dict)  # for vllm:PATH models: passed to vllm.LLM
    env_kwargs: dict = field(default_factory=dict)  # more gym.make arguments, e.g. user_kwargs
    rollout_workers: int = 0  # > 0: the rollout envs live in this many Ray actors (envace_gym.distributed.EnvPool)
    ray_address: str | None = None  # with rollout_workers: a Ray cluster to join (default: a local Ray)

    def __post_init__(self):
        for name in ("steps", "group_size", "tasks_per_step", "epochs", "minibatch", "eval_tasks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        for name in ("warmup_steps", "eval_every", "save_every", "lora_rank", "minibatch_tokens", "rollout_workers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)!r}")
        if self.fsdp and self.lora_rank:
            raise ValueError("fsdp with lora_rank is not supported: LoRA trains few weights; drop fsdp")


class Trainer:
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
        self._load_policy(config, max_new_tokens=config.max_new_tokens, temperature=config.temperature)
        self.reference = copy.deepcopy(self.model).eval() if config.kl_coef else None
        self._prepare_optimizer()
        make = dict(dynamics=config.dynamics, reward=config.reward, max_turns=config.max_turns,
                    rehearsal_format=config.rehearsal_format, **config.env_kwargs)
        n_envs = len(self._my_tasks(range(config.tasks_per_step))) * config.group_size
        if config.rollout_workers:  # the envs in Ray actors, stepped there in parallel
            from envace_gym.distributed import EnvPool

            self.envs = EnvPool(config.env_id, n_envs, config.rollout_workers, dict(split=config.split, **make),
                                config.ray_address)
            self.task_ids = gym.make(config.env_id, split=config.split, **make).unwrapped.task_ids
        else:
            self.envs = [gym.make(config.env_id, split=config.split, **make) for _ in range(n_envs)]
            self.task_ids = self.envs[0].unwrapped.task_ids
        self.order = list(np.random.default_rng(config.seed).permutation(len(self.task_ids)))
        self.eval_env = gym.make(config.env_id, split=config.eval_split, dynamics=config.eval_dynamics,
                                 max_turns=config.max_turns, **config.env_kwargs)
        self.step, self.cursor = 0, 0

    def _load_policy(self, config, **sampling) -> None:
        """Accelerate, the output folder, the seeds, and ``agent``, ``model`` (LoRA-wrapped when
        ``config.lora_rank``) and ``tokenizer``: what every loop here (GRPO, SFT) starts from."""
        from accelerate import Accelerator

        self.cfg = config
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available())
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        device = str(self.accelerator.device)
        sampling["seed"] = config.seed + self.rank
        self.engine = None
        if config.model.startswith("vllm:"):  # vLLM generates; a torch copy of the model trains
            if config.lora_rank:
                raise ValueError("lora_rank with a vllm: model is not supported; use hf:PATH")
            from transformers import AutoModelForCausalLM

            spec = config.model.removeprefix("vllm:")
            served = "@" in spec
            engine = ({"weights_dir": self.out / "engine-weights"} if served
                      else {"in_process": True, **config.engine_kwargs})
            self.agent = self.engine = agents.load(config.model, **sampling, **engine)
            model = AutoModelForCausalLM.from_pretrained(spec.rpartition("@")[0] if served else spec,
                                                         dtype=torch.float32).to(device)
        else:
            self.agent = agents.load(config.model, **sampling,
                                     **({"device": device} if config.model.startswith(("hf:", "smollm2")) else {}))
            model = self.agent.model
        if config.lora_rank:
            from peft import LoraConfig, get_peft_model

            model = self.agent.model = get_peft_model(model, LoraConfig(
                r=config.lora_rank, lora_alpha=2 * config.lora_rank, lora_dropout=0.0,
                target_modules="all-linear", task_type="CAUSAL_LM"))
        if config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model, self.tokenizer = model, self.agent.tokenizer

    def _logprobs(self, model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Token log-probs on the training device (bf16 autocast when configured), back on the CPU."""
        device = self.accelerator.device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16):
            out = token_logprobs(model, ids.to(device), mask.to(device), self.cfg.temperature)
        return out.float().cpu()

    def _prepare_optimizer(self) -> None:
        """AdamW on the trainable weights, through accelerate (the model in DDP, or sharded in
        place with ``fsdp``), and a linear decay over ``cfg.steps``."""
        from accelerate.utils import DistributedType

        if self.accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
            raise ValueError("launch with a multi-GPU (or multi-CPU) accelerate config and pass fsdp: "
                             "the trainer shards the model itself")
        # over the process group (one GPU under torchrun too); SFTConfig has no fsdp
        self.sharded = getattr(self.cfg, "fsdp", False) and torch.distributed.is_initialized()
        if self.sharded:
            sharding.shard(self.model)
            self.train_model = self.model
            if self.engine is None:  # hf generation runs on whole weights (_unsharded): no process waits
                self.agent.sampling["synced_gpus"] = False  # for another, as transformers would under FSDP
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=self.cfg.lr)
        if self.sharded:
            self.optimizer = self.accelerator.prepare(optimizer)
        else:
            self.train_model, self.optimizer = self.accelerator.prepare(self.model, optimizer)
        # over training steps (not optimizer steps: prompted rows vary in number)
        warmup, steps = getattr(self.cfg, "warmup_steps", 0), self.cfg.steps  # SFTConfig has none
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda k: min((k + 1) / warmup, 1.0) * max(0.0, 1.0 - k / steps) if warmup
            else max(0.0, 1.0 - k / steps))

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    def _my_tasks(self, tasks):
        return list(tasks)[self.rank::self.world]

    @contextmanager
    def _unsharded(self):
        """Under FSDP with the trained model generating (no vLLM engine): the whole weights on
        every process while the block runs (:func:`~envace_gym.training.sharding.unsharded`)."""
        if not self.sharded or self.engine is not None:
            yield
            return
        with sharding.unsharded(self.model):
            yield

    def _full_weights(self, on_every_process: bool = False) -> dict[str, torch.Tensor]:
        """The model's whole weights by checkpoint name (sharded: gathered; every process must call this)."""
        return sharding.full_weights(self.model, on_every_process) if self.sharded else self.model.state_dict()

    # the loop ---------------------------------------------------------------
    def train(self, on_step: Callable[[dict], None] | None = None) -> list[dict]:
        """Train to ``steps``; returns each step's metrics record, also given to ``on_step`` as it is made."""
        records = []
        board = None
        main = self.accelerator.is_main_process
        if self.cfg.tensorboard and main:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step drops what a killed run logged after the checkpoint it resumed from
            board = SummaryWriter(str(self.out / "tensorboard"), purge_step=self.step + 1)
        while self.step < self.cfg.steps:
            record = self.train_step()
            if self.cfg.eval_every and (self.step % self.cfg.eval_every == 0 or self.step == self.cfg.steps):
                with self._unsharded():
                    if main:
                        record.update(self.evaluate())
            records.append(record)
            if on_step is not None:
                on_step(record)
            if main:
                with (self.out / "metrics.jsonl").open("a") as f:
                    f.write(json.dumps(record) + "\n")
            if board is not None:
                for key, value in record.items():
                    if isinstance(value, (int, float)) and key != "step":
                        board.add_scalar(key, value, self.step)
                board.flush()
            if (self.cfg.save_every and self.step % self.cfg.save_every == 0) or self.step == self.cfg.steps:
                self.save()
                self.accelerator.wait_for_everyone()
        if board is not None:
            board.close()
        if main:
            plot_metrics(self.out / "metrics.jsonl", self.out / "metrics.png")
        return records

    def train_step(self) -> dict:
        start = time.perf_counter()
        tasks = [self.task_ids[self.order[(self.cursor + i) % len(self.order)]]
                 for i in range(self.cfg.tasks_per_step)]
        self.cursor += self.cfg.tasks_per_step
        self.model.eval()
        mine = self._my_tasks(range(len(tasks)))
        with self._unsharded():
            rollouts = collect(self.agent, self.envs, [tasks[i] for i in mine], self.cfg.group_size,
                               seed=self.cfg.seed + 1000 * self.step + 100 * self.rank)
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
        episodes: dict[int, dict] = {}  # rows summed into their episodes (prompted rows share one)
        for r in kept:
            e = episodes.setdefault(r.episode, {"reward": r.reward, "act": 0, "rehearse": 0})
            for role in ROLES:
                e[role] += r.generations[role]
        record = {"step": self.step, "tasks": tasks,
                  "reward": statistics.fmean(e["reward"] for e in episodes.values()) if episodes else None,
                  "reward_errors": len(errors), "reward_error": next(iter(errors.values()), None),
                  "rows": len(rollouts), "tokens": tokens, "tokens_per_s": tokens / (time.perf_counter() - start),
                  "rollout_s": sampled - start, "update_s": time.perf_counter() - sampled, **stats}
        for role in ROLES:
            having = [e["reward"] for e in episodes.values() if e[role]]
            record[f"reward/{role}"] = statistics.fmean(having) if having else None
        return record

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
        gens = {role: torch.tensor([r.generations[role] for r in rollouts]) for role in ROLES}
        advantages = token_advantages(rewards, groups, roles, gens, cfg.baseline, cfg.scale_advantages,
                                      episodes)
        weights = {role: 1.0 if role in cfg.roles else 0.0 for role in ROLES}
        ref = None
        if self.reference is not None:
            with torch.no_grad():
                ref = self._logprobs(self.reference, ids, mask)
        self.train_model.train()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        collected: dict[str, list[float]] = {}
        lengths = [len(r.ids) for r in rollouts]
        for _ in range(cfg.epochs):
            for rows_all in minibatches(lengths, cfg.minibatch, cfg.minibatch_tokens):
                counts = {role: int((roles[rows_all] == ROLE_IDS[role]).sum()) for role in ROLES}
                if not any(counts[role] and weights[role] for role in ROLES):
                    continue  # no tokens of a trained role in this minibatch (the same on every process)
                mb, share = rows_all[self.rank::self.world], float(self.world)
                if not mb:  # fewer rows than processes: run one row at weight 0 so DDP stays in step
                    mb, share = rows_all[:1], 0.0
                w = max(lengths[i] for i in rows_all)  # this minibatch's own width
                logprobs = self._logprobs(self.train_model, ids[mb, :w], mask[mb, :w])
                loss, stats = grpo_loss(logprobs, old[mb, :w], advantages[mb, :w], roles[mb, :w], cfg.clip_eps,
                                        None if ref is None else ref[mb, :w], cfg.kl_coef, weights, counts)
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
        for role in ROLES:
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
        """Reward under ``eval_dynamics`` and rehearsal fidelity (shadow) on held-out tasks."""
        self.model.eval()
        ids = self.eval_env.unwrapped.task_ids[:self.cfg.eval_tasks]
        rewards = [run_episode(self.eval_env, self.agent, t, seed=i)["reward"] for i, t in enumerate(ids)]
        oracle = agents.load("oracle", env=self.eval_env)
        calls = list(compare_calls(self.eval_env, oracle, self.agent, ids))
        return {"eval/reward": statistics.fmean(rewards),
                "eval/leaf_match": statistics.fmean(c["leaf_match"] for c in calls) if calls else None,
                "eval/parsed": statistics.fmean(c["parsed"] for c in calls) if calls else None}

    # checkpoints ------------------------------------------------------------
    def save(self) -> Path | None:
        """Write ``step-N`` from the main process (None elsewhere). Sharded, every process must
        call this: the weights and Adam states are gathered whole first. Adam states are keyed
        by weight name, so any number of processes, sharded or not, resumes them."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        main = self.accelerator.is_main_process
        if not (main or self.sharded):
            return None
        weights = self._full_weights() if self.sharded else None  # None: save_pretrained's own
        adam = self.optimizer.optimizer
        # None before the first update: torch's API would take a zero step to create the states
        optimizer = get_optimizer_state_dict(self.model, adam, options=StateDictOptions(
            full_state_dict=self.sharded, cpu_offload=self.sharded)) if adam.state else None
        if not main:
            return None
        state = {"step": self.step, "cursor": self.cursor, "optimizer": optimizer,
                 "scheduler": self.scheduler.state_dict(), "torch_rng": torch.get_rng_state(),
                 "python_rng": list(random.getstate()[1]), "config": self._config_json()}
        (self.out / "config.json").write_text(self._config_json(indent=1))
        return checkpoint.save(self.out / f"step-{self.step}", self.model, self.tokenizer, state, weights)

    def _config_json(self, indent: int | None = None) -> str:
        """The config as JSON; a callable reward is written by its name."""
        return json.dumps(asdict(self.cfg), indent=indent, default=lambda o: getattr(o, "__name__", repr(o)))

    def resume(self) -> None:
        """Continue from the latest checkpoint in ``out`` (refused whole if it is damaged); every
        process calls this."""
        from safetensors.torch import load_file
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        folder = checkpoint.latest(self.out)
        if folder is None:
            raise checkpoint.CheckpointError(f"no checkpoint to resume in {self.out}")
        # LoRA: the checkpoint holds the adapter; the base model is config.model
        weights_file = "adapter_model.safetensors" if self.cfg.lora_rank else "model.safetensors"
        state = checkpoint.load_state(folder, weights_file)
        if self.cfg.lora_rank:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(self.model, load_file(folder / weights_file))
            if result.unexpected_keys:
                raise checkpoint.CheckpointError(f"{folder} does not hold this run's adapter")
        else:
            self._load_full_weights(folder / weights_file)
        self._sync_engine()
        adam = state["optimizer"]
        if adam is None:  # saved before the first update
            pass
        elif not self.sharded and isinstance(adam["param_groups"][0]["params"][0], int):
            self.optimizer.load_state_dict(adam)  # a checkpoint written before states were keyed by name
        else:
            main = self.accelerator.is_main_process
            set_optimizer_state_dict(self.model, self.optimizer.optimizer, adam if main or not self.sharded else {},
                                     options=StateDictOptions(full_state_dict=self.sharded,
                                                              broadcast_from_rank0=self.sharded))
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate((3, tuple(state["python_rng"]), None))
        self.step, self.cursor = state["step"], state["cursor"]
        metrics = self.out / "metrics.jsonl"
        if metrics.exists():  # drop what a killed run logged after its last checkpoint, and a line it cut short
            kept = [line for line in metrics.read_text(errors="replace").splitlines()
                    if (step := _step_of(line)) is not None and step <= self.step]
            metrics.write_text("".join(line + "\n" for line in kept))

    def _load_full_weights(self, path: Path) -> None:
        """Load a whole ``model.safetensors`` (refused unless it names this model's weights; a
        tied head may be absent); sharded, the main process reads it and sends each its shards."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), "pt") as f:
            saved = set(f.keys())
        names = set(self.model.state_dict())
        if saved - names or [k for k in names - saved if "lm_head" not in k]:
            raise checkpoint.CheckpointError(f"{path.parent} does not hold this model's weights")
        if not self.sharded:
            self.model.load_state_dict(load_file(path), strict=False)
            self.model.tie_weights()
        else:
            sharding.load_full_weights(self.model, path, self.accelerator.is_main_process)


def _step_of(line: str) -> int | None:
    """The step of a ``metrics.jsonl`` line; None for one that is not a whole record."""
    try:
        step = json.loads(line)["step"]
    except (ValueError, TypeError, KeyError):
        return None
    return step if isinstance(step, int) else None


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


def plot_metrics(path: Path, png: Path) -> None:
    """Curves of reward (by role and on evaluation), loss (and held-out loss) and KL over steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in path.read_text().splitlines()]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, keys in zip(axes, (["reward", "reward/act", "reward/rehearse", "eval/reward"],
                               ["loss/act", "loss/rehearse", "eval/loss/act", "eval/loss/rehearse"],
                               ["eval/leaf_match", "clip_fraction/act", "clip_fraction/rehearse"])):
        for key in keys:
            points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
            if points:
                ax.plot(*zip(*points), marker="o", ms=3, label=key)
        ax.set_xlabel("step")
        if ax.lines:  # sft runs have no reward curves
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
