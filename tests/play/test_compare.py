"""Shadow comparisons: the oracle is a perfect world model, knn a partial one."""

import json

import gymnasium as gym
import pandas as pd
import pytest
from typer.testing import CliRunner

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.cli import app
from envace_gym.fidelity import METRICS, fidelity, summarize
from envace_gym.play.compare import compare_calls

TASKS = ["5", "9", "10", "11", "12", "13", "14", "15"]


def _summary(rehearser_name):
    env = gym.make("EnvACE/tau2-retail-v0", split="base")
    actor = agents.load("oracle", env=env)
    rehearser = agents.load(rehearser_name, env=env)
    return summarize(list(compare_calls(env, actor, rehearser, TASKS)))


def test_oracle_rehearser_is_perfect():
    overall = _summary("oracle")["all"]
    assert overall["calls"] > 20
    assert all(overall[m] == 1.0 for m in METRICS)


def test_knn_is_between_nothing_and_perfect():
    overall = _summary("knn")["all"]
    for metric in ("shape", "leaf_match", "exact"):
        assert 0.0 < overall[metric] < 1.0, (metric, overall)


def test_fidelity_measures():
    real = json.dumps({"a": 1, "b": {"c": [1, 2]}})
    assert fidelity(real, real) == {"parsed": True, "shape": 1.0, "leaf_match": 1.0, "error_agree": True, "exact": True}
    partial = fidelity(real, json.dumps({"a": 1, "b": {"c": [1, 3]}, "d": 0}))
    assert partial["shape"] == 3 / 4 and partial["leaf_match"] == 2 / 3 and not partial["exact"]
    broken = fidelity(real, json.dumps({"error": {"code": "malformed_response", "message": "x"}}))
    assert not broken["parsed"] and not broken["error_agree"]


def test_compare_cli_writes_records_summary_and_plot(tmp_path):
    out = tmp_path / "cmp.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "compare",
            "EnvACE/tau2-retail-v0",
            "--agent",
            "knn",
            "--split",
            "base",
            "--task-ids",
            ",".join(TASKS),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_json(out, lines=True)
    assert {"task_id", "tool", "arguments", "real", "rehearsed", *METRICS} <= set(frame.columns)
    assert out.with_suffix(".png").stat().st_size > 10_000
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["all"]["calls"] == len(frame) and "determinism" not in summary
    # the same episodes replayed: the oracle answers each call the same way every time; knn does not (it
    # answers from the real responses it has seen, and a replay has seen more)
    probes = {}
    for agent in ("oracle", "knn"):
        again = CliRunner().invoke(
            app,
            ["compare", "EnvACE/tau2-retail-v0", "--agent", agent, "--split", "base", "--task-ids", ",".join(TASKS)]
            + ["--replays", "3", "--out", str(tmp_path / f"{agent}.jsonl")],
        )
        assert again.exit_code == 0, again.output
        probes[agent] = json.loads((tmp_path / f"{agent}.summary.json").read_text())["determinism"]
    assert probes["oracle"] == {"replays": 3, "calls": len(frame), "exact": 1.0, "leaf": 1.0}
    assert f"determinism over 3 replays of {len(frame)} calls: exact 1.000, leaf 1.000" not in again.output
    assert probes["knn"]["calls"] == len(frame) and 0 < probes["knn"]["exact"] < 1
    refused = CliRunner().invoke(app, ["compare", "EnvACE/tau2-retail-v0", "--replays", "2", "--workers", "2"])
    assert refused.exit_code == 2 and "leave out --workers" in refused.output


def test_comparison_is_a_library_object_as_run_is(tmp_path):
    from envace_gym.play.compare import CompareConfig, Comparison

    config = CompareConfig(
        "EnvACE/tau2-retail-v0", agent="oracle", split="base", task_ids=TASKS[:2], out=tmp_path / "c.jsonl"
    )
    comparison = Comparison(config)
    records = list(comparison)
    summary = comparison.finish()
    comparison.close()
    assert records == comparison.records and not comparison.failures
    assert summary["all"]["calls"] == len(records) > 0 and summary["all"]["exact"] == 1.0
    assert len((tmp_path / "c.jsonl").read_text().splitlines()) == len(records)
    with pytest.raises(ValueError, match="already holds results"):
        Comparison(config)  # the output holds results: refused before any episode
    with pytest.raises(ValueError, match="leave out --workers"):
        CompareConfig("EnvACE/tau2-retail-v0", replays=2, workers=2)


@pytest.mark.slow
def test_determinism_measures_how_rehearsals_of_the_same_calls_vary_across_replays(tiny):
    from envace_gym.play.compare import compare_calls, determinism

    env = gym.make("EnvACE/tau2-mock-office-v0", dynamics="shadow")
    oracle = agents.load("oracle", env=env)
    tasks = env.unwrapped.task_ids[:2]
    same = [list(compare_calls(env, oracle, oracle, tasks)) for _ in range(3)]
    assert determinism(same) == {"replays": 3, "calls": len(same[0]), "exact": 1.0, "leaf": 1.0}
    sampled = agents.load(f"hf:{tiny}", env=env, max_new_tokens=12, temperature=1.0, seed=0)
    varied = [list(compare_calls(env, oracle, sampled, tasks, seed=0)) for _ in range(2)]
    probe = determinism(varied)
    assert probe["calls"] == len(varied[0]) > 0 and probe["exact"] < 1.0  # a random model samples anew
    assert determinism(same[:1])["exact"] is None  # one replay measures nothing
