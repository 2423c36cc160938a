"""The act/rehearse step protocol (docs/contract/index.md) on the tau2 suites."""

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import play

import envace_gym
from envace_gym import agents

ORDER_CALL = '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W2378156"}}\n</tool_call>'
INFO_KEYS = {"role", "dynamics", "task_id", "turn", "tool_calls"}


@pytest.mark.parametrize("env_id", list(envace_gym.ENV_IDS))
@pytest.mark.parametrize("dynamics", ["real", "rehearsed"])
def test_check_env(env_id, dynamics):
    env = gym.make(env_id, dynamics=dynamics)
    check_env(env.unwrapped, skip_render_check=True)


def test_design_example_rehearsed():
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
    obs, info = env.reset(seed=0, options={"task_id": "5"})
    assert obs["role"] == "act" and obs["tools"][0]["type"] == "function"
    assert INFO_KEYS <= set(info) and info["dynamics"] == "rehearsed" and info["task_id"] == "5"
    obs, r, terminated, truncated, info = env.step(ORDER_CALL)
    assert obs["role"] == "rehearse" and obs["tool_call"]["name"] == "get_order_details"
    assert obs["messages"][-1]["tool_calls"][0]["function"]["arguments"] == {"order_id": "#W2378156"}
    assert info["tool_calls"] == []
    obs, r, terminated, truncated, info = env.step('{"order_id": "#W2378156", "status": "delivered"}')
    assert obs["role"] == "act" and not (terminated or truncated)
    assert obs["messages"][-1]["role"] == "tool"
    assert json.loads(obs["messages"][-1]["content"]) == {"order_id": "#W2378156", "status": "delivered"}
    assert info["tool_calls"][0]["source"] == "rehearsed" and info["tool_calls"][0]["error"] is None


def test_real_has_no_rehearse_turn_and_the_response_is_in_the_next_obs():
    env = gym.make("EnvACE/tau2-retail-v0")
    env.reset(seed=0, options={"task_id": "5"})
    obs, *_, info = env.step(ORDER_CALL)
    assert obs["role"] == "act"
    assert json.loads(obs["messages"][-1]["content"])["order_id"] == "#W2378156"
    assert info["tool_calls"][0]["source"] == "real"


@pytest.mark.parametrize("dynamics", ["real", "rehearsed", "mixed", "shadow", "replay"])
def test_same_error_for_rejected_calls_under_every_dynamics(dynamics):
    env = gym.make("EnvACE/tau2-retail-v0", dynamics=dynamics)
    env.reset(seed=0, options={"task_id": "5"})
    bad = (
        '<tool_call>{"name": "no_tool", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "get_order_details", "arguments": {"order_id": 5}}</tool_call>'
        '<tool_call>{"name": "get_order_details", oops}</tool_call>'
    )
    obs, *_, info = env.step(bad)
    assert obs["role"] == "act"
    assert [c["error"] for c in info["tool_calls"]] == ["unknown_tool", "invalid_arguments", "malformed_call"]
    assert {c["source"] for c in info["tool_calls"]} == {"rejected"}


def test_execution_error_is_structured():
    env = gym.make("EnvACE/tau2-retail-v0")
    env.reset(seed=0, options={"task_id": "5"})
    obs, *_, info = env.step('<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0"}}</tool_call>')
    assert info["tool_calls"][0]["error"] == "execution_error"
    assert json.loads(obs["messages"][-1]["content"])["error"]["code"] == "execution_error"


def test_shadow_keeps_the_real_response_and_logs_fidelity():
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="shadow")
    env.reset(seed=0, options={"task_id": "5"})
    obs, *_ = env.step(ORDER_CALL)
    assert obs["role"] == "rehearse"
    obs, *_, info = env.step('{"order_id": "#W2378156", "status": "pending"}')
    record = info["tool_calls"][0]
    assert record["source"] == "real" and json.loads(record["rehearsed"])["status"] == "pending"
    real = json.loads(obs["messages"][-1]["content"])
    assert real["status"] != "pending" and len(real) > 2
    assert 0 < record["fidelity"]["shape"] < 1 and record["fidelity"]["exact"] is False


def test_mixed_draws_real_and_rehearsed_reproducibly():
    def sources(seed):
        env = gym.make("EnvACE/tau2-retail-v0", dynamics="mixed", p_real=0.5, split=None)
        oracle = agents.load("oracle", env=env)
        out = []
        for tid in ["5", "9", "10"]:
            _, _, infos = play(env, oracle, tid, seed=seed)
            out += [c["source"] for i in infos for c in i["tool_calls"]]
        return out

    first = sources(3)
    assert set(first) == {"real", "rehearsed"} and first == sources(3)


def test_replay_answers_from_the_gold_recordings():
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="replay", reward="replay")
    reward, info, infos = play(env, agents.load("oracle", env=env), "5")
    assert reward == 1.0 and {c["source"] for i in infos for c in i["tool_calls"]} == {"replay"}
    env.reset(options={"task_id": "5"})
    _, *_, info = env.step('<tool_call>{"name": "find_user_id_by_email", "arguments": {"email": "x@y.z"}}</tool_call>')
    assert info["tool_calls"][0]["error"] == "no_recording"


def test_simulated_dynamics_uses_the_simulator_inside_step():
    env = gym.make("EnvACE/tau2-retail-v0")
    env.unwrapped.simulator = agents.load("oracle", env=env)  # a perfect, frozen world model
    reward, info, infos = play(env, agents.load("oracle", env=env), "5", dynamics="simulated")
    assert all(i["role"] == "act" for i in infos)
    assert {c["source"] for i in infos for c in i["tool_calls"]} == {"simulated"}
    assert reward == 1.0 and info["reward_source"] == "actions"


