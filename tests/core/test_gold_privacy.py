"""Gold answers never reach ``info``: a reward's parts say which checks were met, not what the gold holds,
in process for every suite and over ``serve``; a user's own records keep them only when asked."""

import json

import gymnasium as gym
import pytest
from helpers import play

import envace_gym
from envace_gym import agents
from envace_gym.core.grader import PUBLIC_TEXT, without_gold
from envace_gym.integrations.openenv.client import RemoteEnv
from envace_gym.integrations.openenv.server import EnvServer, serving

VITABENCH = [e for e in envace_gym.ENV_IDS if "vitabench" in e]  # their reward needs a judge


def texts(value, key=None):
    """Every (key, text) inside ``value``."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from texts(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from texts(v, key)


def gold_values(env, task_id) -> list[str]:
    """The gold calls' argument values as text, the ones long enough to be told apart."""
    suite = env.unwrapped.suite
    task = suite.task(task_id)
    if not suite.has_gold(task):
        return []
    values = [v for c in suite.gold_calls(task) for _, v in texts(c["arguments"])]
    return [v for v in values if len(v) >= 6]


@pytest.mark.parametrize("env_id", [e for e in envace_gym.ENV_IDS if e not in VITABENCH])
@pytest.mark.parametrize("dynamics", ["real", "rehearsed"])  # the world reward and the actions reward
def test_no_gold_reaches_info_in_process(env_id, dynamics):
    env = gym.make(env_id, dynamics=dynamics)
    task_id = env.unwrapped.task_ids[0]
    reward, info, _ = play(env, agents.load("oracle", env=env), task_id)
    parts = info["reward_info"]
    assert all(key in PUBLIC_TEXT for key, _ in texts(parts)), parts
    dumped = json.dumps(parts)
    assert not [v for v in gold_values(env, task_id) if json.dumps(v)[1:-1] in dumped]
    if "action_checks" in parts:  # which were met, by name, and how many
        assert all(set(c) <= {"action", "turn", "met"} for c in parts["action_checks"])


def test_a_tau2_summary_stays_private_in_process_and_over_serve():
    env_id = "EnvACE/tau2-airline-v0"
    env = gym.make(env_id, dynamics="rehearsed")
    suite = env.unwrapped.suite
    task_id = next(
        t for t in env.unwrapped.task_ids if "transfer_to_human_agents" in str(suite.gold_calls(suite.task(t)))
    )
    summary = next(c for c in suite.gold_calls(suite.task(task_id)) if c["name"] == "transfer_to_human_agents")
    summary = summary["arguments"]["summary"]
    _, info, _ = play(env, agents.load("oracle", env=env), task_id)
    assert summary not in json.dumps(info["reward_info"])  # (the oracle's own call holds it, in tool_calls)
    _, kept, _ = play(
        gym.make(env_id, dynamics="rehearsed", gold_in_info=True), agents.load("oracle", env=env), task_id
    )
    assert summary in json.dumps(kept["reward_info"])  # the user's own records, when asked
    with serving(EnvServer(env_id, dynamics="rehearsed", gold_in_info=True, max_sessions=1)) as url:
        remote = RemoteEnv(url)
        try:
            _, served, _ = play(remote, agents.load("oracle", env=env), task_id)
        finally:
            remote.close()
    assert served["reward_source"] and summary not in json.dumps(served["reward_info"])  # never over the wire


def test_without_gold_keeps_counts_and_names():
    parts = {
        "action": 0.0,
        "action_checks": [{"action": "book", "arguments": {"id": "X1"}, "met": False}],
        "communicate_checks": [{"info": "$42", "met": True}],
        "db_diff": ["orders.X1.status"],
        "error_type": "multi_turn:instance_state_mismatch",
        "differences": {"balance": [1, 2]},
        "note": None,
    }
    assert without_gold(parts) == {
        "action": 0.0,
        "action_checks": [{"action": "book", "met": False}],
        "communicate_checks": [{"met": True}],
        "error_type": "multi_turn:instance_state_mismatch",
        "note": None,
    }
