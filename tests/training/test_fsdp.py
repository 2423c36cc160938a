"""FSDP2 (torch ``fully_shard``) over two CPU processes (gloo, ``accelerate launch``): the sharded
update is the one-process update, and its checkpoint, written through the full state dict,
resumes sharded and in one process."""

import json
import pickle
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from launch import ACCELERATE, launch
from paths import SUPPORT
from safetensors.torch import load_file
from training_configs import tiny_config

from envace_gym.training import Trainer, checkpoint, collect

pytestmark = [
    pytest.mark.skipif(ACCELERATE is None, reason="needs the accelerate CLI"),
    pytest.mark.slow,
]  # process groups: tens of seconds


@pytest.fixture(scope="module")
def runs(tiny, tmp_path_factory):
    """The sharded run's results, and one process's weights after the same first and second update."""
    tmp = tmp_path_factory.mktemp("fsdp")
    config = tiny_config(
        tiny,
        tmp / "sharded",
        env_id="EnvACE/tau2-mock-gen-v0",
        tasks_per_step=2,
        steps=4,
        minibatch=2,
        tensorboard=False,
        fsdp=True,
        gradient_checkpointing=True,
    )
    single = Trainer(replace(config, out=str(tmp / "single")))
    rollouts = collect(single.agent, single.envs, single.task_ids[:2], config.group_size, seed=7)
    assert len(rollouts) == 4 and all(any(r.roles) for r in rollouts)
    rollouts[0].reward = 1.0  # a spread in the first group (the random model scores 0): gradients to shard
    (tmp / "config.json").write_text(json.dumps(asdict(config)))
    with open(tmp / "rollouts.pkl", "wb") as f:
        pickle.dump(rollouts, f)
    before = {k: v.clone() for k, v in single.model.state_dict().items()}
    single.update(rollouts)
    first = {k: v.clone() for k, v in single.model.state_dict().items()}
    single.update(rollouts)
    second = single.model.state_dict()
    launch([str(SUPPORT / "sharded_run.py"), "config.json", "rollouts.pkl", "result.pt", f"{config.out}-train"], tmp)
    return config, rollouts, before, first, second, torch.load(tmp / "result.pt")


def _close(weights, expected):
    assert set(weights) == set(expected)
    for key, value in expected.items():
        torch.testing.assert_close(weights[key], value, rtol=1e-4, atol=1e-5, msg=key)


def test_the_sharded_update_is_the_one_process_update(runs):
    _, _, before, first, _, sharded = runs
    assert sharded["world"] == 2 and sharded["sharded"] == [True, True]
    assert [k for k in first if not torch.equal(first[k], before[k])]  # the update moved the weights
    _close(sharded["first"], first)


def test_weight_pushes_gather_the_whole_weights(runs):
    """To a served engine from the main process, to an in-process one on every process (checked there)."""
    sharded = runs[-1]
    for pushed in sharded["pushed"]:
        assert set(pushed) == set(sharded["first"])
        assert all(torch.equal(pushed[k], v) for k, v in sharded["first"].items())


def test_a_sharded_checkpoint_resumes_sharded(runs):
    """The resumed run's next update is the uninterrupted run's: weights and Adam states came back."""
    _, _, _, _, second, sharded = runs
    _close(sharded["second"], second)


def test_a_sharded_checkpoint_resumes_in_one_process(runs):
    config, rollouts, _, _, _, sharded = runs
    saved = load_file(f"{config.out}/step-1/model.safetensors")  # whole tensors, not shards
    assert all(saved[k].shape == v.shape for k, v in sharded["first"].items() if k in saved)
    one = Trainer(config)
    one.resume()
    assert one.world == 1 and not one.sharded and one.step == 1
    for key, value in sharded["first"].items():
        assert torch.equal(one.model.state_dict()[key], value), key
    one.update(rollouts)
    _close(one.model.state_dict(), sharded["second"])


def test_a_sharded_run_plays_evaluates_and_saves(runs):
    """hf generation under FSDP (each process gathers the weights to play its episodes),
    evaluation on the main process alone, and checkpoints."""
    config = runs[0]
    out = f"{config.out}-train"
    records = [json.loads(line) for line in open(f"{out}/metrics.jsonl").read().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and "eval/reward" in records[-1]
    assert records[0]["rows"] == config.group_size * config.tasks_per_step  # both processes played
    checkpoint.verify(Path(out) / "step-2", ("model.safetensors", "state.pt"))


def test_a_checkpoint_with_adam_states_keyed_by_position_still_resumes(runs, tmp_path):
    """Checkpoints written before states were keyed by weight name (``optimizer.state_dict()``)."""
    config, rollouts = runs[0], runs[1]
    trainer = Trainer(replace(config, out=str(tmp_path), fsdp=False))
    trainer.update(rollouts)
    folder = trainer.save()
    state = torch.load(folder / "state.pt", weights_only=True)
    state["optimizer"] = trainer.optimizer.state_dict()
    torch.save(state, folder / "state.pt")
    manifest = json.loads((folder / checkpoint.MANIFEST).read_text())
    manifest["state.pt"] = checkpoint._sha256(folder / "state.pt")
    (folder / checkpoint.MANIFEST).write_text(json.dumps(manifest))
    resumed = Trainer(replace(config, out=str(tmp_path), fsdp=False))
    resumed.resume()
    for kept, loaded in zip(trainer.optimizer.optimizer.state.values(), resumed.optimizer.optimizer.state.values()):
        assert torch.equal(kept["exp_avg_sq"], loaded["exp_avg_sq"])


def test_a_checkpoint_saved_before_any_update_resumes_without_adam_states(runs, tmp_path):
    config = replace(runs[0], out=str(tmp_path), fsdp=False)
    Trainer(config).save()
    resumed = Trainer(config)
    resumed.resume()
    assert resumed.step == 0 and not resumed.optimizer.optimizer.state
