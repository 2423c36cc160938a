"""The envace agent loop and the role-wise estimator in verl 0.9.1, in verl's own venv (.venv-verl,
made by `make setup`): tests/verl_loop.py runs there against a server manager backed by the tiny
model and by the oracle's replies, and reports each check as a JSON line."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"


def run_checks(arg: str) -> list[dict]:
    if not VERL_PYTHON.exists():
        pytest.skip(f"no verl venv at {VERL_PYTHON.parent.parent}: `make setup` makes it")
    done = subprocess.run(
        [str(VERL_PYTHON), str(ROOT / "tests" / "verl_loop.py"), arg],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def checks(tiny) -> list[dict]:
    return run_checks(str(tiny))


@pytest.fixture(scope="module")
def batch_checks() -> dict[str, dict]:
    """The estimator on batches with one thing wrong (no model: verl's import is most of it)."""
    return {c["case"]: c for c in run_checks("--batch")}


@pytest.mark.slow
def test_the_loop_gives_the_tokens_masks_and_roles_of_collect_under_real_and_rehearsed_dynamics(checks):
    agreement = [c for c in checks if c["check"] == "agreement"]
    assert len(agreement) == 6
    for c in agreement:
        assert c["ids"] and c["roles"] and c["mask"] and c["logprobs"] and c["prompt_untrained"], c
        assert c["reward"][0] == c["reward"][1] and c["reward_info"] and c["error"] is None, c
    oracle = [c for c in agreement if c["case"].startswith("oracle")]
    assert [c["reward"][0] for c in oracle] == [1.0] * 4
    assert all((c["rehearse_tokens"] > 0) == c["case"].endswith("rehearsed") for c in oracle)


@pytest.mark.slow
def test_a_hostile_or_failing_server_manager_ends_the_episode_with_its_error(checks):
    hostile = {c["case"]: c for c in checks if c["check"] == "hostile"}
    assert set(hostile) == {"raises", "out of vocabulary", "no log-probs", "nan log-prob", "empty"}
    for c in hostile.values():
        assert c["error"] and c["reward"] == 0.0 and c["trained"] == 0, c
    assert "the server went away" in hostile["raises"]["error"]


@pytest.mark.slow
def test_role_wise_advantages_in_verl_equal_the_trainers_and_the_hook_serves_them(checks):
    advantages = [c for c in checks if c["check"] == "advantages"]
    assert [(c["case"], c["same"], c["nonzero"]) for c in advantages] == [("episode", True, True), ("row", True, True)]
    assert [c["same"] for c in checks if c["check"] == "hook"] == [True]


@pytest.mark.parametrize("case", ["nan reward", "inf reward"])
def test_a_non_finite_reward_leaves_its_row_out_as_the_trainer_leaves_out_a_failed_reward(batch_checks, case):
    c = batch_checks[case]
    assert c["error"] is None and c["finite"] and c["left_out"] and c["rest"], c
    assert c["warned"] == ["1 of 4 rows have a non-finite reward: left out (advantage 0)"], c


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("index short", "index has 3 entries for a batch of 4 rows"),
        ("envace_roles short", "envace_roles has 3 entries for a batch of 4 rows"),
        ("envace_generations long", "envace_generations has 5 entries for a batch of 4 rows"),
        ("response_mask short", r"response_mask is Tensor \[3, 4\], token_level_rewards \[4, 4\]"),
        ("index row missing", r"index\[2\] is missing"),
        ("envace_roles row missing", r"envace_roles\[2\] must be a list of role ids, got NoneType"),
        ("envace_generations row missing", r"envace_generations\[2\] must map act and rehearse to counts"),
        ("envace_roles row too long", r"envace_roles\[0\] has 5 roles for 4 response tokens"),
        ("envace_roles row not roles", r"envace_roles\[0\] holds ids that are no role's: \[0, 1, 7\]"),
        ("envace_generations key missing", "needs the envace loop's envace_generations"),
        ("uid key missing", r"needs the batch's group index \(verl's uid\)"),
    ],
)
def test_a_malformed_batch_is_a_value_error_naming_the_field(batch_checks, case, message):
    error = batch_checks[case]["error"]
    assert error and error.startswith("ValueError: ") and re.search(message, error), error


@pytest.mark.slow
def test_the_gpu_recipes_compose_in_verls_own_config_and_their_datasets_load(tmp_path):
    """The recipes need GPUs to run; here their datasets are written (2 tasks a split) and verl's hydra
    composes their configuration (``--cfg job``: every override must name a key verl has)."""
    if not VERL_PYTHON.exists():
        pytest.skip(f"no verl venv at {VERL_PYTHON.parent.parent}: `make setup` makes it")
    for script in ("qwen3_8b_envace.sh", "one_gpu_small.sh"):
        first = (ROOT / "examples" / "verl" / script).read_text().splitlines()[1]
        assert first.startswith("# NEEDS") and "not run by the tests" in first
    env = {**os.environ, "PATH": f"{VERL_PYTHON.parent}{os.pathsep}{os.environ['PATH']}", "LIMIT": "2"}
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "verl" / "one_gpu_small.sh"), "--cfg", "job"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**env, "DATA": str(tmp_path / "data")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "adv_estimator: envace_rolewise" in done.stdout and "default_agent_loop: envace" in done.stdout
    assert "worker_process_setup_hook: envace_gym.integrations.verl.install" in done.stdout
    assert "model:\n" in done.stdout and "Qwen/Qwen3-0.6B" in done.stdout
    rows = subprocess.run(
        [
            str(VERL_PYTHON),
            "-c",
            "import pandas as pd, sys; print(len(pd.read_parquet(sys.argv[1])))",
            str(tmp_path / "data" / "train.parquet"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rows.stdout.strip() == "2", rows.stderr
