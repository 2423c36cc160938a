"""The oracle on every base task of the real tau2 domains, and agreement with tau2's evaluator."""

import copy
import json
import re

import gymnasium as gym
import pytest
from helpers import play
from tau2_reference import tau2_reward

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.oracle import OracleAgent
from envace_gym.core.messages import format_tool_call
from envace_gym.core.state import model_diff
from envace_gym.suites.tau2 import get_suite

COUNTS = {"retail": 114, "airline": 50, "telecom": 114}


@pytest.mark.parametrize("domain", list(COUNTS))
@pytest.mark.slow
def test_oracle_real_matches_tau2(domain):
    env = gym.make(f"EnvACE/tau2-{domain}-v0", split="base", dynamics="real")
    oracle = agents.load("oracle", env=env)
    ids = env.unwrapped.task_ids
    assert len(ids) == COUNTS[domain]
    failures, disagreements = [], []
    # every fourth task (telecom's every one: its episodes are short), to keep the suite in its time
    # budget; every task agreed when the sweep last ran in full
    for task_id in ids[:: 1 if domain == "telecom" else 4]:
        reward, info, _ = play(env, oracle, task_id)
        assert info["reward_source"] == "world"
        if reward != 1.0:
            failures.append(task_id)
        if tau2_reward(env.unwrapped.episode) != reward:
            disagreements.append(task_id)
    assert failures == []
    assert disagreements == []


@pytest.mark.parametrize("domain", list(COUNTS))
def test_oracle_rehearsed_with_replay_reward(domain):
    env = gym.make(f"EnvACE/tau2-{domain}-v0", split="base", dynamics="rehearsed", reward="replay")
    oracle = agents.load("oracle", env=env)
    rewards, rehearse_turns = [], 0
    for task_id in env.unwrapped.task_ids:
        reward, info, infos = play(env, oracle, task_id)
        assert info["reward_source"] == "replay"
        rewards.append(reward)
        sources = {c["source"] for i in infos for c in i["tool_calls"]}
        assert sources <= {"rehearsed"}
        rehearse_turns += sum(i["role"] == "rehearse" for i in infos)
    assert rewards == [1.0] * COUNTS[domain]
    assert rehearse_turns > 0


class PerturbedOracle(OracleAgent):
    """The oracle with one gold write call dropped or one compared argument changed."""

    def __init__(self, env, plan):
        super().__init__(env)
        self.fixed_plan = plan

    def act(self, obs):
        env = self.env.unwrapped
        if obs["role"] == "act" and env.episode is not self._episode:
            super().act(obs)
            self._plan, self._cursor = self.fixed_plan, 0
        return super().act(obs)


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "0"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return {"x": 1}


def _final_state_differs(suite, task, calls):
    """Whether running ``calls`` on a fresh world ends in another state than the gold run."""
    world = suite.new_world(task)
    for c in calls:
        world.execute(c["name"], c["arguments"], c["requestor"])
    return bool(model_diff(world.env.tools.db, suite.gold_world(task).env.tools.db))


def _perturbations(suite, task):
    """(kind, oracle plan, whether the perturbation changes the final state) per gold write call."""
    toolkit = suite.new_world(task).env.tools
    plan = suite.oracle_plan(task)
    calls = suite.gold_calls(task)
    out = []
    for i, a in enumerate(suite.gold_actions(task)):
        if a.requestor != "assistant" or toolkit.tool_type(a.name).value != "write":
            continue
        index = plan.index(format_tool_call(a.name, a.arguments))
        out.append(
            ("drop", plan[:index] + plan[index + 1 :], _final_state_differs(suite, task, calls[:i] + calls[i + 1 :]))
        )
        keys = a.compare_args if a.compare_args is not None else list(a.arguments)
        if keys:
            args = copy.deepcopy(a.arguments)
            args[keys[0]] = _changed(args[keys[0]])
            changed = calls[:i] + [{**calls[i], "arguments": args}] + calls[i + 1 :]
            out.append(
                (
                    "change",
                    plan[:index] + [format_tool_call(a.name, args)] + plan[index + 1 :],
                    _final_state_differs(suite, task, changed),
                )
            )
    return out


@pytest.mark.parametrize("domain", ["retail", "airline"])
@pytest.mark.slow
def test_perturbed_trajectories_agree_with_tau2(domain):
    env = gym.make(f"EnvACE/tau2-{domain}-v0", split="base")
    suite = get_suite(domain)
    tried = zeroed = effective = 0
    # every seventh retail task (50 perturbations), every third airline one (34): both over the 30 asserted
    # below, and the suite in its time budget (every task agreed when the sweep last ran in full)
    for task_id in env.unwrapped.task_ids[:: {"retail": 7, "airline": 3}[domain]]:
        task = suite.task(task_id)
        for kind, plan, differs in _perturbations(suite, task):
            reward, _, _ = play(env, PerturbedOracle(env, plan), task_id)
            assert reward == tau2_reward(env.unwrapped.episode), (task_id, kind)
            tried += 1
            if differs:
                effective += 1
                zeroed += reward == 0.0
    assert tried >= 30 and effective > tried // 2
    # a dropped or altered gold write that changes the final state must cost the reward
    assert zeroed == effective, (zeroed, effective)


