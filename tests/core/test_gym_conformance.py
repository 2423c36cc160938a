"""Gymnasium conformance: pickling, async vector envs, outer time limits, the oracle on vector envs."""

from __future__ import annotations

import json
import pickle

import gymnasium as gym
import pytest
from helpers import play

import envace_gym
from envace_gym import agents
from envace_gym.agents.vector import VectorOracle
from envace_gym.core.messages import ToolCall, format_tool_call
from envace_gym.registration import make_env
from envace_gym.spaces import ActionSpace
from envace_gym.wrappers import ScoreTruncated

MOCK = "EnvACE/tau2-mock-gen-v0"
CREATE = '<tool_call>{"name": "create_task", "arguments": {"user_id": "user_1", "title": "Pickled"}}</tool_call>'


def test_toolset_and_spaces_pickle():
    env = gym.make(MOCK)
    tools = env.unwrapped.tools
    clone = pickle.loads(pickle.dumps(tools))
    for call in (
        ToolCall("c", "create_task", {"user_id": "user_1", "title": "x"}),
        ToolCall("c", "create_task", {"user_id": 3}),
        ToolCall("c", "no_such_tool", {}),
    ):
        assert (clone.check(call) and clone.check(call).content()) == (
            tools.check(call) and tools.check(call).content()
        )
    space = pickle.loads(pickle.dumps(env.action_space))
    assert isinstance(space, ActionSpace) and space == env.action_space and space.sample()
    assert pickle.loads(pickle.dumps(env.observation_space)) == env.observation_space


@pytest.mark.parametrize("env_id", ["EnvACE/tau2-retail-v0", "EnvACE/bfcl-multi-turn-base-v0"])
def test_suites_pickle_by_reference(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    data = pickle.dumps(env)
    assert len(data) < 200_000  # neither the suite's tasks and database nor the world travel
    assert pickle.loads(data).unwrapped.suite is env.unwrapped.suite


def test_env_pickles_mid_episode_and_replays_its_world():
    env = gym.make(MOCK, dynamics="real", task_ids=["test_3"])
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(CREATE)  # changes the world: the copy must hold the new task too
    created = json.loads(obs["messages"][-1]["content"])["task_id"]
    clone = pickle.loads(pickle.dumps(env))
    assert clone.unwrapped.episode.messages == env.unwrapped.episode.messages
    assert clone.unwrapped.episode.world is not env.unwrapped.episode.world
    probe = format_tool_call("update_task_status", {"task_id": created, "status": "completed"})
    a, b = env.step(probe)[0], clone.step(probe)[0]
    assert '"error"' not in b["messages"][-1]["content"]  # a fresh world has no such task
    assert a["messages"][-1] == b["messages"][-1]
    # a rehearsed episode with a pending rehearse turn pickles and plays on to the same end
    env = gym.make(MOCK, dynamics="rehearsed", task_ids=["test_0"])
    oracle = agents.load("oracle", env=env)
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(oracle.act(obs))
    assert obs["role"] == "rehearse"
    clone = pickle.loads(pickle.dumps(env))
    ends = []
    for e in (env, clone):
        o, ag = e.unwrapped.observation(), agents.load("oracle", env=e)
        while True:
            o, r, terminated, truncated, info = e.step(ag.act(o))
            if terminated or truncated:
                ends.append((r, info["reward_source"], len(e.unwrapped.episode.messages)))
                break
    assert ends[0] == ends[1] and ends[0][0] == 1.0


def test_make_vec_async_two_workers_with_the_vector_oracle():
    venv = gym.make_vec(
        MOCK, num_envs=2, vectorization_mode="async", vector_kwargs={"shared_memory": False}, dynamics="rehearsed"
    )
    try:
        oracle = agents.load("oracle", env=venv)
        assert isinstance(oracle, VectorOracle)
        obs, info = venv.reset(seed=0)
        assert [o["role"] for o in obs] == ["act", "act"]
        ended: list[tuple[int, float, str]] = []
        for _ in range(40):
            obs, reward, terminated, truncated, info = venv.step(tuple(oracle.act_batch(obs)))
            ended += [
                (k, float(reward[k]), info["reward_source"][k]) for k in range(2) if terminated[k] or truncated[k]
            ]
            if {k for k, _, _ in ended} == {0, 1}:
                break
        assert {k for k, _, _ in ended} == {0, 1}
        assert all(r == 1.0 and source == "actions" for _, r, source in ended)
        with pytest.raises(ValueError):
            oracle.act_batch(obs[:1])
    finally:
        venv.close()


def test_vector_oracle_on_a_sync_vector_env():
    venv = gym.make_vec(MOCK, num_envs=2, vectorization_mode="sync")
    oracle = agents.load("oracle", env=venv)
    obs, _ = venv.reset(seed=1)
    actions = oracle.act_batch(obs)
    expected = [agents.load("oracle", env=e).act(o) for e, o in zip(venv.envs, obs)]
    assert actions == expected


def test_outer_time_limit_still_scores_the_episode():
    env = gym.make(MOCK, max_episode_steps=2, task_ids=["test_0"])
    assert isinstance(env, ScoreTruncated)
    oracle = agents.load("oracle", env=env)
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(oracle.act(obs))
    assert not truncated and "reward_source" not in info
    obs, reward, terminated, truncated, info = env.step(oracle.act(obs))
    assert truncated and not terminated
    assert info["reward_source"] == "world" and info["ended_by"] == "time_limit"
    assert reward == 0.0 and "reward_info" in info  # scored as the env's own limits score a cut episode
    assert env.unwrapped.episode.truncated and obs["role"] == "act"
    # a time limit that counts rehearse turns too, mid-rehearsal
    env = gym.make(MOCK, dynamics="rehearsed", max_episode_steps=1, task_ids=["test_0"])
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(agents.load("oracle", env=env).act(obs))
    assert truncated and info["reward_source"] == "actions" and obs["role"] == "act"
    # an episode that ends before the limit is the env's own
    env = gym.make(MOCK, max_episode_steps=50, task_ids=["test_0"])
    reward, info, _ = play(env, agents.load("oracle", env=env))
    assert reward == 1.0 and info["ended_by"] == "user_stop"
    # around a hand-made TimeLimit
    env = ScoreTruncated(gym.wrappers.TimeLimit(make_env(envace_gym.ENV_IDS[MOCK], task_ids=["test_0"]), 1))
    obs, _ = env.reset(seed=0)
    *_, truncated, info = env.step("Hello")
    assert truncated and info["reward_source"] == "world"


def test_time_limit_in_async_vector_env():
    venv = gym.make_vec(
        MOCK, num_envs=2, vectorization_mode="async", max_episode_steps=1, vector_kwargs={"shared_memory": False}
    )
    try:
        venv.reset(seed=0)
        _, reward, terminated, truncated, info = venv.step(("Hello", "Hello"))
        assert truncated.all() and list(info["reward_source"]) == ["world", "world"]
        assert list(info["ended_by"]) == ["time_limit", "time_limit"]
    finally:
        venv.close()