def test_simulated_without_simulator_is_refused():
    with pytest.raises(ValueError, match="simulator"):
        gym.make("EnvACE/tau2-retail-v0", dynamics="simulated")


def test_world_reward_refused_without_a_real_world():
    with pytest.raises(ValueError, match="replay"):
        gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed", reward="world")


def test_dynamics_override_per_episode():
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="real")
    obs, info = env.reset(options={"task_id": "5", "dynamics": "rehearsed"})
    assert info["dynamics"] == "rehearsed"
    assert env.step(ORDER_CALL)[0]["role"] == "rehearse"
    _, info = env.reset(options={"task_id": "5"})
    assert info["dynamics"] == "real"


def test_default_rewards_by_dynamics():
    env = gym.make("EnvACE/tau2-retail-v0")
    oracle = agents.load("oracle", env=env)
    assert play(env, oracle, "5")[1]["reward_source"] == "world"
    assert play(env, oracle, "5", dynamics="rehearsed")[1]["reward_source"] == "actions"


def test_max_turns_truncates():
    env = gym.make("EnvACE/tau2-retail-v0", max_turns=3)
    env.reset(options={"task_id": "5"})
    results = [env.step("Could you tell me more?") for _ in range(3)]
    *_, terminated, truncated, info = results[-1]
    assert truncated and not terminated and info["reward_info"]["note"].startswith("episode truncated")
    with pytest.raises(RuntimeError):
        env.step("again")


def test_transfer_terminates():
    env = gym.make("EnvACE/tau2-retail-v0")
    env.reset(options={"task_id": "5"})
    *_, terminated, truncated, info = env.step(
        '<tool_call>{"name": "transfer_to_human_agents", "arguments": {"summary": "help"}}</tool_call>'
    )
    assert terminated and info["ended_by"] == "transfer"


def test_seeded_reset_is_reproducible_and_picks_tasks():
    env = gym.make("EnvACE/tau2-retail-v0")
    a = [env.reset(seed=s)[1]["task_id"] for s in range(6)]
    b = [env.reset(seed=s)[1]["task_id"] for s in range(6)]
    assert a == b and len(set(a)) > 1


def test_render_ansi_returns_the_transcript():
    env = gym.make("EnvACE/tau2-retail-v0", render_mode="ansi")
    env.reset(options={"task_id": "5"})
    env.step(ORDER_CALL)
    text = env.render()
    assert "[user]" in text and "get_order_details" in text and "[tool]" in text


def test_make_vec_sync():
    envs = gym.make_vec("EnvACE/tau2-retail-v0", num_envs=8, vectorization_mode="sync")
    obs, infos = envs.reset(seed=0)
    assert len(obs) == 8 and all(o["role"] == "act" for o in obs)
    obs, rewards, terminated, truncated, infos = envs.step([ORDER_CALL] * 8)
    assert len(rewards) == 8 and all(o["role"] == "act" for o in obs)
    envs.close()


def test_interleaved_episodes_keep_separate_states():
    cancel = (
        '<tool_call>{"name": "cancel_pending_order", "arguments": {"order_id": "%s", '
        '"reason": "no longer needed"}}</tool_call>'
    )
    e1, e2 = gym.make("EnvACE/tau2-retail-v0"), gym.make("EnvACE/tau2-retail-v0")
    e1.reset(options={"task_id": "5"})
    e2.reset(options={"task_id": "5"})
    details = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "%s"}}</tool_call>'
    pending = [o for o, v in e1.unwrapped.episode.world.env.tools.db.orders.items() if v.status == "pending"][0]
    e1.step(cancel % pending)
    s1 = json.loads(e1.step(details % pending)[0]["messages"][-1]["content"])["status"]
    s2 = json.loads(e2.step(details % pending)[0]["messages"][-1]["content"])["status"]
    assert (s1, s2) == ("cancelled", "pending")


def test_fork_shares_no_state_with_the_real_world():
    env = gym.make("EnvACE/tau2-retail-v0")
    env.reset(options={"task_id": "5"})
    pending = [o for o, v in env.unwrapped.episode.world.env.tools.db.orders.items() if v.status == "pending"][0]
    fork = env.unwrapped.fork(dynamics="rehearsed")
    fork.dynamics = "real"
    fork.episode.dynamics = "real"
    fork.step(
        f'<tool_call>{{"name": "cancel_pending_order", "arguments": {{"order_id": "{pending}", '
        '"reason": "no longer needed"}}</tool_call>'
    )
    assert fork.episode.world.env.tools.db.orders[pending].status == "cancelled"
    assert env.unwrapped.episode.world.env.tools.db.orders[pending].status == "pending"
    assert len(fork.episode.messages) == len(env.unwrapped.episode.messages) + 2
    rehearsing = env.unwrapped.fork(dynamics="rehearsed")
    assert rehearsing.step(ORDER_CALL)[0]["role"] == "rehearse"
    assert env.unwrapped.episode.dynamics == "real"


def test_random_agent_plays_to_the_end_without_errors():
    env = gym.make("EnvACE/tau2-retail-v0", max_turns=15)
    rand = agents.load("random", env=env, seed=0)
    for dynamics in ("real", "rehearsed"):
        reward, info, infos = play(env, rand, "5", dynamics=dynamics)
        assert info["ended_by"] in {"max_turns", "user_stop", "transfer"}
        errors = {c["error"] for i in infos for c in i["tool_calls"]}
        assert errors & {"unknown_tool", "malformed_call", None}
