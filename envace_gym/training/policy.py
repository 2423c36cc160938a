"""The trained model and what GRPO (:class:`~envace_gym.training.trainer.Trainer`) and SFT
(:class:`~envace_gym.training.sft.SFT`) share around it: loading (LoRA, gradient checkpointing),
accelerate, the optimizer and its schedule, FSDP sharding, and saving and loading its
checkpoints."""

from __future__ import annotations

import copy
import random
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import torch

from envace_gym import agents
from envace_gym.agents.hf import HFAgent
from envace_gym.agents.prompting import TokenAgent
from envace_gym.specs import AgentSpec, parse_agent
from envace_gym.training import checkpoint, sharding


class Policy:
    """One model trained under accelerate: on one process, in DDP, or sharded in place with
    ``fsdp`` (torch FSDP2, when a process group is up).

    ``agent`` generates: the transformers agent whose model this is, or for ``vllm:PATH``
    (``engine_kwargs``) a vLLM engine, while a torch copy of the model trains here
    (``generates`` is then False). ``reference``: keep a frozen copy of the initial model.

    It holds the model, the optimizer and the sampler; the loop around it is
    :class:`~envace_gym.training.loop.TrainingLoop`'s.
    """

    def __init__(
        self,
        model: str | AgentSpec,
        *,
        seed: int,
        lr: float,
        steps: int,
        warmup_steps: int = 0,
        lora_rank: int = 0,
        gradient_checkpointing: bool = False,
        fsdp: bool = False,
        reference: bool = False,
        engine_kwargs: dict | None = None,
        **sampling,
    ):
        from accelerate import Accelerator

        self.accelerator = Accelerator(cpu=not torch.cuda.is_available())
        random.seed(seed)
        torch.manual_seed(seed)
        device = str(self.accelerator.device)
        sampling["seed"] = seed + self.rank
        spec = parse_agent(model)
        self.generates = spec.kind != "vllm"
        if not self.generates:
            if lora_rank:
                raise ValueError("lora_rank with a vllm: model is not supported; use hf:PATH")
            from transformers import AutoModelForCausalLM

            self.agent: TokenAgent = cast(TokenAgent, agents.load(spec, **sampling, **(engine_kwargs or {})))
            weights = AutoModelForCausalLM.from_pretrained(spec.arg, dtype=torch.float32).to(
                device  # type: ignore[arg-type]  # transformers types `to` as a wrapper of Module.to
            )
        else:
            placed: dict[str, Any] = {"device": device} if spec.transformers else {}
            hf = cast(HFAgent, agents.load(spec, **sampling, **placed))  # hf:PATH and smollm2 are HFAgents
            self.agent, weights = hf, hf.model
        if lora_rank:
            from peft import LoraConfig, get_peft_model

            weights = hf.model = get_peft_model(
                weights,
                LoraConfig(
                    r=lora_rank,
                    lora_alpha=2 * lora_rank,
                    lora_dropout=0.0,
                    target_modules="all-linear",
                    task_type="CAUSAL_LM",
                ),
            )
        if gradient_checkpointing:
            weights.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model, self.tokenizer, self.lora = weights, self.agent.tokenizer, bool(lora_rank)
        self.reference = copy.deepcopy(weights).eval() if reference else None
        self._prepare_optimizer(lr, steps, warmup_steps, fsdp)

    def _prepare_optimizer(self, lr: float, steps: int, warmup: int, fsdp: bool) -> None:
        """AdamW on the trainable weights, through accelerate (the model in DDP, or sharded in
        place with ``fsdp``), and a linear decay over ``steps`` after ``warmup`` steps."""
        from accelerate.utils import DistributedType

        if self.accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
            raise ValueError(
                "launch with a multi-GPU (or multi-CPU) accelerate config and pass fsdp: "
                "the trainer shards the model itself"
            )
        self.sharded = fsdp and torch.distributed.is_initialized()  # one GPU under torchrun too
        if self.sharded:
            sharding.shard(self.model)
            self.train_model = self.model
            if self.generates:  # hf generation runs on whole weights (unsharded): no process waits for
                # another, as transformers would under FSDP
                cast(HFAgent, self.agent).sampling["synced_gpus"] = False
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=lr)
        if self.sharded:
            self.optimizer = self.accelerator.prepare(optimizer)
        else:
            self.train_model, self.optimizer = self.accelerator.prepare(self.model, optimizer)
        # over training steps (not optimizer steps: prompted rows vary in number)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda k: min((k + 1) / warmup, 1.0) * max(0.0, 1.0 - k / steps) if warmup else max(0.0, 1.0 - k / steps),
        )

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @contextmanager
    def unsharded(self):
        """Under FSDP with the trained model generating (no vLLM engine): the whole weights on
        every process while the block runs (:func:`~envace_gym.training.sharding.unsharded`)."""
        if not self.sharded or not self.generates:
            yield
            return
        with sharding.unsharded(self.model):
            yield

    def full_weights(self, on_every_process: bool = False) -> dict[str, torch.Tensor]:
        """The model's whole weights by checkpoint name (sharded: gathered; every process must call this)."""
        return sharding.full_weights(self.model, on_every_process) if self.sharded else self.model.state_dict()

    # checkpoints ------------------------------------------------------------
    def save(self, folder: Path, state: dict, play: dict) -> Path | None:
        """Write the model, its tokenizer and the training ``state`` (with this policy's Adam states,
        schedule and random states) to ``folder`` from the main process (None elsewhere); ``play``: the
        settings its player takes. Sharded, every process must call this: the weights and Adam states are
        gathered whole first. Adam states are keyed by weight name, so any number of processes, sharded
        or not, resumes them."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        main = self.accelerator.is_main_process
        if not (main or self.sharded):
            return None
        weights = self.full_weights() if self.sharded else None  # None: save_pretrained's own
        adam = self.optimizer.optimizer
        # None before the first update: torch's API would take a zero step to create the states
        optimizer = (
            get_optimizer_state_dict(
                self.model, adam, options=StateDictOptions(full_state_dict=self.sharded, cpu_offload=self.sharded)
            )
            if adam.state
            else None
        )
        if not main:
            return None
        state = {
            **state,
            "optimizer": optimizer,
            "scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": list(random.getstate()[1]),
        }
        return checkpoint.save(folder, self.model, self.tokenizer, state, weights, play)

    def load(self, folder: Path, state: dict) -> None:
        """Load a checkpoint ``folder`` saved by :meth:`save` and its ``state``
        (:func:`~envace_gym.training.checkpoint.load_state`): the weights (the adapter with LoRA, whose
        base model is the config's), Adam states, schedule and random states; refused whole
        (:class:`~envace_gym.training.checkpoint.CheckpointError`) where they do not fit this model."""
        weights = folder / ("adapter_model.safetensors" if self.lora else "model.safetensors")
        if not weights.is_file():
            raise checkpoint.CheckpointError(f"{folder} lacks {weights.name}")
        try:
            self._load(weights, state)
        except checkpoint.CheckpointError:
            raise
        except Exception as e:  # torch's "size mismatch" and the like: states that do not fit this model
            raise checkpoint.CheckpointError(
                f"{folder} does not fit this run's model: {checkpoint.first_line(e)}"
            ) from None

    def _load(self, weights: Path, state: dict) -> None:
        """Load the checkpoint's ``weights`` file and training ``state``: Adam states, schedule, random states."""
        from safetensors.torch import load_file
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        if self.lora:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(self.model, load_file(weights))
            if result.unexpected_keys:  # type: ignore[attr-defined]  # peft annotates its result as `namedtuple`
                raise checkpoint.CheckpointError(f"{weights.parent} does not hold this run's adapter")
        else:
            self._load_full_weights(weights)
        adam = state["optimizer"]
        if adam is None:  # saved before the first update
            pass
        elif not self.sharded and isinstance(adam["param_groups"][0]["params"][0], int):
            self.optimizer.load_state_dict(adam)  # a checkpoint written before states were keyed by name
        else:
            main = self.accelerator.is_main_process
            set_optimizer_state_dict(
                self.model,
                self.optimizer.optimizer,
                adam if main or not self.sharded else {},
                options=StateDictOptions(full_state_dict=self.sharded, broadcast_from_rank0=self.sharded),
            )
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate((3, tuple(state["python_rng"]), None))

    def _load_full_weights(self, path: Path) -> None:
        """Load a whole ``model.safetensors`` (refused unless it holds this model's weights, each of its
        shape; a tied head may be absent); sharded, the main process reads it and sends each its shards."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), "pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        mine = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}
        if shapes.keys() - mine.keys() or [k for k in mine.keys() - shapes.keys() if "lm_head" not in k]:
            raise checkpoint.CheckpointError(f"{path.parent} does not hold this model's weights")
        wrong = next((k for k in shapes if shapes[k] != mine[k]), None)
        if wrong is not None:
            raise checkpoint.CheckpointError(
                f"{path.parent} holds weights of another shape: {wrong} is {list(shapes[wrong])}, "
                f"this model's {list(mine[wrong])}"
            )
        if not self.sharded:
            self.model.load_state_dict(load_file(path), strict=False)
            self.model.tie_weights()
        else:
            sharding.load_full_weights(self.model, path, self.accelerator.is_main_process)
