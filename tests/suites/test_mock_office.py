"""EnvACE/tau2-mock-office-v0: one shared database (a learnable world), and the ``progress`` reward."""

import importlib.util
import json

import gymnasium as gym
import pytest
from helpers import play
from paths import EXAMPLES
from tau2_reference import tau2_reward

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.core.messages import format_tool_call
from envace_gym.suites.tau2.mock_office import SIZES, get_office_suite, office_db, office_tasks

ENV_ID = "EnvACE/tau2-mock-office-v0"
CALLS = [
    ("get_users", {}),
    ("create_task", {"user_id": "user_3", "title": "Write report"}),
    ("update_task_status", {"task_id": "task_2", "status": "completed"}),
    ("update_task_status", {"task_id": "task_13", "status": "completed"}),
    ("create_task", {"user_id": "user_99", "title": "Nobody's"}),
]


def test_splits_are_sized_with_disjoint_instructions():
    suite = get_office_suite()
    assert {s: len(suite.task_ids(s)) for s in SIZES} == SIZES
    instructions = {s: [suite.task(t).data.ticket for t in suite.task_ids(s)] for s in SIZES}
    for split, texts in instructions.items():
        assert len(set(texts)) == len(texts), f"{split} repeats an instruction"
    for a, b in (("train", "test"), ("train", "validation"), ("validation", "test")):
        assert not set(instructions[a]) & set(instructions[b])


def test_the_drawn_tasks_are_kept_and_a_damaged_copy_is_drawn_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVACE_CACHE", str(tmp_path))
    sizes = (("train", 4), ("validation", 2), ("test", 2))
    drawn = office_tasks.__wrapped__(sizes)  # past the process's own cache
    (kept,) = (tmp_path / "mock-office").glob("tasks-*.json")
    written = kept.stat().st_mtime_ns
    assert sorted(drawn) == sorted(f"{split}_{i}" for split, n in sizes for i in range(n))
    assert json.loads(kept.read_text()) == drawn
    assert office_tasks.__wrapped__(sizes) == drawn and kept.stat().st_mtime_ns == written  # read, not drawn
    kept.write_text(kept.read_text()[:100])  # cut mid-file
    assert office_tasks.__wrapped__(sizes) == drawn and json.loads(kept.read_text()) == drawn
    other = office_tasks.__wrapped__((("train", 1), ("validation", 1), ("test", 1)))
    assert len(other) == 3 and len(list((tmp_path / "mock-office").glob("tasks-*.json"))) == 2


def test_every_task_starts_from_the_one_database():
    suite = get_office_suite()
    db = office_db()
    assert 6 <= len(db["users"]) <= 10 and 8 <= len(db["tasks"]) <= 15
    for task_id in ("train_0", "train_2999", "validation_7", "test_0", "test_199"):
        task = suite.task(task_id)
        assert task.data.initial_state.initialization_data.agent_data == db
        world = suite.new_world(task).env.tools.db
        assert {u: world.users[u].model_dump() for u in world.users} == db["users"]
        assert {t: world.tasks[t].model_dump() for t in world.tasks} == db["tasks"]


def test_oracle_solves_every_task():
    for split in SIZES:
        env = gym.make(ENV_ID, split=split, dynamics="real")
        oracle = agents.load("oracle", env=env)
        rewards = [play(env, oracle, task_id)[0] for task_id in env.unwrapped.task_ids]
        assert rewards == [1.0] * SIZES[split], split


def test_rewards_agree_with_tau2_own_evaluator():
    env = gym.make(ENV_ID, split="test", dynamics="real")
    oracle = agents.load("oracle", env=env)
    for task_id in env.unwrapped.task_ids[:30]:
        reward, _, _ = play(env, oracle, task_id)
        assert reward == tau2_reward(env.unwrapped.episode) == 1.0


def responses(env_id: str, task_id: str) -> list[str]:
    env = gym.make(env_id, split=None, dynamics="real")
    env.reset(seed=0, options={"task_id": task_id})
    out = []
    for name, arguments in CALLS:
        obs, *_ = env.step(format_tool_call(name, arguments))
        out.append(obs["messages"][-1]["content"])
    return out


