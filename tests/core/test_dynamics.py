"""The dynamics registry: each entry's attributes decide what an episode under it does."""

import dataclasses
import re

import gymnasium as gym
import pytest
from helpers import play

import envace_gym
from envace_gym import agents
from envace_gym.core.response import execute
from envace_gym.dynamics import DYNAMICS, Dynamics, get
from envace_gym.routing import FidelityRouter

# the ``source`` of the calls each answerer answers
SOURCES = {
    "world": {"real"},
    "policy": {"rehearsed"},
    "simulator": {"simulated"},
    "recording": {"replay"},
    "either": {"real", "rehearsed"},
    "router": {"real"},  # a new router trusts no tool yet: each call is a shadow call of the world's
}
NAMES = ("real", "rehearsed", "simulated", "replay", "mixed", "shadow", "adaptive")


def make(name: str, **kwargs):
    """The retail env under dynamics ``name``, with the oracle as simulator where one answers."""
    simulator = (lambda env: agents.load("oracle", env=env)) if DYNAMICS[name].answers == "simulator" else None
    return gym.make("EnvACE/tau2-retail-v0", dynamics=name, simulator=simulator, **kwargs)


def test_the_public_names_keep_their_order():
    assert envace_gym.DYNAMICS is DYNAMICS and tuple(DYNAMICS) == NAMES
    assert ", ".join(envace_gym.DYNAMICS) == ", ".join(NAMES) and "shadow" in envace_gym.DYNAMICS
    assert all(get(name).name == name for name in DYNAMICS)


@pytest.mark.parametrize("name", DYNAMICS)
def test_the_entry_decides_who_answers_and_the_default_reward(name):
    dynamics = DYNAMICS[name]
    env = make(name, p_real=0.5)
    reward, info, infos = play(env, agents.load("oracle", env=env), "5")
    calls = [c for i in infos for c in i["tool_calls"]]
    assert calls and {c["source"] for c in calls} == SOURCES[dynamics.answers]  # seed 0 draws both under mixed
    assert any(i["role"] == "rehearse" for i in infos) == dynamics.rehearses
    shadowed = dynamics.shadow or dynamics.answers == "router"  # the router measures the calls it sends out
    assert all(("rehearsed" in c and "fidelity" in c) == (shadowed and c["source"] == "real") for c in calls)
    assert reward == 1.0 and info["reward_source"] == dynamics.default_reward


@pytest.mark.parametrize("name", DYNAMICS)
def test_the_world_reward_needs_the_world_to_answer(name):
    if DYNAMICS[name].answers == "world":
        make(name, reward="world")
    else:
        with pytest.raises(ValueError, match="reward='world' reads the real world"):
            make(name, reward="world")


@pytest.mark.parametrize("name", DYNAMICS)
def test_a_fork_answers_the_pending_call_as_its_dynamics_do(name):
    dynamics = DYNAMICS[name]
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
    oracle = agents.load("oracle", env=env)
    env.unwrapped.simulator = oracle
    env.reset(seed=0, options={"task_id": "5"})
    assert env.step(oracle.act(env.unwrapped.observation()))[0]["role"] == "rehearse"
    clone = env.unwrapped.fork(dynamics=name)
    rehearsed = clone.role == "rehearse"
    if rehearsed:
        clone.step(oracle.bind(clone).act(clone.observation()))
    call = clone.episode.calls[-1]
    assert call.source in SOURCES[dynamics.answers]
    shadowed = dynamics.shadow or dynamics.answers == "router"
    assert rehearsed == (call.source == "rehearsed" or shadowed)
    assert (call.rehearsed is not None) == shadowed
    assert (clone._replay_table is not None) == (dynamics.answers == "recording")


def test_a_new_entry_is_all_a_new_dynamics_takes(monkeypatch):
    monkeypatch.setitem(DYNAMICS, "gold", Dynamics("gold", "recording", "replay"))
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="gold")
    reward, info, infos = play(env, agents.load("oracle", env=env), "5")
    assert {c["source"] for i in infos for c in i["tool_calls"]} == {"replay"}
    assert reward == 1.0 and info["reward_source"] == "replay" and info["dynamics"] == "gold"


def test_an_unknown_dynamics_is_refused():
    message = re.escape(f"unknown dynamics 'dreamy'; choose from {NAMES}")
    with pytest.raises(ValueError, match=message):
        get("dreamy")
    with pytest.raises(ValueError, match=message):
        gym.make("EnvACE/tau2-retail-v0", dynamics="dreamy")
    env = gym.make("EnvACE/tau2-retail-v0")
    with pytest.raises(ValueError, match=message):
        env.reset(options={"dynamics": "dreamy"})
    with pytest.raises(ValueError, match="unknown dynamics"):
        get(["real"])
    with pytest.raises(ValueError, match="answers must be one of"):
        Dynamics("oracle", "nobody", "actions")


