"""Every number a config or a checkpoint sets is finite and in its range, refused in one line naming it."""

import json
import math
from dataclasses import fields

import pytest
from typer.testing import CliRunner

from envace_gym.agents.hf import MAX_PLAY_TURNS, HFAgent, play_settings
from envace_gym.cli import app
from envace_gym.config_fields import numeric_fields
from envace_gym.evaluation.evaluate import EvalConfig
from envace_gym.play.run import RunConfig
from envace_gym.training import SFTConfig, TrainConfig

REQUIRED = {
    TrainConfig: {"model": "hf:x", "env_id": "EnvACE/tau2-mock-v0"},
    SFTConfig: {"model": "hf:x", "env_id": "EnvACE/tau2-mock-v0"},
    RunConfig: {"env_id": "EnvACE/tau2-mock-v0"},
    EvalConfig: {},
}
NUMBERS = [(cls, name) for cls in REQUIRED for name in numeric_fields(cls)]


@pytest.mark.parametrize("cls, name", NUMBERS, ids=[f"{cls.__name__}.{name}" for cls, name in NUMBERS])
def test_every_numeric_setting_refuses_nan_infinity_and_a_value_far_out_of_range(cls, name):
    assert {f.name for f in fields(cls)} >= set(numeric_fields(cls))
    cls(**REQUIRED[cls])  # the defaults are in range
    for value in (math.nan, math.inf, -math.inf, -(10**9), "3"):
        with pytest.raises(ValueError, match=f"^--{name.replace('_', '-')} must be "):
            cls(**REQUIRED[cls], **{name: value})


@pytest.mark.parametrize(
    "cls, name, value, says",
    [
        (TrainConfig, "kl_coef", math.nan, "a finite number"),
        (TrainConfig, "temperature", 0.0, "above 0"),
        (TrainConfig, "world_model_coef", math.nan, "a finite number"),
        (TrainConfig, "max_new_tokens", -5, "at least 1"),
        (TrainConfig, "steps", 2.5, "a whole number"),
        (TrainConfig, "lr", 0, "above 0"),
        (SFTConfig, "max_episodes", -1, "at least 1"),
        (RunConfig, "max_turns", 0, "at least 1"),
        (RunConfig, "p_real", 1.5, "between 0 and 1"),
        (RunConfig, "seed", 2**32, "between 0 and 4294967295"),
        (EvalConfig, "max_turns", -3, "at least 1"),
    ],
)
def test_non_finite_settings_and_limits_below_1_are_refused_naming_the_option(cls, name, value, says):
    with pytest.raises(ValueError, match=f"^--{name.replace('_', '-')} must be {says}, got "):
        cls(**REQUIRED[cls], **{name: value})


@pytest.mark.parametrize(
    "args, says",
    [
        (["train", "--model", "hf:x", "--kl-coef", "nan"], "--kl-coef must be a finite number, got nan"),
        (["train", "--model", "hf:x", "--temperature", "nan"], "--temperature must be a finite number, got nan"),
        (["sft", "--model", "hf:x", "--lr", "inf"], "--lr must be a finite number, got inf"),
        (["run", "EnvACE/tau2-mock-v0", "--max-turns", "0"], "--max-turns must be at least 1, got 0"),
        (["eval", "--max-turns", "-3"], "--max-turns must be at least 1, got -3"),
    ],
)
def test_the_cli_refuses_them_in_one_line_with_exit_code_2(tmp_path, args, says):
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {says}"


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"max_new_tokens": -5}, "max_new_tokens must be at least 1"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be a whole number"),
        ({"temperature": math.nan}, "temperature must be a finite number"),
        ({"top_p": 0.0}, "top_p must be above 0 and at most 1"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
    ],
)
def test_the_hf_agent_refuses_its_settings_out_of_range_before_loading(tmp_path, kwargs, says):
    with pytest.raises(ValueError, match=says):
        HFAgent(tmp_path / "no-model", **kwargs)


def test_a_checkpoints_play_settings_are_bounded_by_the_context_and_the_turn_cap(tmp_path):
    huge = 2**31 - 1
    (tmp_path / "envace.json").write_text(json.dumps({"env_id": "E", "max_turns": huge, "max_new_tokens": huge}))
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    assert play_settings(tmp_path) == {"env_id": "E", "max_turns": MAX_PLAY_TURNS, "max_new_tokens": 512}
    (tmp_path / "config.json").write_text("[]")  # no context length known: the documented cap
    assert play_settings(tmp_path)["max_new_tokens"] == 32_768
    (tmp_path / "envace.json").write_text(json.dumps({"max_turns": 5, "max_new_tokens": 64}))
    assert play_settings(tmp_path) == {"max_turns": 5, "max_new_tokens": 64}
