"""The BFCL v4 suites against bfcl-eval's own checkers, on its real backends and data."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from bfcl_reference import multi_turn_verdict, single_turn_verdict
from helpers import play

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.core.messages import format_tool_call
from envace_gym.suites.bfcl import get_suite, multi_turn, single_turn
from envace_gym.suites.bfcl.multi_turn import CANNOT, DONE, state_differences


def env_id(category: str) -> str:
    return f"EnvACE/bfcl-{category.replace('_', '-')}-v0"


class Script:
    """Plays a fixed list of act actions."""

    def __init__(self, actions):
        self.actions = list(actions)

    def act(self, obs):
        return self.actions.pop(0) if self.actions else DONE


def plan_of(turns) -> list[str]:
    plan = []
    for calls in turns:
        if calls:
            plan += ["\n".join(format_tool_call(n, a) for n, a in calls), DONE]
        else:
            plan.append(CANNOT)
    return plan


def changed(value, rng):
    """A different value of the same JSON type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.5
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return value


def perturbations(task, tools, rng):
    """(kind, turns of (name, arguments)) with the last call of a turn dropped, one argument
    changed, or an extra state-changing call."""
    gold = [[(c.name, copy.deepcopy(c.arguments)) for c in turn] for turn in task.data.gold]
    filled = [i for i, t in enumerate(gold) if t]
    out = []
    dropped = copy.deepcopy(gold)
    dropped[filled[int(rng.integers(len(filled)))]].pop()
    out.append(("dropped", dropped))
    with_args = [(i, j) for i in filled for j, (_, a) in enumerate(gold[i]) if a]
    if with_args:
        i, j = with_args[int(rng.integers(len(with_args)))]
        edited = copy.deepcopy(gold)
        name, arguments = edited[i][j]
        key = sorted(arguments)[int(rng.integers(len(arguments)))]
        arguments[key] = changed(arguments[key], rng)
        out.append(("changed", edited))
    writes = [c for t in gold for c in t if c[0] in STATE_CHANGING]
    extra = copy.deepcopy(gold)
    turn = filled[int(rng.integers(len(filled)))]
    if writes:
        extra[turn].append(copy.deepcopy(writes[int(rng.integers(len(writes)))]))
    else:
        names = [n for n in tools.names if n in STATE_CHANGING] or tools.names
        name = names[int(rng.integers(len(names)))]
        extra[turn].append((name, tools.sample_arguments(name, rng)))
    out.append(("extra", extra))
    return out


STATE_CHANGING = {
    "mkdir",
    "touch",
    "echo",
    "mv",
    "cp",
    "rm",
    "rmdir",
    "cd",
    "post_tweet",
    "retweet",
    "comment",
    "mention",
    "follow_user",
    "unfollow_user",
    "send_message",
    "delete_message",
    "add_contact",
    "create_ticket",
    "close_ticket",
    "resolve_ticket",
    "edit_ticket",
    "place_order",
    "cancel_order",
    "fund_account",
    "withdraw_funds",
    "add_to_watchlist",
    "remove_stock_from_watchlist",
    "book_flight",
    "cancel_booking",
    "set_budget_limit",
    "register_credit_card",
    "purchase_insurance",
    "startEngine",
    "fillFuelTank",
    "lockDoors",
    "adjustClimateControl",
    "setCruiseControl",
    "activateParkingBrake",
    "pressBrakePedal",
    "releaseBrakePedal",
    "setHeadlights",
    "set_navigation",
}


@pytest.mark.parametrize("category", multi_turn.CATEGORIES)
@pytest.mark.slow
def test_oracle_passes_every_multi_turn_entry(category):
    env = gym.make(env_id(category))
    oracle = agents.load("oracle", env=env)
    rewards = {}
    for task_id in env.unwrapped.task_ids:
        reward, info, _ = play(env, oracle, task_id=task_id)
        rewards[task_id] = reward
        assert info["reward_source"] == "world" and info["ended_by"] == "user_stop"
    assert len(rewards) == 200 and sum(rewards.values()) == 200, [t for t, r in rewards.items() if r < 1]


