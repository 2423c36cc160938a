"""The command line built from the config dataclasses (one source for each default and help), `run` as a
library (`envace_gym.play.run.Run`), and the user-path fixes: train's --ray-address help, compare --limit,
run's reward names, long runs summarised, held-out loss and eval reward printed."""

import json
import types
from dataclasses import fields

import pytest
import typer
from typer.testing import CliRunner

import envace_gym.training.trainer
from envace_gym.cli import app, build_app
from envace_gym.play.run import Run, RunConfig
from envace_gym.rewards import REWARDS
from envace_gym.training import SFTConfig, TrainConfig

MOCK = "EnvACE/tau2-mock-v0"  # 9 short tasks in its one split, "base"
runner = CliRunner()


def _params(application, command: str) -> dict:
    return {p.name: p for p in typer.main.get_command(application).commands[command].params}


def _help(application, command: str) -> str:
    result = runner.invoke(application, [command, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize("config, command", [(TrainConfig, "train"), (SFTConfig, "sft")])
def test_every_config_field_is_an_option(config, command):
    assert {f.name for f in fields(config)} <= set(_params(app, command))


@pytest.mark.parametrize("config, command, name", [(TrainConfig, "train", "group_size"), (SFTConfig, "sft", "batch")])
def test_a_config_fields_default_and_help_are_its_options(monkeypatch, config, command, name):
    field = {f.name: f for f in fields(config)}[name]
    assert f"[default: {field.default}]" in _help(build_app(), command)
    monkeypatch.setattr(field, "default", 77)
    monkeypatch.setattr(field, "metadata", types.MappingProxyType({"help": "A help written in the config."}))
    text = _help(build_app(), command)
    assert "A help written in the config. [default: 77]" in text


def test_options_that_are_not_their_fields_become_the_fields_values(monkeypatch):
    """'all' is every task (None), roles are comma-separated, dicts are KEY=VALUE options, --env resolves."""
    made = []

    class Captured(Exception):
        pass

    def capture(config):
        made.append(config)
        raise Captured

    monkeypatch.setattr(envace_gym.training.trainer, "Trainer", capture)
    with pytest.raises(Captured):
        runner.invoke(
            app,
            [
                "train",
                "--model",
                "hf:x",
                "--env",
                MOCK,
                "--split",
                "base",
                "--eval-split",
                "all",
                "--roles",
                "act",
                "--env-kwargs",
                "user=scripted",
                "--env-kwargs",
                "max_retries=2",
            ],
            catch_exceptions=False,
        )
    (config,) = made
    given = {
        "model": "hf:x",
        "env_id": MOCK,
        "split": "base",
        "eval_split": None,
        "roles": ["act"],
        "env_kwargs": {"user": "scripted", "max_retries": 2},
    }
    assert config == TrainConfig(**given)  # every other field at its default


def test_run_is_a_library_that_writes_each_record_it_yields(tmp_path):
    out = tmp_path / "run.jsonl"
    run = Run(RunConfig(MOCK, limit=2, repeats=2, out=str(out)))
    assert run.todo == run.episodes and len(run.episodes) == 4
    records = list(run)
    assert [(r["task_id"], r["seed"]) for r in records] == run.episodes
    assert [json.loads(line) for line in out.read_text().splitlines()] == records
    resumed = Run(RunConfig(MOCK, limit=3, repeats=2, out=str(out), resume=True))
    assert resumed.earlier == records and resumed.todo == resumed.episodes[4:]
    with pytest.raises(ValueError, match="--limit must be at least 1"):
        RunConfig(MOCK, limit=0)


def test_trains_ray_address_help_names_rollout_workers():
    assert _params(app, "train")["ray_address"].help.startswith("With --rollout-workers:")
    assert _params(app, "run")["ray_address"].help.startswith("With --workers:")


def test_run_help_names_every_registered_reward():
    text = _params(app, "run")["reward"].help
    assert all(name in text for name in REWARDS) and "judge:MODEL@BASE_URL" in text


def test_compare_limit_takes_the_first_tasks(tmp_path):
    out = tmp_path / "calls.jsonl"
    result = runner.invoke(app, ["compare", MOCK, "--agent", "oracle", "--limit", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    import gymnasium as gym

    first = gym.make(MOCK).unwrapped.task_ids[:2]
    assert {json.loads(line)["task_id"] for line in out.read_text().splitlines()} == set(first)
    result = runner.invoke(app, ["compare", MOCK, "--limit", "0"])
    assert result.exit_code == 2 and "--limit must be at least 1" in result.output


def test_a_long_run_prints_a_summary_by_how_episodes_ended(tmp_path):
    out = tmp_path / "run.jsonl"
    result = runner.invoke(app, ["run", MOCK, "--repeats", "6", "--out", str(out)])  # 54 episodes
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 54 and "54 episodes by how they ended" in text
    for ended_by in {r["ended_by"] for r in records}:
        rewards = [r["reward"] for r in records if r["ended_by"] == ended_by]
        assert f"{ended_by} {len(rewards)} {sum(rewards) / len(rewards):.3f}" in text
    assert "update_task_1" not in text  # no row per episode


def train_tiny(tiny, out, *options: str):
    """One `train` step of the tiny model on the mock env: 2 episodes of at most 2 turns of 8 tokens."""
    return runner.invoke(
        app,
        [
            "train",
            "--model",
            f"hf:{tiny}",
            "--env",
            MOCK,
            "--split",
            "base",
            "--eval-split",
            "base",
            "--steps",
            "1",
            "--group-size",
            "2",
            "--tasks-per-step",
            "1",
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--no-tensorboard",
            "--out",
            str(out),
            *options,
        ],
    )


def test_sft_prints_its_held_out_loss_and_train_its_eval_reward(tiny, tmp_path):
    result = runner.invoke(
        app,
        [
            "sft",
            "--model",
            f"hf:{tiny}",
            "--env",
            MOCK,
            "--split",
            "base",
            "--eval-split",
            "base",
            "--steps",
            "2",
            "--max-episodes",
            "2",
            "--eval-every",
            "2",
            "--eval-tasks",
            "1",
            "--no-tensorboard",
            "--out",
            str(tmp_path / "sft"),
        ],
    )
    assert result.exit_code == 0, result.output
    steps = [line for line in result.output.splitlines() if line.startswith("step ")]
    assert "held-out" not in steps[0] and "held-out loss act" in steps[1]
    result = train_tiny(tiny, tmp_path / "train", "--eval-every", "1", "--eval-tasks", "1")
    assert result.exit_code == 0, result.output
    assert "step 1: reward (" in result.output and "eval reward" in result.output  # the reward it trains on, named


def test_the_command_train_prints_plays_its_checkpoint_as_trained_and_shows_its_turns(tiny, tmp_path):
    result = train_tiny(tiny, tmp_path / "train", "--eval-every", "0")
    assert result.exit_code == 0, result.output
    printed = next(line for line in result.output.splitlines() if line.startswith("play it: "))
    command = printed.removeprefix("play it: envace-gym ").split()
    assert command[:2] == ["run", MOCK] and command[2] == "--agent"
    from envace_gym.agents.hf import HFAgent

    assert HFAgent(command[3].removeprefix("hf:")).sampling["max_new_tokens"] == 8  # as it was trained
    out = tmp_path / "play.jsonl"
    played = runner.invoke(app, [*command, "--limit", "2", "--out", str(out)])
    assert played.exit_code in (0, 1), played.output  # a tiny random model may fail its episodes; it must finish
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 and all(r["turns"] <= 2 for r in records)  # the turn limit it was trained with


def test_a_user_spec_with_a_judges_option_is_refused_in_one_line():
    from envace_gym.env_settings import user_option

    assert user_option("llm:m@http://h:1/v1?timeout=5")["user_kwargs"]["timeout"] == 5
    with pytest.raises(ValueError, match="a user takes timeout and max_retries"):
        user_option("llm:m@http://h:1/v1?max_reply_bytes=9")


def test_trains_env_is_resolved_as_runs_and_refuses_what_its_dynamics_does_not_use():
    from envace_gym.env_settings import EnvSettings

    config = TrainConfig(model="hf:x", env_id="EnvACE/tau2-mock-gen-v0", dynamics="mixed", p_real=0.25)
    resolved = config.env_settings().resolve(purpose="train", budget=3)
    assert resolved.reward == "strict_progress" and resolved.router is None  # gold everywhere; mixed routes nothing
    assert resolved.make_kwargs["p_real"] == 0.25 and resolved.make_kwargs["split"] == "train"
    held_out = config.env_settings(held_out=True).resolve(per_episode=True)
    assert held_out.make_kwargs["dynamics"] == "real" and "p_real" not in held_out.make_kwargs
    assert "reward" not in held_out.make_kwargs  # each held-out episode its own default
    adaptive = TrainConfig(model="hf:x", env_id="EnvACE/tau2-mock-gen-v0", dynamics="adaptive", real_call_budget=3)
    assert adaptive.env_settings().resolve(purpose="train", budget=3).router.budget == 3
    with pytest.raises(ValueError, match="p_real.*mixed"):
        TrainConfig(model="hf:x", env_id="EnvACE/tau2-mock-gen-v0", p_real=0.5)  # rehearsed takes no p_real
    with pytest.raises(ValueError, match="MODEL@BASE_URL.*no-at-sign"):
        TrainConfig(model="hf:x", env_id="EnvACE/tau2-mock-gen-v0", judge="no-at-sign")
    # split None (the command line's 'all') is every task, as gym.make(split=None) takes it
    every = TrainConfig(model="hf:x", env_id="EnvACE/bfcl-simple-python-v0", split=None).env_settings()
    assert every.resolve(purpose="train").make_kwargs["split"] is None
    assert EnvSettings("EnvACE/bfcl-simple-python-v0", split="all").resolve().make_kwargs["split"] is None
