"""Writing a suite: Suite's defaults, the generic scripted user, world errors, actions_share, and a
user's suite file run from the command line."""

import json
import shutil
from pathlib import Path

import gymnasium as gym
import pytest
from paths import EXAMPLES
from typer.testing import CliRunner

import envace_gym
from envace_gym import Suite, Task, ToolSet, World, agents
from envace_gym.cli import app
from envace_gym.play.loop import run_episode
from envace_gym.rewards import REWARDS

EXAMPLE = EXAMPLES / "my_suite.py"
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add to the counter.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    },
}
BOOM = {"type": "function", "function": {"name": "boom", "description": "Fails.", "parameters": {"type": "object"}}}


class Counter(World):
    def __init__(self):
        self.total = 0

    def add(self, n: int) -> dict:
        self.total += n
        return {"total": self.total}

    def boom(self) -> dict:
        raise RuntimeError("the backend is down")


class CounterSuite(Suite):
    """Only what a suite really has: tasks, tools, a world."""

    name = "counter"
    tasks = [
        Task(
            "two",
            user="Add 1, then 2.",
            gold=[{"name": "add", "arguments": {"n": 1}}, {"name": "add", "arguments": {"n": 2}}],
        ),
        Task("chat", user=["Hi.", "And one more thing.", "Bye."]),
    ]

    def tools(self, task):
        return ToolSet([ADD, BOOM], closed=True)

    def new_world(self, task):
        return Counter()


envace_gym.register_suite("Test/counter-v0", CounterSuite())


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.mark.parametrize("dynamics", envace_gym.DYNAMICS)
def test_a_minimal_suite_runs_under_every_dynamics(dynamics):
    env = gym.make("Test/counter-v0", dynamics=dynamics, simulator="oracle", p_real=0.5)
    assert env.unwrapped.task_ids == ["two", "chat"] and env.unwrapped.split is None
    record = run_episode(env, agents.load("oracle", env=env), "two", seed=0)
    assert record["reward"] == 1.0 and record["ended_by"] == "user_stop", record
    assert record["messages"][0]["content"] == envace_gym.core.suite.DEFAULT_SYSTEM_PROMPT
    assert record["messages"][1] == {"role": "user", "content": "Add 1, then 2."}
    tool_messages = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    assert tool_messages == ['{"total": 1}', '{"total": 3}']  # the oracle rehearses what the world answers


def test_suite_defaults_without_splits_and_the_generic_evaluator():
    suite = CounterSuite()
    with pytest.raises(ValueError, match="counter has no split 'train'; splits: none"):
        suite.task_ids("train")
    with pytest.raises(KeyError, match="counter has no task 'x'"):
        suite.task("x")
    task = suite.task("two")
    assert suite.opening_messages(task) == [] and suite.splits() == []
    assert suite.gold_calls(task)[0] == {"name": "add", "arguments": {"n": 1}, "requestor": "assistant"}
    env = gym.make("Test/counter-v0")  # real dynamics: the world reward is the default evaluator
    env.reset(options={"task_id": "two"})
    env.step(call("add", n=2))
    env.step(call("add", n=1))  # any order
    *_, info = env.step("Done.")
    assert info["reward_source"] == "world" and info["reward_info"]["action"] == 1.0


def test_the_generic_scripted_user_says_the_tasks_messages_then_stops():
    env = gym.make("Test/counter-v0")
    obs, _ = env.reset(options={"task_id": "chat"})
    assert obs["messages"][-1] == {"role": "user", "content": "Hi."}
    obs, *_ = env.step("Hello!")
    assert obs["messages"][-1]["content"] == "And one more thing."
    obs, *_ = env.step("Sure.")
    assert obs["messages"][-1]["content"] == "Bye."
    _, reward, terminated, _, info = env.step("Goodbye.")
    assert terminated and info["ended_by"] == "user_stop" and reward == 1.0  # no gold calls: nothing missed
    with pytest.raises(ValueError, match="needs the task's messages"):
        envace_gym.ScriptedUser("")


def test_a_world_that_raises_answers_execution_error():
    env = gym.make("Test/counter-v0", dynamics="real")
    env.reset(options={"task_id": "two"})
    obs, _, terminated, _, info = env.step(call("boom"))
    assert not terminated and info["tool_calls"][0]["error"] == "execution_error"
    assert "RuntimeError: the backend is down" in json.loads(obs["messages"][-1]["content"])["error"]["message"]
    world = Counter()
    assert world.execute("fork", {}).error.code == "execution_error"  # only tool methods are called
    assert world.fork().total == 0 and world.fork() is not world


def test_actions_share_gives_partial_credit():
    assert "actions_share" in REWARDS
    for reward, expected in (("actions", 0.0), ("actions_share", 0.5)):
        env = gym.make("Test/counter-v0", dynamics="rehearsed", reward=reward)
        env.reset(options={"task_id": "two"})
        env.step(call("add", n=1))
        env.step('{"total": 1}')
        _, r, *_, info = env.step("Done.")
        assert r == expected and info["reward_source"] == reward
    assert info["reward_info"]["action_checks"][1] == {"action": "add", "met": False}  # no gold arguments


def _run(*args):
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("dynamics", envace_gym.DYNAMICS)
def test_the_example_suite_file_runs_from_the_cli(dynamics, tmp_path):
    out = tmp_path / "run.jsonl"
    extra = ["--simulator", "knn"] if dynamics == "simulated" else []
    result = _run("--env", f"{EXAMPLE}:MyOrg/helpdesk-v0", "--dynamics", dynamics, "--out", str(out), *extra)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in records] == ["vpn", "laptop"]
    assert all(r["reward"] == 1.0 and r["env_id"] == "MyOrg/helpdesk-v0" for r in records), result.output
    expected = "world" if dynamics in ("real", "shadow") else "replay"  # run scores every dynamics on the world
    assert {r["reward_source"] for r in records} == {expected}


def test_a_suite_module_by_name_from_the_working_directory(tmp_path, monkeypatch):
    shutil.copy(EXAMPLE, tmp_path / "helpdesk_suite.py")
    monkeypatch.chdir(tmp_path)
    _run("--env", "helpdesk_suite:MyOrg/helpdesk-v0", "--reward", "actions_share", "--out", "run.jsonl")
    assert [json.loads(line)["reward"] for line in Path("run.jsonl").read_text().splitlines()] == [1.0, 1.0]
    result = CliRunner().invoke(app, ["run", "--env", "no_such_suite:X-v0"])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        "error: cannot import 'no_such_suite': ModuleNotFoundError: No module named 'no_such_suite'"
    ]
