"""run --resume: it keeps only the records of the same run, once each, and picks up a killed run's file."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from envace_gym.cli import app
from envace_gym.play.records import rows

MOCK = "EnvACE/tau2-mock-v0"
runner = CliRunner()


def run(out, *args: str, limit: int = 3):
    return runner.invoke(app, ["run", *args, "--limit", str(limit), "--out", str(out), "--resume"])


@pytest.fixture
def done(tmp_path):
    """A whole oracle run of 3 episodes on the mock env."""
    out = tmp_path / "run.jsonl"
    assert run(out, MOCK).exit_code == 0
    return out


@pytest.mark.parametrize(
    "args,setting,values",
    [
        ([MOCK, "--agent", "random"], "agent", ("'oracle'", "'random'")),
        ([MOCK, "--dynamics", "rehearsed"], "dynamics", ("'real'", "'rehearsed'")),
        ([MOCK, "--reward", "actions"], "reward_source", ("'world'", "'actions'")),
        (["EnvACE/tau2-retail-v0", "--split", "base"], "env_id", ("'EnvACE/tau2-mock-v0'", "'EnvACE/tau2-retail-v0'")),
    ],
)
def test_resume_refuses_the_records_of_another_run(done, args, setting, values):
    before = done.read_text()
    result = run(done, *args)
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert f"{done}:1" in line and f"its {setting} is {values[0]}" in line and values[1] in line
    assert "mean reward" not in result.output and done.read_text() == before


def test_resume_refuses_another_split(tmp_path):
    out = tmp_path / "run.jsonl"
    assert run(out, "EnvACE/tau2-retail-v0", "--split", "test", limit=1).exit_code == 0
    result = run(out, "EnvACE/tau2-retail-v0", "--split", "train", limit=1)
    assert result.exit_code == 2 and "its split is 'test'" in " ".join(result.output.split())


def test_resume_refuses_a_file_that_mixes_runs(tmp_path):
    oracle, noisy = tmp_path / "oracle.jsonl", tmp_path / "noisy.jsonl"
    assert run(oracle, MOCK).exit_code == 0
    assert run(noisy, MOCK, "--agent", "noisy-oracle", "--dynamics", "rehearsed").exit_code == 0
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(oracle.read_text() + noisy.read_text())
    result = run(mixed, MOCK)
    assert result.exit_code == 2 and f"{mixed}:4" in result.output and "mean reward" not in result.output


def test_resume_counts_each_episode_once_and_says_how_many_were_done(done):
    first = done.read_text().splitlines()[0]
    done.write_text(done.read_text() + first + "\n")  # a duplicated record
    result = run(done, MOCK)
    assert result.exit_code == 0, result.output
    assert f"3 of 3 episodes already in {done}; playing 0" in " ".join(result.output.split())
    assert "over 3 episodes" in result.output
    result = run(done, MOCK, limit=4)
    assert result.exit_code == 0 and "3 of 4 episodes already" in " ".join(result.output.split())
    assert "over 4 episodes" in result.output


def test_resume_cuts_off_a_record_a_killed_run_left_partial(done):
    lines = done.read_text().splitlines(keepends=True)
    done.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # killed while writing the third
    result = run(done, MOCK)
    assert result.exit_code == 0, result.output
    assert "2 of 3 episodes already" in " ".join(result.output.split())
    records = rows(done)
    assert len(records) == 3 and records[:2] == [json.loads(line) for line in lines[:2]]
    assert (records[2]["task_id"], records[2]["seed"]) == (json.loads(lines[2])["task_id"], 2)


def test_resume_appends_after_a_last_line_without_its_newline(done):
    lines = done.read_text().splitlines()
    done.write_text("\n".join(lines[:2]))  # the second record whole, its newline lost
    result = run(done, MOCK)
    assert result.exit_code == 0, result.output
    assert [r["task_id"] for r in rows(done)] == [json.loads(line)["task_id"] for line in lines]


def test_resume_names_a_corrupted_line_in_the_middle(done):
    lines = done.read_text().splitlines(keepends=True)
    done.write_text(lines[0] + lines[1][:40] + "\n" + lines[2])
    result = run(done, MOCK)
    assert result.exit_code == 2 and f"{done}:2" in result.output and "not JSON" in result.output


@pytest.mark.parametrize(
    "field,value,says",
    [
        ("task_id", ["a"], "task_id is ['a']"),
        ("seed", {"a": 1}, "seed is {'a': 1}"),
        ("reward", None, "reward missing"),
        ("reward", float("nan"), "reward is nan"),
        ("seed", True, "seed is True"),
        ("agent", 3, "agent is 3"),
    ],
)
def test_resume_checks_each_records_fields(done, field, value, says):
    records = rows(done)
    if value is None:
        del records[1][field]
    else:
        records[1][field] = value
    done.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = run(done, MOCK)
    assert result.exit_code == 2, result.output
    assert f"{done}:2: not a run record: {says}" in " ".join(result.output.split())


def test_resume_under_workers_refuses_the_records_of_another_agent(done):
    ray = pytest.importorskip("ray")
    try:  # the workers' agent is known once they play: the first record they send back is checked
        result = run(done, MOCK, "--agent", "random", "--workers", "1", limit=4)
    finally:
        ray.shutdown()
    assert result.exit_code == 2, result.output
    assert "its agent is 'oracle', this run's 'random'" in " ".join(result.output.split())
    assert len(rows(done)) == 3


def test_resume_refuses_other_agent_settings_naming_the_setting(tmp_path):
    out = tmp_path / "run.jsonl"
    noisy = [MOCK, "--agent", "noisy-oracle", "--agent-kwargs", "p=0.5"]
    assert run(out, *noisy, limit=2).exit_code == 0
    assert [r["agent_kwargs"] for r in rows(out)] == [{"p": 0.5}] * 2
    before = out.read_text()
    for other, says in ((["--agent-kwargs", "p=0.9"], "0.9"), ([], "unset")):
        result = run(out, MOCK, "--agent", "noisy-oracle", *other)
        assert result.exit_code == 2, result.output
        assert f"{out}:1: the record of another run: its agent_kwargs p is 0.5, this run's {says}" in " ".join(
            result.output.split()
        )
        assert out.read_text() == before
    assert run(out, *noisy).exit_code == 0 and len(rows(out)) == 3  # the same settings: resumed


def test_records_keep_the_agents_settings_but_not_its_secrets(tmp_path, monkeypatch):
    from paths import SUPPORT

    from envace_gym.play.run import records_file

    monkeypatch.chdir(tmp_path)  # the default records file
    agent = f"{SUPPORT / 'user_agents.py'}:KeyedOracle"
    given = ["--agent-kwargs", "api_key=sk-do-not-keep-1234", "--agent-kwargs", "temperature=0.5"]
    result = runner.invoke(app, ["run", MOCK, "--agent", agent, *given, "--limit", "1"])
    assert result.exit_code == 0, result.output
    (out,) = (tmp_path / "runs").rglob("*.jsonl")
    assert out == tmp_path / records_file(None, MOCK, agent, "real", {"temperature": 0.5})
    others = {records_file(None, MOCK, agent, "real", {"temperature": 0.7}), records_file(None, MOCK, agent, "real")}
    assert out.relative_to(tmp_path) not in others and len(others) == 2
    assert "sk-do-not-keep" not in out.read_text() and rows(out)[0]["agent_kwargs"] == {"temperature": 0.5}
