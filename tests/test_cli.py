import json

import pandas as pd
from typer.testing import CliRunner

from envace_gym.cli import app

runner = CliRunner()


def test_list_shows_every_id():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    for domain in ("retail", "airline", "telecom", "mock"):
        assert f"EnvACE/tau2-{domain}-v0" in result.output


def test_run_writes_records_and_a_summary(tmp_path):
    out = tmp_path / "run.jsonl"
    result = runner.invoke(app, ["run", "EnvACE/tau2-airline-v0", "--agent", "oracle", "--dynamics",
                                 "rehearsed", "--task-ids", "0,1", "--task-ids", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_json(out, lines=True)
    assert list(frame.task_id.astype(str)) == ["0", "1", "2"]
    assert {"task_id", "reward", "reward_source", "reward_info", "dynamics", "agent", "turns",
            "tool_calls", "seconds"} <= set(frame.columns)
    assert (frame.reward == 1.0).all() and (frame.reward_source == "actions").all()
    assert "mean reward 1.000" in result.output


def test_run_reports_bad_arguments_clearly():
    result = runner.invoke(app, ["run", "--dynamics", "dreamy"])
    assert result.exit_code == 2 and "unknown dynamics" in result.output
    result = runner.invoke(app, ["run", "--task-ids", "no-such-task"])
    assert result.exit_code == 2 and "no-such-task" in result.output


def test_train_on_a_suite_without_splits(tiny, tmp_path):
    out = tmp_path / "bfcl"
    result = runner.invoke(app, ["train", "--model", f"hf:{tiny}", "--env", "EnvACE/bfcl-simple-python-v0",
                                 "--dynamics", "real", "--split", "all", "--eval-split", "all", "--steps", "1",
                                 "--group-size", "2", "--tasks-per-step", "1", "--max-new-tokens", "8",
                                 "--eval-every", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert record["rows"] == 2 and "eval/reward" in record and (out / "step-1" / "manifest.json").exists()
