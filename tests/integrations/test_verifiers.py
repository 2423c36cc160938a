"""envace_gym.integrations.verifiers in verifiers 0.4.0, in verifiers' own venv (.venv-verifiers, made by
`make setup`): tests/support/verifiers_eval.py runs verifiers' evaluation there on the published example
package (environments/envace_tau2_retail), its model the scripted OpenAI-compatible fake of
tests/support/fakes.py answering with the oracle's actions. Rewards are compared with `envace-gym run`'s
episode loop (run_episode) on the same actions."""

from __future__ import annotations

import json
import os
import subprocess

import gymnasium as gym
import pytest
from fakes import FakeChatServer
from paths import ROOT, SUPPORT
from remote import Recorded

from envace_gym import agents, registration
from envace_gym.integrations.openenv.server import EnvServer, serving
from envace_gym.play.loop import run_episode

VF_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
PACKAGE = ROOT / "environments" / "envace_tau2_retail"  # the taskset id envace-tau2-retail
MOCK = "EnvACE/tau2-mock-v0"
TOKEN = "verifiers-test-token"


def evaluate(job: dict) -> subprocess.CompletedProcess:
    if not VF_PYTHON.exists():
        pytest.skip(f"no verifiers venv at {VF_PYTHON.parent.parent}: `make setup` makes it")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE), "ENVACE_FAKE_KEY": "unused"}
    return subprocess.run(
        [str(VF_PYTHON), str(SUPPORT / "verifiers_eval.py")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )


def episodes(job: dict) -> list[dict]:
    done = evaluate(job)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


def oracle_episode(env_id: str, dynamics: str, task_id: str, seed: int) -> tuple[list[str], list[str], dict]:
    """The oracle's actions on one episode and the role of each turn, and envace-gym run's record of the
    same actions played again."""
    env = gym.make(env_id, dynamics=dynamics)
    oracle = agents.load("oracle", env=env)
    obs, _ = env.reset(seed=seed, options={"task_id": task_id})
    actions, roles, done = [], [], False
    while not done:
        roles.append(obs["role"])
        actions.append(oracle.act(obs))
        obs, _, terminated, truncated, _ = env.step(actions[-1])
        done = terminated or truncated
    assert all(isinstance(a, str) for a in actions)
    record = run_episode(gym.make(env_id, dynamics=dynamics), Recorded(actions), task_id, seed)
    return actions, roles, record


@pytest.mark.slow
@pytest.mark.parametrize("dynamics", ["real", "rehearsed"])
def test_a_verifiers_evaluation_scores_the_oracles_actions_as_envace_gym_run_does(server, dynamics):
    url, _ = server
    task_ids = registration.suite(MOCK).task_ids[:2]
    expected = [oracle_episode(MOCK, dynamics, t, seed) for seed, t in enumerate(task_ids)]
    FakeChatServer.replies = [{"role": "assistant", "content": a} for actions, _, _ in expected for a in actions]
    job = {"model_url": url, "taskset": {"id": "envace-tau2-retail", "env_id": MOCK, "dynamics": dynamics}, "limit": 2}
    got = episodes(job)
    assert FakeChatServer.replies == []  # every scripted reply was asked for
    assert [g["task"] for g in got] == task_ids
    for g, (actions, roles, record) in zip(got, expected):
        assert g["errors"] == [], g
        assert g["rewards"] == {"envace_reward": record["reward"]} and record["reward"] == 1.0
        assert g["info"]["envace"]["reward_info"] == record["reward_info"]
        assert g["info"]["envace_roles"] == roles and g["sampled"] == len(actions)
        assert g["metrics"]["rehearse_turns"] == roles.count("rehearse")
    assert ("rehearse" in expected[0][1]) == (dynamics == "rehearsed")
    # one conversation an episode: each request extends the one before by its reply and the env's turn
    requests = FakeChatServer.requests
    first = requests[0]["messages"]
    assert first[0]["role"] == "system" and "<tools>" in first[0]["content"]
    for before, after in zip(requests, requests[1 : len(expected[0][0])]):
        assert after["messages"][: len(before["messages"])] == before["messages"]
        assert after["messages"][len(before["messages"])]["role"] == "assistant"
    rehearse = [r["messages"][-1]["content"] for r in requests if "## Call to answer" in r["messages"][-1]["content"]]
    assert len(rehearse) == sum(roles.count("rehearse") for _, roles, _ in expected)


@pytest.mark.slow
def test_an_episode_that_a_verifiers_turn_limit_ends_is_scored_as_truncated(server):
    url, _ = server
    task_id = registration.suite(MOCK).task_ids[0]
    actions, _, _ = oracle_episode(MOCK, "real", task_id, 0)
    env = gym.make(MOCK, dynamics="real")
    env.reset(seed=0, options={"task_id": task_id})
    env.step(actions[0])
    reward, info = env.unwrapped.finish()
    FakeChatServer.replies = [{"role": "assistant", "content": actions[0]}]
    job = {"model_url": url, "taskset": {"id": "envace-tau2-retail", "env_id": MOCK}, "limit": 1}
    (got,) = episodes({**job, "env": {"agent": {"max_turns": 1}}})
    assert got["errors"] == [] and got["sampled"] == 1 and len(actions) > 1
    assert got["info"]["envace"]["ended_by"] == "time_limit"
    assert got["rewards"] == {"envace_reward": reward} and got["info"]["envace"]["reward_info"] == info["reward_info"]


@pytest.mark.slow
def test_a_bad_taskset_config_is_refused_naming_the_field():
    done = evaluate({"model_url": "http://127.0.0.1:9", "taskset": {"id": "envace-tau2-retail", "dynamics": "nope"}})
    assert done.returncode != 0 and "unknown dynamics 'nope'" in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_verifiers_own_openenv_taskset_plays_envace_gym_serve_with_its_token(server):
    url, _ = server
    task_ids = registration.suite(MOCK).task_ids[:2]
    expected = [oracle_episode(MOCK, "real", t, seed) for seed, t in enumerate(task_ids)]
    FakeChatServer.replies = [
        {"role": "assistant", "content": json.dumps({"text": a})} for actions, _, _ in expected for a in actions
    ]
    with serving(EnvServer(MOCK, max_sessions=2, token=TOKEN)) as served:
        resets = [{"seed": seed, "task_id": t} for seed, t in enumerate(task_ids)]
        got = episodes({"model_url": url, "openenv": served, "token": TOKEN, "resets": resets})
    assert FakeChatServer.replies == []
    for g, (_, _, record) in zip(got, expected):
        assert g["errors"] == [], g
        assert g["rewards"] == {"openenv_reward": record["reward"]}