@pytest.mark.parametrize(
    "category",
    [  # miss_func's sweep alone takes about 20 s
        pytest.param(c, marks=pytest.mark.slow) if c == "multi_turn_miss_func" else c for c in multi_turn.CATEGORIES
    ],
)
def test_perturbed_trajectories_agree_with_bfcl_checker(category):
    """Every entry, three perturbations each: envace-gym's verdict (and its failure type) is
    bfcl-eval's."""
    env = gym.make(env_id(category))
    suite = env.unwrapped.suite
    rng = np.random.default_rng(0)
    tried, failed, disagreements = 0, 0, []
    for task_id in suite.task_ids(None):
        task = suite.task(task_id)
        for kind, turns in perturbations(task, suite.tools(task, 99), rng):
            reward, info, _ = play(env, Script(plan_of(turns)), task_id=task_id)
            reference = multi_turn_verdict(category, env.unwrapped.episode)
            tried += 1
            failed += reward == 0.0
            if reward != float(reference["valid"]) or (
                reward == 0.0 and info["reward_info"].get("error_type") != reference.get("error_type")
            ):
                disagreements.append((task_id, kind, info["reward_info"], reference.get("error_type")))
    assert tried >= 600 and not disagreements, disagreements[:5]
    assert failed > tried / 2  # the perturbations do break most trajectories


@pytest.mark.parametrize("category", single_turn.CATEGORIES)
@pytest.mark.slow
def test_single_turn_oracle_at_bfcl_rate(category):
    """The oracle's reward on every entry is bfcl-eval's verdict on the same answer, and so is
    a perturbed answer's (one argument changed)."""
    env = gym.make(env_id(category))
    oracle = agents.load("oracle", env=env)
    suite = env.unwrapped.suite
    rng = np.random.default_rng(0)
    passed, disagreements = 0, []
    for task_id in env.unwrapped.task_ids:
        reward, info, _ = play(env, oracle, task_id=task_id)
        assert info["ended_by"] == "answered"
        passed += reward
        if reward != single_turn_verdict(category, env.unwrapped.episode):
            disagreements.append((task_id, "gold", info["reward_info"]))
        calls = suite.gold_calls(suite.task(task_id))
        if calls and calls[0]["arguments"]:
            arguments = dict(calls[0]["arguments"])
            key = sorted(arguments)[0]
            arguments[key] = changed(arguments[key], rng)
            reward, info, _ = play(env, Script([format_tool_call(calls[0]["name"], arguments)]), task_id=task_id)
            if reward != single_turn_verdict(category, env.unwrapped.episode):
                disagreements.append((task_id, "changed", info["reward_info"]))
    assert not disagreements, disagreements[:5]
    assert passed >= 0.99 * len(env.unwrapped.task_ids)


@pytest.mark.parametrize("category", ["simple_python", "multiple", "parallel", "simple_java", "format_sensitivity"])
def test_single_turn_reward_info_names_no_error_for_a_valid_answer(category):
    """bfcl-eval's checker says ``simple_function_checker:unclear`` of an answer it passes: reward_info
    names no error there."""
    env = gym.make(env_id(category))
    reward, info, _ = play(env, agents.load("oracle", env=env), task_id=env.unwrapped.task_ids[0])
    assert reward == 1.0 and info["reward_info"] == {"valid": True, "error_type": None, "error": []}


HOSTILE = [
    "__import__",
    "__init__",
    "__class__",
    "__dict__",
    "_load_scenario",
    "os.system",
    "GorillaFileSystem.rm",
    "eval",
    "exec",
    "kill",
    "exit",
    "quit",
    "remove",
    "unlink",
    "popen",
    "Popen",
    "run",
    "send_message",
    "get_stock_info",
]


def test_hostile_tool_names_are_unknown_and_run_nothing():
    env = gym.make(env_id("multi_turn_base"))
    env.reset(options={"task_id": "multi_turn_base_0"})  # GorillaFileSystem and TwitterAPI
    action = "\n".join(format_tool_call(n, {"folder": "document", "command": "ls"}) for n in HOSTILE)
    _, _, _, _, info = env.step(action)
    assert [c["error"] for c in info["tool_calls"]] == ["unknown_tool"] * len(HOSTILE)
    ep = env.unwrapped.episode
    assert state_differences(ep.world, ep.suite.new_world(ep.task)) == {}
    for name in HOSTILE:  # the world itself answers only the entry's documented functions
        assert ep.world.execute(name, {}).error.code == "unknown_tool"