def test_a_response_depends_only_on_the_database_and_earlier_calls():
    seen = [responses(ENV_ID, task_id) for task_id in ("train_0", "train_1234", "validation_5", "test_42")]
    assert all(r == seen[0] for r in seen)
    assert "error" in seen[0][-1]
    # the contrast: mock-gen's database changes per task, so its world cannot be learned
    hidden = [responses("EnvACE/tau2-mock-gen-v0", task_id) for task_id in ("train_0", "train_1")]
    assert hidden[0][0] != hidden[1][0]


class SilentOracle:
    """The gold calls, then a closing that states none of the ids the task asks for."""

    def __init__(self, env):
        self.oracle = agents.load("oracle", env=env)

    def act(self, obs):
        action = self.oracle.act(obs)
        return "All done. ###STOP###" if obs["role"] == "act" and action.startswith("To sum up") else action


@pytest.mark.parametrize("dynamics", ["real", "rehearsed"])
def test_progress_reward_is_one_exactly_when_tau2_is(dynamics):
    env = gym.make(ENV_ID, split="test", dynamics=dynamics, reward="progress")
    real = gym.make(ENV_ID, split="test", dynamics="real")
    oracle = agents.load("oracle", env=env)
    with_items = [
        t for t in env.unwrapped.task_ids if env.unwrapped.suite.communicate_info(env.unwrapped.suite.task(t))
    ][:20]
    assert len(with_items) == 20
    for task_id in env.unwrapped.task_ids[:20] + with_items:
        reward, info, _ = play(env, oracle, task_id)
        assert info["reward_source"] == "progress" and reward == 1.0
    silent, silent_real = SilentOracle(env), SilentOracle(real)
    for task_id in with_items:
        reward, info, _ = play(env, silent, task_id)
        tau2, _, _ = play(real, silent_real, task_id)
        assert tau2 == 0.0 and 0.5 <= reward < 1.0
        assert info["reward_info"]["actions_share"] == 1.0 and info["reward_info"]["communicate_share"] < 1.0


class ExtraCallOracle:
    """The oracle, with one extra write (a task nobody asked for) on its first act turn."""

    def __init__(self, env):
        self.oracle, self.first = agents.load("oracle", env=env), True

    def act(self, obs):
        action = self.oracle.act(obs)
        if obs["role"] == "act" and self.first:
            self.first = False
            return format_tool_call("create_task", {"user_id": "user_4", "title": "An extra task"}) + "\n" + action
        return action


@pytest.mark.parametrize("dynamics", ["real", "rehearsed"])
def test_strict_progress_is_progress_without_extra_calls_and_counts_each_extra_call_against_the_share(dynamics):
    env = gym.make(ENV_ID, split="test", dynamics=dynamics, reward="strict_progress")
    oracle = agents.load("oracle", env=env)
    for task_id in env.unwrapped.task_ids[:10]:
        reward, info, _ = play(env, oracle, task_id)
        assert reward == 1.0 and info["reward_info"]["extra_calls"] == 0
        reward, info, _ = play(env, ExtraCallOracle(env), task_id)
        parts = info["reward_info"]
        gold = len(parts["action_checks"])
        assert parts["extra_calls"] == 1 and parts["strict_share"] == gold / (gold + 1)
        assert parts["actions_share"] == 1.0 and reward < parts["progress"]  # progress alone misses the extra write


def load_study():
    spec = importlib.util.spec_from_file_location("rehearsal_study", EXAMPLES / "rehearsal_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MistitledOracle:
    """The oracle, with every created task's title changed."""

    def __init__(self, env):
        self.oracle = agents.load("oracle", env=env)

    def act(self, obs):
        return self.oracle.act(obs).replace('"title": "', '"title": "Not ')


def test_the_study_names_the_arguments_a_failed_episode_got_wrong():
    missed_arguments = load_study().missed_arguments
    env = gym.make(ENV_ID, split="test", dynamics="real")
    suite = env.unwrapped.suite
    creating = [
        t for t in env.unwrapped.task_ids if [c["name"] for c in suite.gold_calls(suite.task(t))] == ["create_task"]
    ][:2]
    assert creating
    for task_id in creating:
        play(env, agents.load("oracle", env=env), task_id)
        assert missed_arguments(env.unwrapped.episode) == []
        play(env, MistitledOracle(env), task_id)
        assert missed_arguments(env.unwrapped.episode) == ["create_task.title"]
        env.reset(seed=0, options={"task_id": task_id})
        env.step("Done. ###STOP###")
        assert missed_arguments(env.unwrapped.episode) == ["no create_task call"]
