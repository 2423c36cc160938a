"""Rehearse prompts, rehearsal error counting and self-rehearsal."""

import gymnasium as gym
import pytest
from helpers import play

import envace_gym
from envace_gym import agents

DETAILS = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "%s"}}</tool_call>'


def test_prompted_rehearse_prompt_has_schema_examples_history_and_call():
    cache = envace_gym.ResponseCache(per_tool=2)
    real = gym.make("EnvACE/tau2-retail-v0", response_cache=cache)
    real.reset(options={"task_id": "5"})
    real.step(DETAILS % "#W2378156")
    assert [a["order_id"] for a, _ in cache.get("get_order_details")] == ["#W2378156"]

    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed", rehearsal_format="prompted", response_cache=cache)
    env.reset(options={"task_id": "5"})
    obs, *_ = env.step(DETAILS % "#W4967593")
    assert obs["role"] == "rehearse" and obs["tools"] == []
    system, user = obs["messages"]
    assert "tool executor" in system["content"] and '"error"' in system["content"]
    text = user["content"]
    assert '"name": "get_order_details"' in text.split("## Earlier")[0]  # the schema
    assert "#W2378156" in text.split("## Conversation")[0]  # an example from the cache
    assert "28236" in text  # the conversation so far
    assert text.rstrip().endswith('{"name": "get_order_details", "arguments": {"order_id": "#W4967593"}}')
    assert env.unwrapped.observation_space.contains(obs)


def test_inline_rehearse_prompt_is_the_conversation():
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
    obs, _ = env.reset(options={"task_id": "5"})
    before = obs["messages"]
    obs, *_ = env.step(DETAILS % "#W2378156")
    assert obs["messages"][: len(before)] == before and obs["messages"][-1]["role"] == "assistant"


def test_bad_rehearsals_are_counted():
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
    env.reset(options={"task_id": "5"})
    env.step(DETAILS % "#W2378156")
    *_, info = env.step("the order is fine")
    assert info["rehearsal_errors"] == 1 and info["tool_calls"][0]["error"] == "malformed_response"
    env.step(DETAILS % "#W2378156")
    *_, info = env.step('{"status": "ok"}')
    assert info["rehearsal_errors"] == 1


def test_self_rehearsal_hides_rehearse_turns():
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
    oracle = agents.load("oracle", env=env)
    with pytest.warns(DeprecationWarning, match="dynamics='simulated', simulator=agent"):
        wrapped = envace_gym.SelfRehearsal(env, oracle)
    reward, info, infos = play(wrapped, oracle, "5")
    assert all(i["role"] == "act" for i in infos)
    assert sum(len(i["tool_calls"]) for i in infos) == 5
    assert reward == 1.0
    # its replacement: the same world, the agent answering inside step
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="simulated", simulator="oracle")
    reward, info, infos = play(env, agents.load("oracle", env=env), "5")
    assert all(i["role"] == "act" for i in infos) and reward == 1.0
    assert {c["source"] for i in infos for c in i["tool_calls"]} == {"simulated"}
