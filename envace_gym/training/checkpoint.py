"""Checkpoints that are whole or refused: written to a temporary folder, hashed, then renamed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import torch

MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated or altered."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save(folder: Path, model, tokenizer, state: dict) -> Path:
    """Write ``model``, ``tokenizer`` and the training ``state`` (tensors and plain data) to ``folder``."""
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save(state, tmp / "state.pt")
    files = {p.name: _sha256(p) for p in sorted(tmp.iterdir())}
    (tmp / MANIFEST).write_text(json.dumps(files, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def verify(folder: Path) -> None:
    """Raise :class:`CheckpointError` unless every file of ``folder`` matches its manifest."""
    manifest = folder / MANIFEST
    if not manifest.exists():
        raise CheckpointError(f"{folder} has no {MANIFEST}: an interrupted or foreign checkpoint")
    try:
        files = json.loads(manifest.read_text())
    except ValueError as e:
        raise CheckpointError(f"{manifest} is not valid JSON: {e}") from None
    for name, digest in files.items():
        path = folder / name
        if not path.exists():
            raise CheckpointError(f"{folder} lacks {name}")
        if _sha256(path) != digest:
            raise CheckpointError(f"{path} does not match its checksum: truncated or corrupted")


def load_state(folder: Path) -> dict:
    """The training state of a verified checkpoint (model weights are loaded by the caller)."""
    verify(folder)
    return torch.load(folder / "state.pt", weights_only=True)


def latest(out: Path) -> Path | None:
    steps = sorted((p for p in out.glob("step-*") if p.is_dir() and not p.name.endswith(".partial")),
                   key=lambda p: int(p.name.split("-")[1]))
    return steps[-1] if steps else None
