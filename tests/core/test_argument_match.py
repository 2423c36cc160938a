"""Gold calls match by value, numbers as numbers (``22`` is ``22.0`` where the schema says number), and a check
that fails names the arguments that differed, never their gold values."""

import json

import gymnasium as gym
import pytest

import envace_gym
from envace_gym import Suite, Task, ToolSet, World, agents
from envace_gym.core.episode import recording_key
from envace_gym.core.messages import format_tool_call

SET = {
    "type": "function",
    "function": {
        "name": "set_temperature",
        "description": "Set a room's thermostat.",
        "parameters": {
            "type": "object",
            "properties": {"room": {"type": "string"}, "celsius": {"type": "number"}},
            "required": ["room", "celsius"],
        },
    },
}


class Thermostat(World):
    def __init__(self):
        self.rooms: dict[str, float] = {}

    def set_temperature(self, room: str, celsius: float) -> dict:
        self.rooms[room] = celsius
        return {"room": room, "celsius": celsius}


class ThermostatSuite(Suite):
    name = "thermostat"
    tasks = [
        Task(
            "hall-22",
            user="Set the hall to 22 degrees.",
            gold=[{"name": "set_temperature", "arguments": {"room": "hall", "celsius": 22}}],
        )
    ]

    def tools(self, task):
        return ToolSet([SET], closed=True)

    def new_world(self, task):
        return Thermostat()


envace_gym.register_suite("Test/thermostat-v0", ThermostatSuite())


def floats(value):
    """``value`` with every int a float (bools kept)."""
    if isinstance(value, dict):
        return {k: floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats(v) for v in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class FloatOracle:
    """The oracle's plan played once through, its calls' whole numbers sent as floats (``22.0``), or with
    ``change`` applied; rehearse turns answered by the oracle."""

    def __init__(self, env, change=floats):
        self.env, self.oracle, self.change = env, agents.load("oracle", env=env), change
        self.plan: list = []

    def act(self, obs):
        if obs["role"] == "rehearse":
            return self.oracle.act(obs)
        if len(obs["messages"]) <= 2 + len(self.env.unwrapped.suite.opening_messages(self.env.unwrapped.episode.task)):
            self.plan = self.env.unwrapped.suite.grader.oracle_plan(self.env.unwrapped.episode.task)
        text = self.plan.pop(0) if len(self.plan) > 1 else self.plan[0]
        if "<tool_call>" not in text:
            return text
        call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
        return format_tool_call(call["name"], self.change(call["arguments"]))


def play(env, agent, task_id):
    obs, _ = env.reset(seed=0, options={"task_id": task_id})
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        done = terminated or truncated
    return reward, info


def test_equal_numbers_have_one_recording_key():
    same = recording_key("f", {"at": [1, 2.5], "celsius": 22})
    assert recording_key("f", {"celsius": 22.0, "at": [1.0, 2.5]}) == same
    assert recording_key("f", {"on": True}) != recording_key("f", {"on": 1})


@pytest.mark.parametrize("dynamics, reward", [("real", "world"), ("real", "actions"), ("rehearsed", "actions")])
def test_22_point_0_meets_a_gold_22_and_a_wrong_one_names_its_argument(dynamics, reward):
    env = gym.make("Test/thermostat-v0", dynamics=dynamics, reward=reward)
    value, info = play(env, FloatOracle(env), "hall-22")
    assert value == 1.0 and info["reward_info"]["action_checks"] == [{"action": "set_temperature", "met": True}]
    value, info = play(env, FloatOracle(env, lambda a: {**a, "celsius": 23.5}), "hall-22")
    assert value == 0.0
    assert info["reward_info"]["action_checks"] == [{"action": "set_temperature", "met": False, "unmet": ["celsius"]}]
    assert "22" not in json.dumps(info["reward_info"])  # the names, never the gold values


def test_replay_answers_22_point_0_with_the_gold_22s_response():
    env = gym.make("Test/thermostat-v0", dynamics="replay", reward="actions")
    env.reset(seed=0, options={"task_id": "hall-22"})
    obs, *_, info = env.step(format_tool_call("set_temperature", {"room": "hall", "celsius": 22.0}))
    assert info["tool_calls"][0]["error"] is None and json.loads(obs["messages"][-1]["content"])["celsius"] == 22


@pytest.mark.parametrize("reward", ["world", "actions"])
def test_tau2_keeps_its_verdict_on_floats_and_names_what_differed(reward):
    """Airline task 2 sends a certificate of ``amount`` 50: 50.0 still scores 1 (tau2 compares with ``==``,
    its database holds floats), 40 fails naming ``amount``."""
    env = gym.make("EnvACE/tau2-airline-v0", dynamics="real", reward=reward)
    value, info = play(env, FloatOracle(env), "2")
    assert value == 1.0, info["reward_info"]
    value, info = play(env, FloatOracle(env, lambda a: {**a, "amount": 40} if "amount" in a else a), "2")
    assert value == 0.0
    if reward == "actions":  # the world reward of this task is its database (and what was said)
        checks = info["reward_info"]["action_checks"]
        assert {"action": "send_certificate", "met": False, "unmet": ["amount"]} in checks
