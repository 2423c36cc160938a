"""Hypothesis fuzz of act and rehearse actions: step never raises, rejected calls never touch the world."""

import json

import gymnasium as gym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envace_gym  # noqa: F401
from envace_gym.core.state import dump

ENV = gym.make("EnvACE/tau2-retail-v0", dynamics="real").unwrapped
REHEARSE = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed").unwrapped
NAMES = ENV.tools.names + ["__import__", "__init__", "tools", "db", "use_tool", "_get_order", "x.y"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=20,
)
calls = st.builds(
    lambda n, a: {"name": n, "arguments": a},
    st.sampled_from(NAMES),
    st.dictionaries(
        st.sampled_from(["order_id", "user_id", "email", "reason", "item_ids", "x"]), json_values, max_size=4
    ),
)
blocks = st.one_of(
    calls.map(lambda c: f"<tool_call>{json.dumps(c)}</tool_call>"),
    st.text(max_size=200).map(lambda t: f"<tool_call>{t}</tool_call>"),
    st.text(max_size=200),
    st.just("<tool_call>"),
    st.just("</tool_call>"),
    st.just("<tool_call>" + "{" * 3000),
)
act_actions = st.one_of(
    st.lists(blocks, min_size=1, max_size=4).map("".join),
    st.builds(lambda c: {"content": None, "tool_calls": [c]}, json_values),
    json_values,
)


def _world_state(env):
    db = env.episode.world.env.tools.db
    return {
        name: dump({k: getattr(db, name).peek(k).model_dump() for k in getattr(db, name).touched()})
        for name in ("users", "orders", "products")
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(act_actions)
def test_act_fuzz_never_raises_and_rejected_calls_change_nothing(action):
    ENV.reset(seed=0, options={"task_id": "5"})
    before = _world_state(ENV)
    obs, reward, terminated, truncated, info = ENV.step(action)
    assert ENV.observation_space.contains(obs)
    for record in info["tool_calls"]:
        assert record["source"] in {"real", "rejected"}
        assert record["error"] is None or isinstance(record["error"], str)
    if all(r["source"] == "rejected" for r in info["tool_calls"]):
        assert _world_state(ENV) == before


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.text(max_size=300),
        json_values.map(json.dumps),
        json_values,
        st.text(max_size=50).map(lambda t: f"<tool_response>{t}</tool_response>"),
        st.integers(1, 200).map(lambda n: "[" * n * 10 + "]" * n * 10),
    )
)
def test_rehearse_fuzz_never_raises(action):
    REHEARSE.reset(seed=0, options={"task_id": "5"})
    obs, *_ = REHEARSE.step('<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W1"}}</tool_call>')
    assert obs["role"] == "rehearse"
    obs, reward, terminated, truncated, info = REHEARSE.step(action)
    assert obs["role"] == "act" and REHEARSE.observation_space.contains(obs)
    content = json.loads(obs["messages"][-1]["content"])
    assert isinstance(content, (dict, list))
    assert info["tool_calls"][0]["source"] == "rehearsed"
