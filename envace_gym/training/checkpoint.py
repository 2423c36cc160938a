"""Checkpoints that are whole or refused: written to a temporary folder, hashed, then renamed."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import torch

from envace_gym.agents.hf import PLAY_SETTINGS

MANIFEST = "manifest.json"
DIGEST = re.compile("[0-9a-f]{64}")
STEP = re.compile("step-[0-9]+")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated or altered."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save(folder: Path, model, tokenizer, state: dict, weights: dict | None = None, play: dict | None = None) -> Path:
    """Write ``model``, ``tokenizer`` and the training ``state`` (tensors and plain data) to
    ``folder``; ``weights``: the model's full state dict when the model holds only a shard; ``play``:
    the settings it was trained to play with (``PLAY_SETTINGS``, read by the hf agent and ``run``)."""
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, **({} if weights is None else {"state_dict": weights}))
    tokenizer.save_pretrained(tmp)
    if play:
        (tmp / PLAY_SETTINGS).write_text(json.dumps(play, indent=1))
    torch.save(state, tmp / "state.pt")
    files = {p.name: _sha256(p) for p in sorted(tmp.iterdir())}
    (tmp / MANIFEST).write_text(json.dumps(files, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def verify(folder: Path, needed: tuple[str, ...] = ()) -> None:
    """Raise :class:`CheckpointError` unless ``folder``'s manifest is an object that lists exactly
    the folder's other entries, each a plain file (no folder, no symlink) with its SHA-256 digest,
    ``needed`` among them."""
    manifest = folder / MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        raise CheckpointError(f"{folder} has no {MANIFEST} file: an interrupted or foreign checkpoint")
    try:
        files = json.loads(manifest.read_text())
        present = {p.name for p in folder.iterdir()} - {MANIFEST}
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{manifest} cannot be read as JSON: {e}") from None
    if not isinstance(files, dict) or not all(isinstance(d, str) and DIGEST.fullmatch(d) for d in files.values()):
        raise CheckpointError(f"{manifest} is not an object of file names and SHA-256 digests")
    if set(files) != present:
        raise CheckpointError(
            f"{manifest} does not list the folder's files: unlisted "
            f"{sorted(present - set(files))}, missing {sorted(set(files) - present)}"
        )
    for name in needed:
        if name not in files:
            raise CheckpointError(f"{folder} lacks {name}")
    for name, digest in files.items():
        path = folder / name
        if path.is_symlink() or not path.is_file():
            raise CheckpointError(f"{path} is not a plain file")
        try:
            intact = _sha256(path) == digest
        except OSError as e:
            raise CheckpointError(f"{path} cannot be read: {e}") from None
        if not intact:
            raise CheckpointError(f"{path} does not match its checksum: truncated or corrupted")


def load_state(folder: Path, weights: str) -> dict:
    """The training state of a verified checkpoint whose model weights are the file ``weights``
    (loaded by the caller); its tensors are mapped from the file, read when used."""
    verify(folder, ("state.pt", weights))
    return torch.load(folder / "state.pt", weights_only=True, mmap=True)


def latest(out: Path) -> Path | None:
    """The ``step-N`` folder of ``out`` with the highest N; other names (``step-3.partial``) are not steps."""
    steps = [p for p in out.glob("step-*") if STEP.fullmatch(p.name) and p.is_dir()]
    return max(steps, key=lambda p: int(p.name.removeprefix("step-")), default=None)
