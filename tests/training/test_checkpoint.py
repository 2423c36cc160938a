"""Checkpoints are resumed whole or refused with one CheckpointError, however they are damaged."""

import io
import json
import shutil
from dataclasses import fields

import pytest
import torch
from training_configs import tiny_config

from envace_gym.training import CheckpointError, TrainConfig, Trainer, checkpoint
from envace_gym.training.checkpoint import MANIFEST


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """A trainer after one step, and its checkpoint."""
    trainer = Trainer(tiny_config(tiny, tmp_path_factory.mktemp("trained"), save_every=5))
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
    resumed = Trainer(tiny_config(tiny, tmp_path, save_every=5))
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
    Trainer(tiny_config(tiny, tmp_path, steps=2, save_every=0)).train()
    assert [p.name for p in tmp_path.glob("step-*")] == ["step-2"]


@pytest.mark.parametrize(
    "field, value",
    [("save_every", -1), ("eval_every", -1), ("steps", 0), ("group_size", 0), ("tasks_per_step", 0), ("minibatch", 0)],
)
def test_train_config_refuses_counts_out_of_range(field, value):
    with pytest.raises(ValueError, match=f"--{field.replace('_', '-')} must be"):
        TrainConfig(model="hf:x", env_id="EnvACE/tau2-retail-v0", out="out", **{field: value})


def _resume_as(trainer, monkeypatch, out, **changed):
    """Resume the fixture's trainer from ``out`` with its config changed."""
    from dataclasses import replace

    monkeypatch.setattr(trainer, "cfg", replace(trainer.cfg, out=str(out), **changed))
    monkeypatch.setattr(trainer, "out", out)
    trainer.resume()


@pytest.mark.parametrize(
    "changed, says",
    [
        (
            {"env_id": "EnvACE/tau2-airline-v0"},
            "its env_id is 'EnvACE/tau2-mock-office-v0', this run's 'EnvACE/tau2-airline-v0'",
        ),
        ({"group_size": 3}, "its group_size is 2, this run's 3"),
        ({"model": "hf:another", "lr": 0.5}, "its model is .*; its lr is 0.001, this run's 0.5"),
    ],
)
def test_resume_refuses_the_checkpoint_of_another_run_in_one_line(trained, tmp_path, monkeypatch, changed, says):
    trainer, _ = trained
    _copy(trained, tmp_path)
    with pytest.raises(ValueError, match=f"is the checkpoint of another run: {says}; resume with the same settings"):
        _resume_as(trainer, monkeypatch, tmp_path, **changed)
    assert not (tmp_path / "config.json").exists() and not (tmp_path / "metrics.jsonl").exists()


def test_resume_may_change_the_steps_and_other_resumable_settings(trained, tmp_path, monkeypatch):
    trainer, _ = trained
    _copy(trained, tmp_path)
    _resume_as(trainer, monkeypatch, tmp_path, steps=5, save_every=2, eval_every=1, tensorboard=False)
    assert trainer.step == 1 and "steps" in TrainConfig.RESUMABLE
    assert "May change on --resume" in {f.name: f for f in fields(TrainConfig)}["steps"].metadata["help"]


def _replace_file(folder, name, data):
    (folder / name).write_bytes(data)
    _rewrite(folder, lambda m: {**m, name: checkpoint._sha256(folder / name)})


def _reshaped_weights(folder):
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    name = next(k for k, v in weights.items() if v.dim() == 2)
    weights[name] = weights[name][:-1].contiguous()
    save_file(weights, folder / "tmp.safetensors", metadata={"format": "pt"})
    _replace_file(folder, "model.safetensors", (folder / "tmp.safetensors").read_bytes())
    (folder / "tmp.safetensors").unlink()


def _state_of(value):
    def write(folder):
        buffer = io.BytesIO()
        torch.save(value, buffer)
        _replace_file(folder, "state.pt", buffer.getvalue())

    return write


MISMATCHED = {
    "weights of another shape": (_reshaped_weights, "holds weights of another shape: "),
    "a state that is no torch file": (lambda f: _replace_file(f, "state.pt", b"junk"), "not a training state"),
    "a state that is a list": (_state_of([1, 2]), "not a training state"),
    "a state without its optimizer": (_state_of({"step": 1}), "not a training state"),
}


@pytest.mark.parametrize("mismatch, says", MISMATCHED.values(), ids=MISMATCHED.keys())
def test_a_checkpoint_that_does_not_fit_the_run_is_a_one_line_value_error(trained, tmp_path, mismatch, says):
    trainer, _ = trained
    mismatch(_copy(trained, tmp_path))
    trainer.out = tmp_path
    with pytest.raises(ValueError, match=says) as refused:
        trainer.resume()
    assert isinstance(refused.value, CheckpointError) and "\n" not in str(refused.value)


def test_resume_keeps_a_metrics_line_holding_u2028_whole(trained, tmp_path):
    trainer, _ = trained
    _copy(trained, tmp_path)
    lines = [json.dumps({"step": 1, "tasks": ["a\u2028b\u2029c\x85"]}, ensure_ascii=False), json.dumps({"step": 2})]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    trainer.out = tmp_path
    trainer.resume()
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().split("\n")[:-1]] == [
        json.loads(lines[0])
    ]
