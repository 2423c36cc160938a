"""Test-time private rehearsal: no real call from a branch, no gold to the agent or scorer, accounting,
selection, the CLI flags, and budget 0 as today's run."""

import json

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents import NoisyOracle, OracleAgent, PrivateRehearsal
from envace_gym.agents.base import Agent
from envace_gym.cli import app
from envace_gym.core.messages import ToolCall, parse_act
from envace_gym.env import DYNAMICS
from envace_gym.play.compare import compare_calls
from envace_gym.play.loop import run_episode

SUITES = {"EnvACE/tau2-retail-v0": "0", "EnvACE/bfcl-multi-turn-base-v0": "multi_turn_base_0"}
SENTINEL = "GOLD-SENTINEL-7f3a"


def _env(env_id, task_id, **kwargs):
    return gym.make(env_id, task_ids=[task_id], **kwargs)


def _count_executes(world) -> list:
    """Wrap one world object's ``execute`` to log its calls; a fork is a new object, so it logs nothing."""
    log, execute = [], world.execute
    world.execute = lambda name, *args, **kwargs: log.append(name) or execute(name, *args, **kwargs)
    return log


def _play(env, agent, task_id, dynamics=None):
    """One episode, counting the calls run on its own world; returns (reward, the count, the env)."""
    options = {"task_id": task_id} | ({"dynamics": dynamics} if dynamics else {})
    obs, info = env.reset(seed=0, options=options)
    log, done, reward = _count_executes(env.unwrapped.episode.world), False, 0.0
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        done = terminated or truncated
    return reward, log


class Recorder(Agent):
    """An agent that logs every observation it is given (its bound copies share the log)."""

    def __init__(self, inner, log):
        self.inner, self.log, self.name = inner, log, inner.name

    def act(self, obs):
        self.log.append(json.dumps(obs, default=str))
        return self.inner.act(obs)

    def bind(self, env):
        return Recorder(self.inner.bind(env), self.log)


@pytest.mark.parametrize("dynamics", DYNAMICS)
@pytest.mark.parametrize("env_id", SUITES)
def test_branches_never_run_a_real_call(env_id, dynamics):
    task_id = SUITES[env_id]
    env = _env(env_id, task_id, p_real=0.5)
    env.unwrapped.simulator = OracleAgent(env)
    world_model = agents.load("knn") if dynamics == "shadow" else None
    agent = PrivateRehearsal(NoisyOracle(env, p=0.5, seed=3), env, 2, "parallel", "best", world_model=world_model)
    _, executed = _play(env, agent, task_id, dynamics)
    info, calls = agent.info, env.unwrapped.episode.calls
    assert info["rehearsal_attempts"] > 0 and info["rehearsal_turns"] > info["rehearsal_attempts"]
    assert info["real_calls"] == sum(c.source == "real" for c in calls)
    # under mixing dynamics the episode's local world also runs its rehearsed calls (one history, one world)
    kept = DYNAMICS[dynamics].mixes and env.unwrapped.suite.local_worlds
    applied = {c.name for c in calls if kept and c.source == "rehearsed"} - env.unwrapped.suite.stateless_tools
    ran = [c.name for c in calls if c.source == "real" or (c.source == "rehearsed" and c.name in applied)]
    assert executed == ran
    if dynamics in ("rehearsed", "simulated", "replay"):
        assert executed == []


@pytest.mark.parametrize("mode,select", [("parallel", "best"), ("sequential", "memory"), ("parallel", "vote")])
def test_no_gold_derived_value_reaches_the_agent_or_the_scorer(monkeypatch, mode, select):
    env = _env("EnvACE/tau2-retail-v0", "0", reward="actions")
    suite = env.unwrapped.suite
    scored = []

    def leaky_score(task, episode):  # the branch reward: gold-derived, marked
        scored.append(episode.dynamics)
        return 0.31337, {"secret": SENTINEL, "gold": suite.gold_calls(task)}

    monkeypatch.setattr(suite.grader, "score_actions", leaky_score)
    seen, judged = [], []

    def scorer(obs, attempts):
        judged.append(json.dumps([obs, [a.view() for a in attempts], [a.messages for a in attempts]]))
        return [-a.errors for a in attempts]

    actor, world_model = Recorder(NoisyOracle(env, p=0.4, seed=1), seen), Recorder(OracleAgent(env), seen)
    agent = PrivateRehearsal(actor, env, 3, mode, select, world_model=world_model, horizon=20, scorer=scorer)
    record = run_episode(env, agent, "0")
    assert scored.count("rehearsed") > 0  # branches ended and were scored: there was something to leak
    assert seen and (judged or select != "best")
    assert not any(SENTINEL in text or "0.31337" in text for text in seen + judged)
    assert record["rehearsal_attempts"] > 0 and record["reward"] == 0.31337  # the committed episode's own reward


