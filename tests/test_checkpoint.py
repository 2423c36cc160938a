"""Checkpoints are resumed whole or refused with one CheckpointError, however they are damaged."""

import json
import shutil

import pytest
import torch

from envace_gym.training import CheckpointError, TrainConfig, Trainer, checkpoint
from envace_gym.training.checkpoint import MANIFEST


def _config(tiny, out, steps=1, **kw):
    return TrainConfig(
        model=f"hf:{tiny}",
        env_id="EnvACE/tau2-retail-v0",
        out=str(out),
        group_size=2,
        tasks_per_step=1,
        steps=steps,
        lr=1e-3,
        max_new_tokens=8,
        max_turns=2,
        eval_every=0,
        seed=0,
        **kw,
    )


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """A trainer after one step, and its checkpoint."""
    trainer = Trainer(_config(tiny, tmp_path_factory.mktemp("trained")))
    trainer.train_step()
    return trainer, trainer.save()


def _copy(trained, out):
    folder = out / trained[1].name
    shutil.copytree(trained[1], folder, symlinks=True)
    return folder


def _manifest(folder):
    return json.loads((folder / MANIFEST).read_text())


def _rewrite(folder, change):
    (folder / MANIFEST).write_text(json.dumps(change(_manifest(folder))))


def _symlink_out(folder, name):
    outside = folder.parent / f"outside-{name}"
    (folder / name).rename(outside)
    (folder / name).symlink_to(outside)


def _as_folder(folder, name, digest):
    (folder / name).mkdir()
    _rewrite(folder, lambda m: {**m, name: digest})


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def _drop_weights(folder):
    (folder / "model.safetensors").unlink()
    _rewrite(folder, lambda m: {k: v for k, v in m.items() if k != "model.safetensors"})


MALFORMED = {
    "an empty manifest": lambda f: _rewrite(f, lambda m: {}),
    "an entry removed": lambda f: _rewrite(f, lambda m: {k: v for k, v in m.items() if k != "model.safetensors"}),
    "a list": lambda f: _rewrite(f, list),
    "a number for a digest": lambda f: _rewrite(f, lambda m: {**m, "state.pt": 5}),
    "a digest that is not hex": lambda f: _rewrite(f, lambda m: {**m, "state.pt": "z" * 64}),
    "a path through the parent": lambda f: _rewrite(f, lambda m: {**m, f"../{f.name}/state.pt": m["state.pt"]}),
    "an absolute path": lambda f: _rewrite(f, lambda m: {**m, str((f / "state.pt").resolve()): m["state.pt"]}),
    "a dot-dot name": lambda f: _rewrite(f, lambda m: {**m, "..": "0" * 64}),
    "not JSON": lambda f: (f / MANIFEST).write_text("{"),
    "not UTF-8": lambda f: (f / MANIFEST).write_bytes(b'{"\xff": 1}'),
    "the manifest a folder": lambda f: ((f / MANIFEST).unlink(), (f / MANIFEST).mkdir()),
    "the manifest a symlink": lambda f: _symlink_out(f, MANIFEST),
    "an extra file": lambda f: (f / "notes.txt").write_text("x"),
    "an extra folder": lambda f: (f / "extra").mkdir(),
    "a listed folder": lambda f: _as_folder(f, "extra", "0" * 64),
    "the weights a symlink": lambda f: _symlink_out(f, "model.safetensors"),
    "tampered weights": lambda f: _flip_a_byte(f / "model.safetensors"),
    "no weights at all": _drop_weights,
}


@pytest.mark.parametrize("damage", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_damaged_checkpoint_is_refused_with_a_checkpoint_error(trained, tmp_path, damage):
    trainer, _ = trained
    damage(_copy(trained, tmp_path))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.out = tmp_path
    with pytest.raises(CheckpointError):
        trainer.resume()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_a_whole_checkpoint_resumes(trained, tiny, tmp_path):
    saved, _ = trained
    _copy(trained, tmp_path)
    resumed = Trainer(_config(tiny, tmp_path))
    resumed.resume()
    assert resumed.step == 1
    assert all(
        torch.equal(a, b) for a, b in zip(saved.model.state_dict().values(), resumed.model.state_dict().values())
    )


def test_resume_drops_a_metrics_line_cut_short_and_those_after_the_checkpoint(trained, tmp_path):
    trainer, _ = trained
    _copy(trained, tmp_path)
    lines = [json.dumps({"step": 1, "loss": 0.5}), json.dumps({"step": 2, "loss": 0.4}), '{"step": 3, "lo']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))  # killed mid-write: no newline either
    trainer.out = tmp_path
    trainer.resume()
    assert trainer.step == 1 and (tmp_path / "metrics.jsonl").read_text() == lines[0] + "\n"


def test_latest_skips_what_is_not_a_numbered_step_folder(tmp_path):
    for name in ("step-2", "step-10", "step-foo", "step-3.partial", "step-", "step-1e3", "step-٣"):
        (tmp_path / name).mkdir()
    (tmp_path / "step-99").write_text("")
    assert checkpoint.latest(tmp_path) == tmp_path / "step-10"
    assert checkpoint.latest(tmp_path / "nothing") is None


def test_save_every_0_checkpoints_only_at_the_end(tiny, tmp_path):
    Trainer(_config(tiny, tmp_path, steps=2, save_every=0)).train()
    assert [p.name for p in tmp_path.glob("step-*")] == ["step-2"]


@pytest.mark.parametrize(
    "field, value",
    [("save_every", -1), ("eval_every", -1), ("steps", 0), ("group_size", 0), ("tasks_per_step", 0), ("minibatch", 0)],
)
def test_train_config_refuses_counts_out_of_range(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(model="hf:x", env_id="EnvACE/tau2-retail-v0", out="out", **{field: value})
