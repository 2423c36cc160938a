"""run and compare --workers on a local Ray: same records as one worker, faults, Ctrl-C, --resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from paths import SUPPORT
from typer.testing import CliRunner

from envace_gym.cli import app
from envace_gym.play.distributed import WorkerSpec, connect, run_distributed
from envace_gym.play.records import rows

MOCK = "EnvACE/tau2-mock-v0"
AGENTS = str(SUPPORT / "ray_agents.py")
runner = CliRunner()


@pytest.fixture(scope="module")
def ray():
    ray = connect(None, 4)  # one local Ray for the module: each start costs seconds here
    yield ray
    ray.shutdown()


def without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("seconds", "rehearsal_seconds")} for r in records]


def cli(*args: str) -> list[dict]:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return rows(args[args.index("--out") + 1])


@pytest.mark.parametrize("agent,kwargs", [("noisy-oracle", ["--agent-kwargs", "p=0.5"]), ("random", [])])
def test_two_workers_write_the_records_of_one(ray, tmp_path, agent, kwargs):
    common = ["run", MOCK, "--agent", agent, *kwargs, "--repeats", "2", "--max-turns", "6"]
    one = cli(*common, "--workers", "1", "--out", str(tmp_path / "one.jsonl"))
    two = cli(*common, "--workers", "2", "--out", str(tmp_path / "two.jsonl"))
    batched = cli(*common, "--workers", "2", "--batch", "3", "--out", str(tmp_path / "batched.jsonl"))
    assert len(one) == 18 and without_seconds(one) == without_seconds(two) == without_seconds(batched)
    assert len({r["reward"] for r in one}) > 1 or agent == "random"  # noisy: some episodes fail, some not
    assert [(r["task_id"], r["seed"]) for r in one] == [
        (t, i) for i, t in enumerate(t for t in dict.fromkeys(r["task_id"] for r in one) for _ in range(2))
    ]


def test_compare_with_workers_equals_compare_in_process(ray, tmp_path):
    result = runner.invoke(app, ["compare", MOCK, "--agent", "oracle", "--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app, ["compare", MOCK, "--agent", "oracle", "--workers", "2", "--out", str(tmp_path / "b.jsonl")]
    )
    assert result.exit_code == 0, result.output
    assert rows(tmp_path / "a.jsonl") == rows(tmp_path / "b.jsonl") and rows(tmp_path / "a.jsonl")


@pytest.mark.slow  # Ray workers killed and restarted: about 12 s
def test_a_worker_killed_mid_episode_reruns_it_and_one_that_always_dies_is_recorded_with_its_error(ray, tmp_path):
    flag = tmp_path / "killed-once"
    spec = WorkerSpec(MOCK, f"{AGENTS}:CrashOn", agent_kwargs={"task": "create_task_1", "flag": str(flag)})
    tasks = ["create_task_1", "update_task_1", "create_task_1_with_env_assertions", "create_task_1"]
    episodes = [(t, i) for i, t in enumerate(tasks)]
    records = list(run_distributed(spec, episodes, workers=2))
    assert flag.exists()  # a worker did die mid-episode
    assert [(r["task_id"], r["seed"]) for r in records] == episodes  # each episode once, in order
    assert [r["reward"] for r in records] == [1.0] * 4 and not any(r["error"] for r in records)

    spec = WorkerSpec(
        MOCK, f"{AGENTS}:CrashOn", agent_kwargs={"task": "create_task_1", "flag": str(flag), "always": True}
    )
    records = list(run_distributed(spec, episodes[:3], workers=2, tries=2))
    assert [(r["task_id"], r["seed"]) for r in records] == episodes[:3]
    assert records[0]["ended_by"] == "worker_error" and records[0]["error"].startswith("failed 2 times")
    assert records[0]["reward"] == 0.0 and set(records[0]) == set(records[1])
    assert [r["reward"] for r in records[1:]] == [1.0, 1.0]


@pytest.mark.slow
def test_ctrl_c_leaves_a_valid_file_and_resume_plays_only_the_rest(tmp_path):
    out = tmp_path / "run.jsonl"
    command = [
        sys.executable,
        "-m",
        "envace_gym.cli",
        "run",
        MOCK,
        "--agent",
        f"{AGENTS}:Slow",
        "--agent-kwargs",
        "delay=0.3",
        "--workers",
        "2",
        "--repeats",
        "2",
        "--out",
        str(out),
    ]
    # a handled SIGINT is reset to the default in the child, so it gets Ctrl-C as at a terminal even when
    # this run inherited SIGINT ignored (a background job's), which Python would pass on as ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
        assert process.poll() is None, process.stdout.read()[-2000:]
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 130, output[-2000:]
    assert "--resume" in output
    partial = rows(out)  # every line is a whole record
    assert 3 <= len(partial) < 18
    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = rows(out)
    assert len(records) == 18 and len({(r["task_id"], r["seed"]) for r in records}) == 18
    assert records[: len(partial)] == partial


def test_private_rehearsal_under_workers_writes_the_records_of_one_process(ray, tmp_path):
    common = [
        "run",
        "EnvACE/tau2-retail-v0",
        "--split",
        "test",
        "--limit",
        "2",
        "--agent",
        "noisy-oracle",
        "--agent-kwargs",
        "p=0.5",
        "--rehearsal-budget",
        "2",
        "--world-model",
        "oracle",
    ]
    one = cli(*common, "--workers", "1", "--out", str(tmp_path / "one.jsonl"))
    two = cli(*common, "--workers", "2", "--out", str(tmp_path / "two.jsonl"))
    assert without_seconds(one) == without_seconds(two)
    assert all(r["rehearsal_attempts"] > 0 for r in one)


def test_workers_refuse_what_they_cannot_do(ray, tmp_path):
    with pytest.raises(ValueError, match="could not start"):
        list(run_distributed(WorkerSpec(MOCK, f"{AGENTS}:NoSuchAgent"), [("create_task_1", 0)], workers=1))
    assert json.loads(json.dumps(WorkerSpec(MOCK, "oracle").__dict__))["envs_per_worker"] == 1


def test_rollouts_in_ray_actors_make_the_in_process_trainers_updates(ray, tiny, tmp_path):
    import torch

    from envace_gym.training import TrainConfig, Trainer

    def trained(out, workers):
        config = TrainConfig(
            model=f"hf:{tiny}",
            env_id="EnvACE/tau2-mock-gen-v0",
            out=str(out),
            split="train",
            eval_split="test",
            dynamics="rehearsed",
            group_size=2,
            tasks_per_step=2,
            steps=2,
            lr=1e-3,
            max_new_tokens=8,
            max_turns=3,
            eval_every=0,
            save_every=0,
            seed=0,
            tensorboard=False,
            rollout_workers=workers,
        )
        trainer = Trainer(config)
        records = trainer.train()
        return trainer, records

    local, local_records = trained(tmp_path / "local", 0)
    pooled, pooled_records = trained(tmp_path / "pooled", 2)
    keep = ("tasks", "reward", "loss/act", "loss/rehearse", "advantage_mean/act")
    assert [{k: r.get(k) for k in keep} for r in pooled_records] == [{k: r.get(k) for k in keep} for r in local_records]
    for (name, a), b in zip(local.model.state_dict().items(), pooled.model.state_dict().values()):
        assert torch.equal(a, b), name
    pooled.envs.close()