def test_telecom_dropped_user_action_agrees_with_tau2():
    env = gym.make("EnvACE/tau2-telecom-v0", split="base")
    suite = get_suite("telecom")
    tried = zeroed = 0
    for task_id in env.unwrapped.task_ids[::4]:
        plan = suite.oracle_plan(suite.task(task_id))
        asks = [i for i, p in enumerate(plan) if p.startswith("Please do this on your phone")]
        if not asks:
            continue
        plan = plan[: asks[-1]] + plan[asks[-1] + 1 :]
        reward, _, _ = play(env, PerturbedOracle(env, plan), task_id)
        assert reward == tau2_reward(env.unwrapped.episode), task_id
        tried += 1
        zeroed += reward == 0.0
    assert tried >= 20 and zeroed > tried // 2


def test_gold_answers_never_in_obs_or_info():
    env = gym.make("EnvACE/tau2-retail-v0", split="base")
    suite = get_suite("retail")
    task = suite.task("5")
    secrets = [json.dumps(a.arguments) for a in suite.gold_actions(task)]
    obs, info = env.reset(options={"task_id": "5"})
    assert not any(s in json.dumps(obs) + json.dumps(info) for s in secrets)
    assert "evaluation_criteria" not in json.dumps(obs) + json.dumps(info)


class Interrupted:
    """The oracle after ``hostile`` foreign turns, each a call that is rejected."""

    def __init__(self, env, hostile: int):
        self.oracle, self.hostile = OracleAgent(env), hostile

    def act(self, obs):
        if obs["role"] == "act" and self.hostile:
            self.hostile -= 1
            return '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'
        return self.oracle.act(obs)


@pytest.mark.parametrize(
    "env_id,task_id,hostile",
    [  # BFCL allows 20 tool-calling steps per user turn
        ("EnvACE/tau2-retail-v0", "5", 32),
        ("EnvACE/tau2-mock-office-v0", "test_0", 32),
        ("EnvACE/bfcl-multi-turn-base-v0", "multi_turn_base_0", 12),
    ],
)
def test_the_oracle_continues_its_plan_after_foreign_turns(env_id, task_id, hostile):
    env = gym.make(env_id, split=None, max_turns=None)
    reward, info, _ = play(env, Interrupted(env, hostile), task_id)
    assert reward == 1.0, info.get("reward_info")
    gold = [
        c for c in env.unwrapped.suite.gold_calls(env.unwrapped.suite.task(task_id)) if c["requestor"] == "assistant"
    ]
    made = [c for c in env.unwrapped.episode.calls if c.requestor == "assistant" and c.name != "no_such_tool"]
    assert len(made) == len(gold)


@pytest.mark.parametrize(
    "domain, task_id",
    [("retail", "5"), ("retail", "12"), ("airline", "2"), ("airline", "8"), ("telecom", None), ("mock", None)],
)
def test_the_scripted_user_speaks_in_the_first_person_and_the_oracle_still_scores_1(domain, task_id):
    """tau2 writes a scenario to its simulator ("You want to exchange ..."): the scripted user says it as a
    user ("I want to exchange ..."), without what the simulator is told about the agent or hidden."""
    env = gym.make(f"EnvACE/tau2-{domain}-v0", split="base")
    task_id = task_id or env.unwrapped.task_ids[0]
    reward, info, _ = play(env, agents.load("oracle", env=env), task_id)
    opening = env.unwrapped.episode.messages[2]["content"]
    assert reward == 1.0 and info["ended_by"] in ("user_stop", "transfer"), info
    assert not re.search(r"\byou(r|rself)?\b", opening, re.I), opening
    assert re.search(r"\b(I|my)\b", opening) and "agent" not in opening and "reveal" not in opening, opening


def test_first_person_pronouns_and_what_stays_as_written():
    from envace_gym.suites.tau2.mock_office import OfficeSuite
    from envace_gym.suites.tau2.users import ScriptedUser, scenario_parts, spoken

    assert spoken(
        "You want to return it (but do not reveal it to the agent). If the agent asks, say no. You name is Ana, "
        "and the store allows you to pay with your card; you're sure you've paid. Change the passenger to yourself."
    ) == (
        "I want to return it. My name is Ana, and the store allows me to pay with my card; I'm sure I've paid. "
        "Change the passenger to myself."
    )
    office = OfficeSuite({"test": 40})  # mock-office's instructions are the user's own words already: unchanged
    for task_id in office.task_ids("test"):
        task = office.task(task_id)
        assert ScriptedUser(office, task).opening(None) == scenario_parts(task)[0]