def test_the_private_context_stays_out_of_the_episode():
    env = _env("EnvACE/tau2-retail-v0", "0")
    seen = []
    agent = PrivateRehearsal(
        Recorder(NoisyOracle(env, p=0.5, seed=0), seen), env, 2, "parallel", "memory", world_model=OracleAgent(env)
    )
    record = run_episode(env, agent, "0")
    assert any("Private rehearsal" in text for text in seen)  # the agent read its digest
    assert not any("Private rehearsal" in (m.get("content") or "") for m in record["messages"])
    context = record["private_context"]
    assert context and all(len(c["attempts"]) == 2 for c in context)
    assert {c["chosen"] for c in context} <= {None, 0}  # memory generates the turn (0: nothing was called)
    assert json.loads(json.dumps(record)) == record


def test_budget_zero_is_todays_run_record_for_record(tmp_path):
    def records(*extra):
        out = tmp_path / f"run{len(extra)}.jsonl"
        result = CliRunner().invoke(
            app,
            [
                "run",
                "EnvACE/tau2-airline-v0",
                "--agent",
                "noisy-oracle",
                "--task-ids",
                "0,1,2",
                "--out",
                str(out),
                *extra,
            ],
        )
        assert result.exit_code == 0, result.output
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in out.read_text().splitlines()]

    today = records()
    assert today == records("--rehearsal-budget", "0", "--rehearsal-select", "memory", "--world-model", "knn")
    assert all(r["real_calls"] == len(r["real_call_ids"]) and r["rehearsal_attempts"] == 0 for r in today)
    env = _env("EnvACE/tau2-airline-v0", "1")
    plain, wrapped = (
        run_episode(env, a, "1", seed=4)
        for a in (NoisyOracle(env, seed=2), PrivateRehearsal(NoisyOracle(env, seed=2), env, 0))
    )
    assert {**plain, "seconds": 0} == {**wrapped, "seconds": 0}


def test_the_cli_runs_private_rehearsal_and_records_its_cost(tmp_path):
    out = tmp_path / "run.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "EnvACE/tau2-airline-v0",
            "--agent",
            "noisy-oracle",
            "--task-ids",
            "0",
            "--rehearsal-budget",
            "2",
            "--rehearsal-mode",
            "sequential",
            "--rehearsal-select",
            "vote",
            "--world-model",
            "oracle",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "private attempts" in result.output
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["agent"] == "noisy-oracle+rehearsal(N=2,sequential,vote,oracle)"
    assert record["rehearsal_attempts"] == 2 * len(record["private_context"]) > 0
    assert record["real_calls"] == len(record["real_call_ids"]) and record["rehearsal_tokens"] > 0


def test_private_rehearsal_acts_in_compare():
    env = _env("EnvACE/tau2-retail-v0", "0")
    actor = PrivateRehearsal(NoisyOracle(env, p=0.3), env, 2, world_model=OracleAgent(env))
    records = list(compare_calls(env, actor, agents.load("knn"), ["0"]))
    assert records and actor.info["rehearsal_attempts"] > 0
    assert actor.info["real_calls"] == len(records)  # shadow: every committed call ran for real, once


def test_best_with_an_oracle_world_model_beats_no_rehearsal():
    env = gym.make("EnvACE/tau2-retail-v0", split="test", reward="actions")
    ids = env.unwrapped.task_ids[:4]

    def total(budget):
        actor = NoisyOracle(env, p=0.5, seed=0)
        agent = PrivateRehearsal(actor, env, budget, select="best", world_model=OracleAgent(env))
        return sum(run_episode(env, agent, t, seed=i)["reward"] for i, t in enumerate(ids))

    assert total(4) > total(0)


class Calculator(Agent):
    """Calls ``calculate`` once per user turn, then answers; rehearses ``{"result": 2}``. Logs batch sizes."""

    name = "calculator"

    def __init__(self):
        self.batches = []

    def act_batch(self, observations):
        self.batches.append(len(observations))
        return [self.act(obs) for obs in observations]

    def act(self, obs):
        if obs["role"] == "rehearse":
            return '{"result": 2}'
        if [m for m in obs["messages"] if m["role"] != "system"][-1]["role"] == "tool":  # a digest is a system message
            return "It is 2. ###STOP###"
        return '<tool_call>{"name": "calculate", "arguments": {"expression": "1 + 1"}}</tool_call>'


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_parallel_branches_are_batched_and_accounted(mode):
    env = _env("EnvACE/tau2-retail-v0", "0", dynamics="rehearsed")
    actor = Calculator()
    agent = PrivateRehearsal(actor, env, 3, mode, "vote")
    record = run_episode(env, agent, "0")
    assert record["reward_source"] == "actions" and record["real_calls"] == 0
    # per committed act turn: 3 attempts; an attempt of the first turn calls, is rehearsed, then answers
    assert [len(c["attempts"]) for c in record["private_context"]] == [3, 3]
    assert [len(a["turns"]) for a in record["private_context"][0]["attempts"]] == [2, 2, 2]
    assert record["rehearsal_attempts"] == 6 and record["rehearsal_turns"] == 3 * 3 + 3
    assert record["rehearsal_tokens"] > 0 and record["rehearsal_seconds"] >= 0
    assert max(actor.batches) == (3 if mode == "parallel" else 1)