OFFICE = "EnvACE/tau2-mock-office-v0"
WRITE_THEN_READ = ["train_57", "train_59", "train_62", "train_75", "train_86"]  # a task created, then updated


def replayed_answer(episode, i: int) -> str:
    """What a world that ran the episode's calls before call ``i`` answers it."""
    call = episode.calls[i]
    world = dataclasses.replace(episode, calls=episode.calls[:i]).replayed_world()
    return execute(episode.suite, world, call.name, call.arguments, episode.limits).content


def test_under_mixed_dynamics_real_calls_see_the_rehearsed_ones():
    env = gym.make(OFFICE, split=None, dynamics="mixed", p_real=0.5)
    oracle = agents.load("oracle", env=env)
    after_a_rehearsed_write = 0
    for seed in range(4):
        for task_id in WRITE_THEN_READ:
            play(env, oracle, task_id, seed=seed)
            episode = env.unwrapped.episode
            for i, call in enumerate(episode.calls):
                if call.source == "real":
                    assert call.world == "consistent" and call.info()["world"] == "consistent"
                    assert call.content == replayed_answer(episode, i), (task_id, seed, call)
                    after_a_rehearsed_write += any(c.source == "rehearsed" for c in episode.calls[:i])
                else:
                    assert call.world is None
    assert after_a_rehearsed_write


def test_a_world_that_is_not_local_skips_rehearsed_calls_and_its_drift_is_never_scored(monkeypatch):
    router = FidelityRouter(min_calls=1, explore=0.0)
    env = gym.make(OFFICE, split=None, dynamics="adaptive", router=router)
    monkeypatch.setattr(env.unwrapped.suite, "private_worlds", False)  # as a server's worlds are
    router.update("create_task", {"user_id": "u", "title": "t"}, {"leaf_match": 1.0})  # trusted: rehearsed
    _, _, infos = play(env, agents.load("oracle", env=env), "train_57")
    calls = [c for i in infos for c in i["tool_calls"]]
    assert [(c["name"], c["source"], c.get("world")) for c in calls] == [
        ("create_task", "rehearsed", None),
        ("update_task_status", "real", "state_diverged"),
    ]
    assert calls[1]["error"] is not None  # the world never saw the task created
    assert "update_task_status(status,task_id)" not in router.estimates  # nor did the router count it


def test_a_real_fork_of_a_rehearsed_episode_runs_on_a_world_that_saw_its_calls():
    env = gym.make(OFFICE, split=None, dynamics="rehearsed")
    oracle = agents.load("oracle", env=env)
    obs, _ = env.reset(seed=0, options={"task_id": "train_57"})
    while not any(c.name == "create_task" for c in env.unwrapped.episode.calls):
        obs, *_ = env.step(oracle.act(obs))
    clone = env.unwrapped.fork(dynamics="real")
    actor = oracle.bind(clone)
    while clone.episode.calls[-1].name != "update_task_status":
        clone.step(actor.act(clone.observation()))
    update = clone.episode.calls[-1]
    assert update.source == "real" and update.error is None and update.world is None


@pytest.mark.parametrize("keyword", ["p_real", "simulator", "recordings", "router"])
def test_an_entry_holds_its_own_parameters_and_refuses_the_others(keyword):
    from envace_gym.dynamics import PARAMETERS
    from envace_gym.play.run import RunConfig

    owners = [d for d in DYNAMICS.values() if keyword in d.parameters]
    assert len(owners) == 1 and keyword in PARAMETERS
    owners[0].check_keywords({keyword: object()})
    for other in (d for d in DYNAMICS.values() if d not in owners):
        with pytest.raises(
            ValueError, match=f"{keyword} applies to dynamics {owners[0].name} only, not '{other.name}'"
        ):
            other.check_keywords({keyword: object()})
    if keyword in ("p_real", "simulator"):  # the settings a command takes: refused before any env is made
        value = 0.3 if keyword == "p_real" else "oracle"
        with pytest.raises(ValueError, match=f"{keyword} applies to dynamics {owners[0].name} only, not 'real'"):
            RunConfig("EnvACE/tau2-retail-v0", **{keyword: value})
        RunConfig("EnvACE/tau2-retail-v0", dynamics=owners[0].name, **{keyword: value})


def test_an_entry_says_who_answers_a_call():
    import numpy as np

    rng = np.random.default_rng(0)
    assert DYNAMICS["real"].who_answers("f", {}, rng, 0.5, None) == ("world", None)
    assert DYNAMICS["rehearsed"].who_answers("f", {}, rng, 0.5, None) == ("policy", None)
    assert DYNAMICS["mixed"].who_answers("f", {}, rng, 1.0, None) == ("world", None)
    assert DYNAMICS["mixed"].who_answers("f", {}, rng, 0.0, None) == ("policy", None)
    who, route = DYNAMICS["adaptive"].who_answers("f", {}, rng, 0.5, FidelityRouter())
    assert who == "shadow" and route is not None  # a new router trusts no tool yet
