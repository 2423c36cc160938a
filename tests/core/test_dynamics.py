"""The dynamics registry: each entry's attributes decide what an episode under it does."""

import re

import gymnasium as gym
import pytest
from helpers import play

import envace_gym
from envace_gym import agents
from envace_gym.dynamics import DYNAMICS, Dynamics, get

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
