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
STATE = ("step", "cursor", "optimizer", "scheduler", "torch_rng", "python_rng")  # a training state's keys


class CheckpointError(ValueError):
    """A checkpoint is missing, truncated, altered, or not the one of the run that resumes it."""


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


def load_state(folder: Path) -> dict:
    """The training state of a verified checkpoint (its weights are loaded by the caller); its
    tensors are mapped from the file, read when used."""
    verify(folder, ("state.pt",))
    path = folder / "state.pt"
    try:
        state = torch.load(path, weights_only=True, mmap=True)
    except Exception as e:  # not a torch file, or one holding what weights_only refuses
        raise CheckpointError(f"{path} is not a training state: {first_line(e)}") from None
    missing = [k for k in STATE if k not in state] if isinstance(state, dict) else list(STATE)
    if missing:
        raise CheckpointError(f"{path} is not a training state: it lacks {', '.join(missing)}")
    return state


def check_same_run(folder: Path, saved, given: dict, resumable: tuple[str, ...]) -> None:
    """Refuse to resume from ``folder`` the run whose settings are ``given`` (as JSON values) where one
    differs from its ``saved`` run's (JSON text; None: a checkpoint that predates them), besides the
    ``resumable`` settings: one line naming each."""
    if saved is None:
        return
    try:
        saved = json.loads(saved)
    except (TypeError, ValueError):
        saved = None
    if not isinstance(saved, dict):
        raise CheckpointError(f"{folder / 'state.pt'} holds no run settings")
    differ = [k for k in given if k in saved and k not in resumable and saved[k] != given[k]]
    if differ:
        raise CheckpointError(
            f"{folder} is the checkpoint of another run: "
            + "; ".join(f"its {k} is {saved[k]!r:.80}, this run's {given[k]!r:.80}" for k in differ)
            + f"; resume with the same settings (only {', '.join(k for k in resumable if k in given)} may change), "
            "or give another --out"
        )


def first_line(error: Exception) -> str:
    """An error's message cut to its first line (torch's run over many)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def latest(out: Path) -> Path | None:
    """The ``step-N`` folder of ``out`` with the highest N; other names (``step-3.partial``) are not steps."""
    steps = [p for p in out.glob("step-*") if STEP.fullmatch(p.name) and p.is_dir()]
    return max(steps, key=lambda p: int(p.name.removeprefix("step-")), default=None)