def test_miss_func_adds_functions_at_their_turn():
    env = gym.make(env_id("multi_turn_miss_func"))
    task = env.unwrapped.suite.task("multi_turn_miss_func_0")  # 'sort' held out until turn 3
    obs, _ = env.reset(options={"task_id": task.id})
    oracle = agents.load("oracle", env=env)
    shown = []
    done = False
    while not done:
        shown.append("sort" in {t["function"]["name"] for t in obs["tools"]})
        obs, reward, terminated, truncated, info = env.step(oracle.act(obs))
        done = terminated or truncated
    assert reward == 1.0 and not shown[0] and shown[-1]
    users = [m["content"] for m in env.unwrapped.episode.messages if m["role"] == "user"]
    assert users[3] == multi_turn.ADDED_FUNCTIONS_PROMPT


def test_step_limit_truncates_like_bfcl():
    env = gym.make(env_id("multi_turn_base"))
    env.reset(options={"task_id": "multi_turn_base_0"})
    call = format_tool_call("pwd", {})
    for _ in range(multi_turn.MAX_STEPS_PER_TURN + 1):
        _, reward, terminated, truncated, info = env.step(call)
    assert truncated and not terminated and info["ended_by"] == "max_steps" and reward == 0.0


@pytest.mark.parametrize("category", ["multi_turn_base", "multi_turn_long_context"])
def test_rehearsed_and_shadow_oracle(category):
    env = gym.make(env_id(category), dynamics="rehearsed", reward="replay")
    oracle = agents.load("oracle", env=env)
    for task_id in env.unwrapped.task_ids[:20]:
        reward, info, infos = play(env, oracle, task_id=task_id)
        assert reward == 1.0 and info["reward_source"] == "replay"
        assert {c["source"] for i in infos for c in i["tool_calls"]} == {"rehearsed"}
    env = gym.make(env_id(category), dynamics="shadow")
    oracle = agents.load("oracle", env=env)
    for task_id in env.unwrapped.task_ids[:10]:
        reward, info, infos = play(env, oracle, task_id=task_id)
        assert reward == 1.0
        assert all(c["fidelity"]["exact"] == 1.0 for i in infos for c in i["tool_calls"])


def test_actions_reward_under_rehearsal_and_bfcl_schemas_are_strict():
    env = gym.make(env_id("multi_turn_base"), dynamics="rehearsed")
    oracle = agents.load("oracle", env=env)
    reward, info, _ = play(env, oracle, task_id="multi_turn_base_1")
    assert info["reward_source"] == "actions" and reward == 1.0
    obs, _ = env.reset(options={"task_id": "multi_turn_base_0"})
    _, _, _, _, info = env.step(format_tool_call("cd", {"folder": 3}))
    assert info["tool_calls"][0]["error"] == "invalid_arguments"


def test_episodes_own_their_instances():
    suite = get_suite("multi_turn_base")
    task = suite.task("multi_turn_base_0")
    a, b = suite.new_world(task), suite.new_world(task)
    a.execute("mkdir", {"dir_name": "fresh"})
    assert state_differences(a, b) and not state_differences(b, suite.new_world(task))
    fork = a.fork()
    fork.execute("mkdir", {"dir_name": "other"})
    assert state_differences(fork, a)


def test_strict_progress_on_a_single_turn_task_is_its_verdict_not_always_one():
    env = gym.make("EnvACE/bfcl-simple-python-v0", reward="strict_progress")
    task_id = env.unwrapped.task_ids[0]
    rewards = []
    for name in ("oracle", "random"):
        agent = agents.load(name, env=env)
        obs, info = env.reset(seed=0, options={"task_id": task_id})
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(agent.act(obs))
            done = terminated or truncated
        rewards.append(reward)
    assert rewards == [1.0, 0.0]
