"""Model agents on real generation: the tiny local model, SmolLM2 from its PyPI package, and the
OpenAI-compatible client (against a local HTTP server speaking the chat-completions protocol)."""

import json

import gymnasium as gym
import pytest
from fakes import FakeChatServer

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.prompting import render_prompt
from envace_gym.core.errors import error_code_of
from envace_gym.openai_client import ModelServerError

transformers = pytest.importorskip("transformers", reason="model agents need transformers and torch")
CALL = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W2378156"}}</tool_call>'


def _rehearse_obs(**kwargs):
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed", **kwargs)
    act_obs, _ = env.reset(options={"task_id": "5"})
    obs, *_ = env.step(CALL)
    return env, act_obs, obs


def test_tiny_model_generates_with_ids_and_logprobs(tiny):
    agent = agents.load(f"hf:{tiny}", max_new_tokens=12, temperature=1.0, seed=1)
    env, act_obs, rehearse_obs = _rehearse_obs()
    gens = agent.generate([act_obs, rehearse_obs])
    for obs, g in zip([act_obs, rehearse_obs], gens):
        prompt, _ = render_prompt(agent.tokenizer, obs)
        assert g.prompt_ids == agent.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        assert 0 < len(g.completion_ids) == len(g.logprobs) <= 12
        assert all(lp <= 0.0 for lp in g.logprobs)
    again = agents.load(f"hf:{tiny}", max_new_tokens=12, temperature=1.0, seed=1).generate([act_obs, rehearse_obs])
    assert [g.completion_ids for g in again] == [g.completion_ids for g in gens]  # seeded sampling


def test_inline_rehearsal_prompt_extends_the_act_prompt(tiny):
    agent = agents.load(f"hf:{tiny}", max_new_tokens=4)
    _, act_obs, rehearse_obs = _rehearse_obs()
    act_prompt, act_stop = render_prompt(agent.tokenizer, act_obs)
    prompt, stop = render_prompt(agent.tokenizer, rehearse_obs)
    assert act_stop is None and stop == "</tool_response>"
    assert prompt.startswith(act_prompt) and prompt.endswith("<tool_response>\n")


def test_batched_greedy_generation_matches_one_by_one(tiny):
    agent = agents.load(f"hf:{tiny}", max_new_tokens=8, batch_size=4)
    env = gym.make("EnvACE/tau2-retail-v0", split=None)
    observations = [env.reset(options={"task_id": t})[0] for t in ("5", "9", "10")]
    batched = agent.generate(observations)
    single = [agent.generate([o])[0] for o in observations]
    assert [g.completion_ids for g in batched] == [g.completion_ids for g in single]


def test_tiny_model_plays_whole_episodes_in_both_roles(tiny):
    agent = agents.load(f"hf:{tiny}", max_new_tokens=16, temperature=1.0)
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed", max_turns=3)
    obs, _ = env.reset(options={"task_id": "5"})
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        done = terminated or truncated
    assert info["ended_by"] in {"max_turns", "user_stop", "transfer"}


@pytest.mark.slow
def test_smollm2_rehearses_real_retail_calls():
    smollm2 = agents.load("smollm2", max_new_tokens=24)
    env, _, obs = _rehearse_obs()
    assert smollm2.tokenizer.chat_template and "<tool_response>" in smollm2.tokenizer.chat_template
    obs, *_, info = env.step(smollm2.act(obs))
    value = json.loads(obs["messages"][-1]["content"])
    assert isinstance(value, (dict, list))
    assert info["tool_calls"][0]["error"] in {None, "malformed_response"} or error_code_of(value)


def test_openai_agent_reads_structured_tool_calls_and_text(server):  # noqa: F811
    url, _ = server
    FakeChatServer.replies = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "get_order_details", "arguments": '{"order_id": "#W2378156"}'},
                }
            ],
        },
        {"role": "assistant", "content": '<tool_response>{"status": "x"}</tool_response>'},
    ]
    agent = agents.load(f"openai:sim@{url}")
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
    obs, _ = env.reset(options={"task_id": "5"})
    obs, *_ = env.step(agent.act(obs))
    assert obs["role"] == "rehearse" and obs["tool_call"]["arguments"] == {"order_id": "#W2378156"}
    sent = FakeChatServer.requests[0]
    assert sent["tools"][0]["type"] == "function" and sent["messages"][0]["role"] == "system"
    obs, *_, info = env.step(agent.act(obs))
    assert json.loads(obs["messages"][-1]["content"]) == {"status": "x"}
    rehearse_request = FakeChatServer.requests[1]
    assert "tools" not in rehearse_request and "tool executor" in rehearse_request["messages"][0]["content"]
    assert (
        json.loads(rehearse_request["messages"][1]["content"].split("## Call to answer\n")[1])["name"]
        == "get_order_details"
    )


def test_openai_agent_dead_server_names_the_url():
    agent = agents.load("openai:m@http://127.0.0.1:9/v1", max_retries=0, timeout=2)
    env = gym.make("EnvACE/tau2-retail-v0")
    obs, _ = env.reset(options={"task_id": "5"})
    with pytest.raises(ModelServerError, match="127.0.0.1:9"):
        agent.act(obs)
