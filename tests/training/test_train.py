"""The GRPO loop on the tiny model: metrics, checkpoints, resume, and refusal of damaged checkpoints."""

import json

import pytest
import torch
from recorder import Recorder
from training_configs import tiny_config

from envace_gym.core.messages import format_tool_call
from envace_gym.training import CheckpointError, TrainConfig, Trainer
from envace_gym.training.rollout import collect

# this file's runs evaluate: every second step, on one held-out task
EVALUATED = {"eval_every": 2, "eval_tasks": 1}
# retail, where the random model's first group has a reward spread (the office's are flat: no gradient but
# weight decay)
RETAIL = {**EVALUATED, "env_id": "EnvACE/tau2-retail-v0"}


def _metrics(out):
    keep = ("step", "tasks", "reward", "lr", "loss/act", "advantage_mean/act", "eval/reward")
    return [{k: r.get(k) for k in keep} for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]


@pytest.mark.slow
def test_resume_after_a_kill_continues_the_same_run(tiny, tmp_path):
    whole = tmp_path / "whole"
    Trainer(tiny_config(tiny, whole, steps=3, **RETAIL)).train()
    assert (whole / "metrics.png").stat().st_size > 5000 and (whole / "step-3" / "manifest.json").exists()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(whole / "tensorboard"))
    board.Reload()
    assert [e.step for e in board.Scalars("reward")] == [1, 2, 3]
    assert [e.value for e in board.Scalars("reward")] == pytest.approx([r["reward"] for r in _metrics(whole)])
    assert [r["lr"] for r in _metrics(whole)] == pytest.approx([1e-3, 2e-3 / 3, 1e-3 / 3])  # linear decay by step

    part = tmp_path / "part"
    first = Trainer(tiny_config(tiny, part, steps=3, **RETAIL))
    for step in (1, 2):  # step 1 is logged and saved; step 2 is logged, then the run is killed
        record = first.train_step()
        with (part / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        if step == 1:
            first.save()
    del first
    resumed = Trainer(tiny_config(tiny, part, steps=3, **RETAIL))
    resumed.resume()
    assert resumed.step == 1 and len(_metrics(part)) == 1  # the unsaved step's log is dropped
    resumed.train()
    assert _metrics(part) == _metrics(whole)


def test_a_corrupted_checkpoint_is_refused(tiny, tmp_path):
    trainer = Trainer(tiny_config(tiny, tmp_path, steps=1, **EVALUATED))
    trainer.train_step()
    folder = trainer.save()
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    fresh = Trainer(tiny_config(tiny, tmp_path, steps=1, **EVALUATED))
    before = [p.detach().clone() for p in fresh.model.parameters()]
    with pytest.raises(CheckpointError, match="checksum"):
        fresh.resume()
    assert all((a == b).all() for a, b in zip(before, fresh.model.parameters()))  # nothing half-loaded
    (folder / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="manifest"):
        fresh.resume()


def test_lora_trains_only_the_adapter_and_resumes_it(tiny, tmp_path):
    config = tiny_config(tiny, tmp_path, steps=1, **RETAIL)
    config.lora_rank = 4
    trainer = Trainer(config)
    base = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train_step()
    folder = trainer.save()
    after = trainer.model.state_dict()
    changed = {k for k in base if not torch.equal(base[k], after[k])}
    assert changed and all("lora_" in k for k in changed)  # base weights stay as they were
    assert (folder / "adapter_model.safetensors").exists() and not (folder / "model.safetensors").exists()
    resumed = Trainer(config)
    resumed.resume()
    for key in changed:
        assert torch.equal(resumed.model.state_dict()[key], after[key])


def test_prompted_rehearsal_trains_on_a_row_per_rehearse_generation(tiny, tmp_path):
    config = tiny_config(tiny, tmp_path, steps=1, **EVALUATED)
    config.rehearsal_format = "prompted"
    trainer = Trainer(config)
    record = trainer.train_step()
    assert record["rows"] >= 2 and record["tokens"] > 0
    assert {"loss/act", "reward/act"} <= set(record)
    # the schedule counts training steps, however many rows (and minibatches) a step has
    assert record["lr"] == pytest.approx(1e-3) and trainer.scheduler.get_last_lr() == [0.0]


@pytest.mark.slow
def test_the_world_model_loss_trains_on_real_responses(tiny, tmp_path):
    config = tiny_config(tiny, tmp_path, steps=1, **EVALUATED)
    config.dynamics, config.world_model_coef = "shadow", 0.5
    trainer = Trainer(config)
    agent = Recorder(trainer.agent, format_tool_call("get_users", {}))  # act turns call a tool: the world answers
    rows = collect(agent, trainer.envs, trainer.task_ids[:1], config.group_size, world_targets=True)
    assert len(rows) == 4  # 2 episodes, a world row each
    first = trainer.update(rows)["loss/world"]
    assert trainer.update(rows)["loss/world"] < first  # lr 1e-3: the real responses grow likelier
    for wrong, why in (({"dynamics": "rehearsed"}, "runs no real call"), ({"rehearsal_format": "prompted"}, "inline")):
        with pytest.raises(ValueError, match=why):
            TrainConfig(**{**vars(config), **wrong})


@pytest.mark.slow
def test_training_defaults_to_partial_credit_and_stops_when_no_group_can_learn(tiny, tmp_path):
    trainer = Trainer(tiny_config(tiny, tmp_path / "default", steps=1, **EVALUATED))
    assert trainer.envs[0].unwrapped.reward == "strict_progress"  # the suite has gold: a reward with a spread
    from envace_gym.training import TrainingStalled

    flat = tiny_config(tiny, tmp_path / "flat", steps=3, **EVALUATED, reward="actions", stop_after_flat_steps=2)
    trainer = Trainer(flat)
    with pytest.warns(RuntimeWarning, match="scored alike"):
        record = trainer.train_step()  # a random tiny model never makes every gold call: 0 for all
    assert record["reward_std"] == 0.0 and record["flat_groups"] == 1
    with pytest.raises(TrainingStalled, match="2 steps in a row.*strict_progress"):
        trainer.train_step()


def test_evaluate_reports_the_held_out_measures(tiny, tmp_path, monkeypatch):
    from envace_gym.training import held_out

    measured: dict[str, dict] = {}  # what each held-out function returned
    for name in ("held_out", "fidelity"):
        real = getattr(held_out, name)
        monkeypatch.setattr(
            held_out, name, lambda *a, real=real, **k: measured.setdefault(real.__name__, real(*a, **k))
        )
    got = Trainer(tiny_config(tiny, tmp_path, steps=1, **EVALUATED)).evaluate()
    assert got == {f"eval/{name}": value for part in measured.values() for name, value in part.items()}
    assert set(got) == {f"eval/{m}" for m in ("reward", "gold_share", "valid_calls", "parsed", "leaf_match", "exact")}
