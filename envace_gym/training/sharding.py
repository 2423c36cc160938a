"""FSDP2 (torch ``fully_shard``) for the trainer: sharding a model in place, gathering it whole
for generation, and its full state dict for checkpoints and weight pushes.

accelerate's FSDP plugin is not used: in accelerate 1.15 it is ignored on CPU (only accelerator
process groups switch to FSDP), while ``fully_shard`` is the same code over gloo and NCCL.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import cast

import torch


def shard(model) -> None:
    """FSDP2 in place over the default process group: each transformer block (the model's
    ``_no_split_modules``) its own unit, the rest (embeddings, final norm, head) the root's."""
    from torch.distributed.fsdp import fully_shard

    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module)
    fully_shard(model)


@contextmanager
def unsharded(model):
    """The whole weights on every process (gathered together once), so that each process's
    forwards need no other and processes may generate different numbers of times; sharded again after."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    model.set_reshard_after_forward(False)
    for unit in units:
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
        model.set_reshard_after_forward(True)
        model.set_reshard_after_forward(False, recurse=False)  # FSDP's default for the root


def full_weights(model, on_every_process: bool = False) -> dict[str, torch.Tensor]:
    """A sharded model's whole weights by checkpoint name, gathered (every process must call
    this) onto the main process's CPU, or onto every process's device."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=not on_every_process)
    return cast("dict[str, torch.Tensor]", get_model_state_dict(model, options=options))  # a model's: all tensors


def load_full_weights(model, path: Path, main: bool) -> None:
    """A whole ``model.safetensors`` into a sharded model: the main process reads it and sends
    each process its shards."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(
        model,
        load_file(path) if main else {},  # type: ignore[arg-type]  # torch asks for a dict of its wider value type
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False),
    )
