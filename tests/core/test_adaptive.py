"""Adaptive dynamics: the router's estimates and choices, episodes under it, and its state."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from typer.testing import CliRunner

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.cli import app
from envace_gym.play.loop import run_episode
from envace_gym.routing import FidelityRouter, merge

OFFICE = "EnvACE/tau2-mock-office-v0"
PERFECT = {"parsed": True, "shape": 1.0, "leaf_match": 1.0, "error_agree": True, "exact": True}
WRONG = PERFECT | {"leaf_match": 0.0, "exact": False}


def test_the_router_asks_the_world_until_the_rehearsal_proves_faithful():
    router, rng = FidelityRouter(min_calls=3, explore=0.0), np.random.default_rng(0)
    for _ in range(3):
        route, why = router.route("get", {"id": 1}, rng)
        assert route == "shadow" and why["reason"] == "uncertain"
        router.update("get", {"id": 1}, PERFECT)
    route, why = router.route("get", {"id": 2}, rng)
    assert route == "policy" and why == {"key": "get(id)", "estimate": 1.0, "calls": 3, "reason": "faithful"}
    assert router.route("get", {"other": 1}, rng)[0] == "shadow"  # another argument shape: its own estimate
    for _ in range(3):
        router.update("put", {}, WRONG)
    assert router.route("put", {}, rng) == (
        "shadow",
        {"key": "put()", "estimate": 0.0, "calls": 3, "reason": "unfaithful"},
    )
    assert router.faithful("get", {"id": 5}) and not router.faithful("put", {})


def test_exploration_and_the_budget():
    router = FidelityRouter(min_calls=1, explore=0.25)
    router.update("get", {}, PERFECT)
    rng = np.random.default_rng(0)
    shares = [router.route("get", {}, rng)[0] == "shadow" for _ in range(2000)]
    assert 0.2 < np.mean(shares) < 0.3
    capped = FidelityRouter(budget=2)
    routes = [capped.route("get", {}, rng) for _ in range(4)]
    assert [r for r, _ in routes] == ["shadow", "shadow", "policy", "policy"] and routes[-1][1][
        "reason"
    ] == "budget spent"
    capped.refill()
    assert capped.route("get", {}, rng)[0] == "shadow"


def test_the_state_round_trips_merges_and_refuses_a_bad_one():
    a, b = FidelityRouter(), FidelityRouter()
    a.update("get", {}, PERFECT)
    b.update("get", {}, WRONG)
    b.update("put", {}, PERFECT)
    restored = FidelityRouter()
    restored.load_state_dict(a.state_dict())
    assert restored.estimates == a.estimates
    merged = FidelityRouter()
    merged.load_state_dict(merge([a.state_dict(), b.state_dict()]))
    assert merged.estimates["get()"].calls == 2 and merged.estimates["get()"].mean == 0.5
    for bad in ({"estimates": {"x": {"calls": 1}}}, {"estimates": {"x": {"calls": 1, "total": 5.0, "squares": 1.0}}}):
        with pytest.raises(ValueError, match="router state"):
            FidelityRouter().load_state_dict(bad)
    with pytest.raises(ValueError, match="threshold"):
        FidelityRouter(threshold=float("nan"))


def test_episodes_spend_fewer_real_calls_as_the_policy_proves_faithful_and_records_say_why():
    router = FidelityRouter(min_calls=2, explore=0.0)
    env = gym.make(OFFICE, dynamics="adaptive", router=router)
    oracle = agents.load("oracle", env=env)  # its rehearsals are the real answers: faithful
    records = [run_episode(env, oracle, t, seed=i) for i, t in enumerate(env.unwrapped.task_ids[:8])]
    assert all(r["reward"] == 1.0 and r["reward_source"] == "actions" for r in records)
    assert records[0]["real_calls"] > 0 and sum(r["real_calls"] for r in records[-3:]) < sum(
        r["real_calls"] for r in records[:3]
    )
    routes = [route for r in records for route in r["routes"]]
    assert {r["reason"] for r in routes} == {"uncertain", "faithful"}
    assert all(r["source"] == ("real" if r["reason"] == "uncertain" else "rehearsed") for r in routes)
    # a policy that rehearses badly keeps being checked against the world
    bad = FidelityRouter(min_calls=2, explore=0.0)
    env = gym.make(OFFICE, dynamics="adaptive", router=bad)
    random_agent = agents.load("random", env=env)
    played = [run_episode(env, random_agent, t, seed=i) for i, t in enumerate(env.unwrapped.task_ids[:6])]
    reasons = {route["reason"] for r in played for route in r["routes"]}
    assert bad.estimates and reasons <= {"uncertain", "unfaithful"} and "unfaithful" in reasons
    assert all(e.lower_bound(bad.z) < bad.threshold for e in bad.estimates.values())


@pytest.mark.parametrize("env_id", [OFFICE, "EnvACE/tau2-retail-v0", "EnvACE/bfcl-multi-turn-base-v0"])
def test_check_env_passes_under_adaptive_dynamics(env_id):
    check_env(gym.make(env_id, dynamics="adaptive").unwrapped, skip_render_check=True)


def test_run_plays_adaptive_dynamics_with_a_reward_that_compares_across_dynamics(tmp_path):
    out = tmp_path / "a.jsonl"
    result = CliRunner().invoke(
        app, ["run", OFFICE, "--dynamics", "adaptive", "--limit", "3", "--batch", "2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    import json

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["reward_source"] for r in rows} == {"replay"} and all(r["routes"] for r in rows)


def test_the_gated_world_model_loss_trains_only_responses_the_policy_rehearses_badly(tiny):
    from recorder import Recorder

    from envace_gym.training.grpo import ROLE_IDS
    from envace_gym.training.rollout import collect

    agent = Recorder(agents.load(f"hf:{tiny}", max_new_tokens=8, temperature=1.0, seed=3))
    trusted = FidelityRouter(min_calls=1, explore=0.0)
    trusted.update("get_order_details", {"order_id": "#W2378156"}, PERFECT)  # the Recorder's call
    for router, trained in ((trusted, 0), (FidelityRouter(min_calls=1, explore=0.0), 1)):
        envs = [gym.make("EnvACE/tau2-retail-v0", dynamics="adaptive", router=router, max_turns=2) for _ in range(2)]
        rows = collect(agent, envs, ["5"], 2, world_targets=True, skip_world=router.faithful)
        episodes = rows[:2]
        worlds = [r for r in rows[2:] if ROLE_IDS["world"] in r.roles]
        if trained:  # a new router: the first call goes to the world and its response is trained
            assert all(e.info["real_calls"] >= 1 and e.info["world"]["trained"] >= 1 for e in episodes) and worlds
        else:  # a trusted tool: rehearsed, no real call, nothing for the world-model loss
            assert all(e.info["real_calls"] == 0 for e in episodes) and not worlds


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ({"estimates": {"x": {"calls": float("inf"), "total": 0.0, "squares": 0.0}}}, "'x': calls must be a whole"),
        ({"estimates": {"x": {"calls": 10**400, "total": 0.0, "squares": 0.0}}}, "'x': calls must be between 0"),
        ({"estimates": {"x": {"calls": 2.0, "total": 0.0, "squares": 0.0}}}, "'x': calls must be a whole"),
        ({"estimates": {"x": {"calls": 1, "total": 10**400, "squares": 0.0}}}, "'x' is not calls, total and squares"),
        ({"estimates": {"x": [1, 0.5, 0.25]}}, "estimate 'x' must be a mapping"),
        ({"estimates": [["x", {"calls": 1, "total": 1.0, "squares": 1.0}]]}, "its estimates must be mappings"),
        ([["estimates", {}]], "its estimates must be mappings"),
    ],
)
def test_a_saved_state_out_of_range_or_of_the_wrong_shape_is_refused_in_one_line(state, field):
    router = FidelityRouter()
    router.update("get", {}, PERFECT)
    with pytest.raises(ValueError, match="router state") as error:
        router.load_state_dict(state)
    assert field in str(error.value) and "\n" not in str(error.value)
    assert router.estimates["get()"].calls == 1  # the router is kept as it was


@pytest.mark.parametrize("field", ["min_calls", "budget"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 2.5, -1, True])
def test_a_nan_or_odd_budget_or_min_calls_is_refused_and_never_lifts_the_cap(field, value):
    with pytest.raises(ValueError, match=field):
        FidelityRouter(**{field: value})
    with pytest.raises(ValueError, match="budget"):
        FidelityRouter(budget=3).refill(float("nan"))


@pytest.mark.parametrize("real_calls", [-1, float("inf"), float("nan"), 2.5])
def test_a_checkpoint_with_negative_or_infinite_real_calls_is_refused(real_calls):
    from envace_gym.training import Trainer

    trainer = object.__new__(Trainer)  # restore reads only the router and the count: no model needed
    trainer.router = None
    with pytest.raises(ValueError, match="checkpoint state: real_calls"):
        trainer.restore({"real_calls": real_calls})
    trainer.restore({"real_calls": 7})
    assert trainer.real_calls == 7


def test_training_under_adaptive_dynamics_keeps_its_router_and_budget_across_resume(tiny, tmp_path):
    from envace_gym.training import TrainConfig, Trainer

    config = TrainConfig(
        model=f"hf:{tiny}",
        env_id=OFFICE,
        out=str(tmp_path),
        dynamics="adaptive",
        real_call_budget=1,
        world_model_coef=0.5,
        world_model_gate=True,
        group_size=2,
        tasks_per_step=1,
        steps=1,
        max_new_tokens=8,
        max_turns=2,
        eval_every=0,
        save_every=1,
    )
    trainer = Trainer(config)
    trainer.router.update("get_users", {}, PERFECT)
    (record,) = trainer.train()
    assert record["real_calls"] <= 1 and record["real_calls/total"] == record["real_calls"]
    assert {"world/trained", "world/skipped_faithful"} <= set(record)
    resumed = Trainer(TrainConfig(**{**vars(config), "steps": 2}))
    resumed.resume()
    assert resumed.router.estimates == trainer.router.estimates and resumed.real_calls == trainer.real_calls
    with pytest.raises(ValueError, match="use dynamics adaptive"):
        TrainConfig(**{**vars(config), "dynamics": "mixed"})


def test_the_budget_is_never_exceeded_in_episodes():
    router = FidelityRouter(budget=3, explore=1.0)  # every call would go out, but for the budget
    env = gym.make(OFFICE, dynamics="adaptive", router=router)
    oracle = agents.load("oracle", env=env)
    records = [run_episode(env, oracle, t, seed=i) for i, t in enumerate(env.unwrapped.task_ids[:5])]
    assert sum(r["real_calls"] for r in records) == 3 and router.real_calls == 3
    assert {route["reason"] for r in records for route in r["routes"] if route["source"] == "rehearsed"} == {
        "budget spent"
    }
    router.refill(budget=1)
    assert run_episode(env, oracle, env.unwrapped.task_ids[0], seed=9)["real_calls"] == 1


# tasks whose later calls read what earlier ones wrote (office: a task created, then its status updated),
# each in an order that has a trusted write rehearsed before a real read of what it wrote
ROUTED_TASKS = {
    OFFICE: ["train_51", "train_67", "train_2", "train_12", "train_57", "train_59", "train_75", "train_86", "train_62"],
    "EnvACE/tau2-retail-v0": None,
    "EnvACE/bfcl-multi-turn-base-v0": None,
}
CORRUPTED = {OFFICE: "update_task_status", "EnvACE/tau2-retail-v0": "get_order_details"}
CORRUPTED["EnvACE/bfcl-multi-turn-base-v0"] = "cd"


def routed(env_id: str, agent_of, min_calls: int = 2) -> list[dict]:
    """The routes of a few episodes of ``agent_of(env)`` under adaptive dynamics with no exploration."""
    router = FidelityRouter(min_calls=min_calls, explore=0.0)
    env = gym.make(env_id, split=None, dynamics="adaptive", router=router)
    agent = agent_of(env)
    task_ids = ROUTED_TASKS[env_id] or env.unwrapped.suite.task_ids()[:8]
    return [route for i, t in enumerate(task_ids) for route in run_episode(env, agent, t, seed=i)["routes"]]


def check_settled(routes: list[dict], min_calls: int = 2) -> None:
    """Each key went to the world only while it had fewer than ``min_calls`` measured calls (the calls of
    one turn are routed together), and was trusted after."""
    assert routes
    for route in routes:
        expected = ("real", "uncertain") if route["calls"] < min_calls else ("rehearsed", "faithful")
        assert (route["source"], route["reason"]) == expected, route


@pytest.mark.parametrize("env_id", list(ROUTED_TASKS))
def test_with_the_oracle_rehearsing_every_tool_falls_to_the_exploration_share(env_id):
    check_settled(routed(env_id, lambda env: agents.load("oracle", env=env)))


@pytest.mark.parametrize("env_id", list(ROUTED_TASKS))
def test_a_tool_rehearsed_wrong_alone_goes_back_to_the_world(env_id):
    from rehearsers import CorruptOracle

    tool = CORRUPTED[env_id]
    routes = routed(env_id, lambda env: CorruptOracle(env, tool))
    bad = [r for r in routes if r["tool"] == tool]
    assert len(bad) > 2 and all(r["source"] == "real" for r in bad)
    assert {r["reason"] for r in bad if r["calls"] >= 2} == {"unfaithful"}
    check_settled([r for r in routes if r["tool"] != tool])