def test_horizon_bounds_the_act_turns_of_an_attempt():
    env = _env("EnvACE/tau2-retail-v0", "0")
    agent = PrivateRehearsal(OracleAgent(env), env, 2, "sequential", "best", horizon=1)
    record = run_episode(env, agent, "0")
    assert record["reward"] == 1.0
    assert all(len(a["turns"]) == 1 for c in record["private_context"] for a in c["attempts"])


def test_noisy_oracle_turns_are_schema_valid_and_wrong():
    env = _env("EnvACE/tau2-retail-v0", "0")
    obs, _ = env.reset(options={"task_id": "0"})
    oracle, noisy = OracleAgent(env), NoisyOracle(env, p=1.0, seed=0)
    for _ in range(4):
        gold, (_, (call,)) = oracle.act(obs), parse_act(noisy.act(obs))
        assert env.unwrapped.tools.check(ToolCall("x", call.name, call.arguments)) is None
        assert parse_act(gold)[1][0].arguments != call.arguments or parse_act(gold)[1][0].name != call.name
        obs, *_ = env.step(gold)


def test_bad_options_and_the_world_reward_fork():
    env = _env("EnvACE/tau2-retail-v0", "0", reward="world")
    for kwargs in ({"budget": -1}, {"mode": "dreamy"}, {"select": "best-of"}, {"horizon": 0}, {"scorer": "gold"}):
        with pytest.raises(ValueError):
            PrivateRehearsal(OracleAgent(env), env, **kwargs)
    result = CliRunner().invoke(app, ["run", "--rehearsal-budget", "2", "--rehearsal-mode", "dreamy"])
    assert result.exit_code == 2 and "mode must be one of" in result.output
    agent = PrivateRehearsal(OracleAgent(env), env, 2, world_model=OracleAgent(env))
    assert run_episode(env, agent, "0")["reward"] == 1.0  # a world-reward env forks with gold-action rewards


def test_a_tiny_model_rehearses_and_judges_its_attempts(tiny):
    env = _env("EnvACE/tau2-retail-v0", "0", max_turns=1)
    model = agents.load(f"hf:{tiny}", max_new_tokens=4)
    agent = PrivateRehearsal(model, env, 2, "parallel", "best", horizon=1, scorer="judge")
    record = run_episode(env, agent, "0")
    assert record["rehearsal_attempts"] == 2 * record["turns"] and record["rehearsal_tokens"] > 0
    assert record["real_calls"] == len(record["real_call_ids"])


class AlwaysCalls(Calculator):
    """Calls a tool every act turn, never answering the user."""

    def act(self, obs):
        if obs["role"] == "rehearse":
            return '{"result": 2}'
        return '<tool_call>{"name": "calculate", "arguments": {"expression": "1 + 1"}}</tool_call>'


class BrokenWorldModel(Agent):
    name = "broken"

    def act(self, obs):
        raise RuntimeError("the world model broke")


def test_attempts_are_bounded_and_a_failing_world_model_ends_only_its_attempt():
    env = _env("EnvACE/tau2-retail-v0", "0", dynamics="rehearsed", max_turns=None)
    env.reset(seed=0, options={"task_id": "0"})
    obs, *_ = env.step("Let me check.")  # past the greeting turn: the next act turn is rehearsed
    agent = PrivateRehearsal(AlwaysCalls(), env, 2, "parallel", "best", max_turns=10)
    assert "calculate" in agent.act(obs)
    (context,) = agent.private_context
    assert [a["cut"] for a in context["attempts"]] == ["turn bound: 10 generations per attempt"] * 2
    timed = PrivateRehearsal(AlwaysCalls(), env, 2, "sequential", "best", max_turns=10**9, max_seconds=0.2)
    timed.act(obs)
    assert any("time bound" in (a["cut"] or "") for a in timed.private_context[0]["attempts"])
    broken = PrivateRehearsal(AlwaysCalls(), env, 3, "parallel", "vote", world_model=BrokenWorldModel())
    assert "calculate" in broken.act(obs)  # the attempts' first turns were played before the failure
    assert all("broken failed: RuntimeError" in a["cut"] for a in broken.private_context[0]["attempts"])
    record = run_episode(env, PrivateRehearsal(Calculator(), env, 2, world_model=BrokenWorldModel()), "0")
    assert record["ended_by"] != "agent_error" and record["error"] is None
