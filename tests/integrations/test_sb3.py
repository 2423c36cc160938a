"""The stable-baselines3 bridge: Discrete candidate actions, a numeric observation, rehearsal inside."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.integrations.sb3 import CandidateEnv, Conversation, default_candidates
from envace_gym.integrations.sb3.candidates import _parse

sb3 = pytest.importorskip("stable_baselines3")
MOCK = "EnvACE/tau2-mock-gen-v0"


def make(dynamics="real", world_model=None, **kwargs):
    return CandidateEnv(gym.make(MOCK, split="test", dynamics=dynamics, max_turns=6, **kwargs), world_model=world_model)


@pytest.mark.parametrize("dynamics,world_model", [("real", None), ("rehearsed", "oracle"), ("rehearsed", "knn")])
def test_passes_sb3_check_env(dynamics, world_model):
    from stable_baselines3.common.env_checker import check_env

    env = make(dynamics, world_model)
    check_env(env, warn=True)
    assert isinstance(env.action_space, gym.spaces.Discrete)
    assert isinstance(env.observation_space, gym.spaces.Box) and env.observation_space.dtype == np.float32


def test_candidates_come_from_the_conversation():
    env = gym.make(MOCK, split="test", task_ids=["test_1"])
    obs, _ = env.reset(seed=0)
    text = obs["messages"][-1]["content"]
    assert "'Check backups' for user_1" in text
    candidates = default_candidates(obs)
    assert candidates[1].endswith("###STOP###") and _parse(candidates[0]) is None
    calls = [_parse(c) for c in candidates[2:]]
    assert ("create_task", {"user_id": "user_1", "title": "Check backups"}) in calls
    assert all(name in env.unwrapped.tools for name, _ in calls)
    # ids go to arguments named like them: no task id fills a user_id
    assert all(not a.get("user_id", "user").startswith("task") for _, a in calls)
    # the best-ranked call uses values the user gave, each with its own argument's name
    assert Conversation(obs).relevance(calls[0][1])[0] == 1.0


def test_gold_choices_solve_tasks_and_rehearsals_stay_inside_the_step():
    for dynamics, world_model in (("real", None), ("rehearsed", "oracle")):
        env = make(dynamics, world_model, task_ids=["test_1", "test_2", "test_4"])
        oracle = agents.load("oracle", env=env.env)
        for task_id in ("test_1", "test_2", "test_4"):
            obs, info = env.reset(options={"task_id": task_id})
            done = False
            while not done:
                gold = oracle.act(env.env.unwrapped.observation())
                call = _parse(gold)
                index = [_parse(c) for c in env.candidates].index(call) if call else 1 if "###STOP###" in gold else 0
                obs, reward, terminated, truncated, info = env.step(index)
                assert env.observation_space.contains(obs)
                assert all(c["source"] == ("real" if dynamics == "real" else "rehearsed") for c in info["tool_calls"])
                done = terminated or truncated
            assert reward == 1.0, (dynamics, task_id, info)
            assert info["reward_source"] == ("world" if dynamics == "real" else "actions")


def test_index_wraps_and_masks():
    env = make()
    env.reset(seed=0)
    candidates = list(env.candidates)
    n = len(candidates)
    assert env.action_masks().sum() == n and not env.action_masks()[n:].any()
    _, reward, terminated, _, info = env.step(n + 1)  # wraps to candidate 1, the final reply
    assert info["action_text"] == candidates[1] and "###STOP###" in info["action_text"]
    assert terminated and info["ended_by"] == "user_stop" and info["reward_source"] == "world"


@pytest.mark.parametrize("action", [float("nan"), float("inf"), None, [0], 1.0, True, -1, 32, 10**30, np.array([0, 1])])
def test_actions_outside_the_space_are_refused(action):
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not in the action space"):
        env.step(action)
    env.step(np.int64(0))  # the env goes on; an integer numpy scalar (what SB3 sends) is an action


def test_rehearsed_dynamics_need_a_world_model():
    env = make("rehearsed")
    env.reset(seed=0)
    tool_slot = next(i for i, c in enumerate(env.candidates) if _parse(c))
    with pytest.raises(ValueError, match="world_model"):
        env.step(tool_slot)


def test_tiny_ppo_learns_through_the_bridge():
    import torch
    from stable_baselines3 import PPO

    from envace_gym.integrations.sb3 import CandidatePolicy

    torch.set_num_threads(1)
    env = CandidateEnv(
        gym.make(MOCK, split="train", dynamics="rehearsed", reward="replay", max_turns=4), world_model="oracle"
    )
    model = PPO(
        CandidatePolicy,
        env,
        n_steps=128,
        batch_size=64,
        n_epochs=2,
        seed=0,
        policy_kwargs={"n_candidates": env.max_candidates},
    )
    model.learn(256)
    assert model.num_timesteps >= 256
    real = make()  # scored in the real world
    obs, _ = real.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert 0 <= int(action) < real.max_candidates and real.action_masks()[int(action)]
    # a plain MlpPolicy works on the same spaces
    PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0).learn(64)
