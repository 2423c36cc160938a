"""Two CPU processes through ``accelerate launch`` (gloo) make the update one process makes."""

import json
import pickle
from dataclasses import asdict

import pytest
import torch
from launch import ACCELERATE, launch
from paths import SUPPORT
from training_configs import tiny_config

from envace_gym.training import Trainer, collect


@pytest.mark.skipif(ACCELERATE is None, reason="needs the accelerate CLI")
@pytest.mark.slow
def test_two_ranks_make_the_one_process_update(tiny, tmp_path):
    config = tiny_config(tiny, tmp_path / "run", tasks_per_step=2, minibatch=2)
    trainer = Trainer(config)
    tasks = trainer.task_ids[:2]
    rollouts = collect(trainer.agent, trainer.envs, tasks, config.group_size, seed=7)
    assert len(rollouts) == 4 and all(any(r.roles) for r in rollouts)
    rollouts[0].reward = 1.0  # a spread in the first group (the random model scores 0): gradients to all-reduce
    (tmp_path / "config.json").write_text(json.dumps(asdict(config)))
    with open(tmp_path / "rollouts.pkl", "wb") as f:
        pickle.dump(rollouts, f)
    before = {k: v.clone() for k, v in Trainer(config).model.state_dict().items()}
    single = Trainer(config)
    single.update(rollouts)
    expected = single.model.state_dict()

    launch([str(SUPPORT / "distributed_update.py"), "config.json", "rollouts.pkl", str(tmp_path)], tmp_path)
    saved = [torch.load(tmp_path / f"rank{i}.pt") for i in (0, 1)]
    assert [s["world"] for s in saved] == [2, 2]
    ranks = [s["weights"] for s in saved]
    moved = [k for k in expected if not torch.equal(expected[k], before[k])]
    assert moved  # the update changed the weights
    for key in expected:
        assert torch.equal(ranks[0][key], ranks[1][key]), key  # DDP keeps the ranks identical
        # all-reduced gradients sum in another order: Adam's normalized step carries that into the 6th digit
        torch.testing.assert_close(ranks[0][key], expected[key], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(ACCELERATE is None, reason="needs the accelerate CLI")
@pytest.mark.slow
def test_train_command_under_two_ranks(tiny, tmp_path):
    out = tmp_path / "run"
    launch(
        [
            "-m",
            "envace_gym.cli",
            "train",
            "--model",
            f"hf:{tiny}",
            "--env",
            "EnvACE/tau2-mock-office-v0",
            "--dynamics",
            "rehearsed",
            "--eval-dynamics",
            "real",
            "--group-size",
            "2",
            "--steps",
            "2",
            "--out",
            str(out),
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--tasks-per-step",
            "2",
            "--eval-every",
            "2",
        ],
        tmp_path,
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]  # one writer
    assert all(len(r["tasks"]) == 2 for r in records) and "eval/reward" in records[-1]
    assert (out / "step-2" / "manifest.json").exists()
