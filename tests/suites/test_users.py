"""The scripted and LLM users; the LLM user talks to a local OpenAI-compatible HTTP server."""

import gymnasium as gym
import pytest
from fakes import FakeChatServer
from helpers import free_port

import envace_gym  # noqa: F401
from envace_gym.openai_client import ModelServerError
from envace_gym.suites.tau2 import get_suite
from envace_gym.suites.tau2.users import LLMUser, ScriptedUser


def test_scripted_user_opening_identity_and_confirmation():
    suite = get_suite("retail")
    task = suite.task("5")
    user = ScriptedUser(suite, task)
    world = suite.new_world(task)
    assert "28236" in user.opening(world)
    assert "mei_kovacs_8020" in user.reply("Could you please tell me your email or name and zip code?", world).text
    assert user.reply("Do you confirm the exchange (yes/no)?", world).text.startswith("Yes")
    assert user.reply("All done. ###STOP###", world).stop


def test_scripted_user_stops_after_its_turn_limit():
    suite = get_suite("retail")
    user = ScriptedUser(suite, suite.task("5"), max_turns=2)
    world = suite.new_world(suite.task("5"))
    assert [user.reply("hmm", world).stop for _ in range(3)] == [False, False, True]


def test_scripted_user_ends_after_five_replies_in_a_row_with_nothing_to_answer():
    suite = get_suite("retail")
    user = ScriptedUser(suite, suite.task("5"))
    world = suite.new_world(suite.task("5"))
    said = [user.reply("Here is an update on your order.", world) for _ in range(4)]
    assert not any(r.stop for r in said) and "anything else" in said[-1].text
    assert user.reply("Do you confirm (yes/no)?", world).text.startswith("Yes")  # an answer resets the count
    assert [user.reply("Noted.", world).stop for _ in range(5)] == [False] * 4 + [True]


def test_scripted_telecom_user_acts_on_the_phone_when_asked():
    suite = get_suite("telecom")
    task_id = suite.task_ids("base")[0]
    task = suite.task(task_id)
    user = ScriptedUser(suite, task)
    world = suite.new_world(task)
    user_calls = [c for c in suite.gold_calls(task) if c["requestor"] == "user"]
    name = user_calls[0]["name"]
    reply = user.reply(f"Please run {name} on your phone.", world)
    assert [c.name for c in reply.calls] == [name] and reply.calls[0].requestor == "user"
    assert reply.calls[0].error is None


def test_llm_user_prompt_and_stop(server):
    url, _ = server
    FakeChatServer.replies = [
        {"role": "assistant", "content": "Hi, I want to exchange two items."},
        {"role": "assistant", "content": "Thanks! ###STOP###"},
    ]
    env = gym.make("EnvACE/tau2-retail-v0", user="llm", user_kwargs={"base_url": url, "model": "sim"})
    obs, _ = env.reset(options={"task_id": "5"})
    assert obs["messages"][-1]["content"] == "Hi, I want to exchange two items."
    system = FakeChatServer.requests[0]["messages"][0]["content"]
    assert "<scenario>" in system and "mei_kovacs_8020" in system
    assert FakeChatServer.requests[0]["messages"][1] == {"role": "user", "content": "Hi! How can I help you today?"}
    *_, terminated, truncated, info = env.step("Done, goodbye.")
    assert terminated and info["ended_by"] == "user_stop"


def test_llm_user_runs_validated_user_tools_in_telecom(server):
    url, _ = server
    call = {"id": "u1", "type": "function", "function": {"name": "check_status_bar", "arguments": "{}"}}
    bad = {"id": "u2", "type": "function", "function": {"name": "__init__", "arguments": "{}"}}
    FakeChatServer.replies = [
        {"role": "assistant", "content": "My data does not work."},
        {"role": "assistant", "content": None, "tool_calls": [call, bad]},
        {"role": "assistant", "content": "The status bar shows no data."},
    ]
    env = gym.make("EnvACE/tau2-telecom-v0", user="llm", user_kwargs={"base_url": url, "model": "sim"})
    env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    obs, *_ = env.step("What does your status bar show?")
    assert obs["messages"][-1]["content"] == "The status bar shows no data."
    calls = env.unwrapped.episode.calls
    assert [(c.name, c.source, c.error) for c in calls] == [
        ("check_status_bar", "real", None),
        ("__init__", "rejected", "unknown_tool"),
    ]
    assert FakeChatServer.requests[1]["tools"][0]["type"] == "function"


def test_dead_server_is_a_clear_error_and_keeps_the_episode(server):
    url, httpd = server
    FakeChatServer.replies = [{"role": "assistant", "content": "Hello, I need help."}]
    env = gym.make(
        "EnvACE/tau2-retail-v0",
        user="llm",
        user_kwargs={"base_url": url, "model": "sim", "max_retries": 1, "timeout": 2},
    )
    env.reset(options={"task_id": "5"})
    env.step(
        '<tool_call>{"name": "find_user_id_by_email", "arguments": {"email": "mei.kovacs8232@example.com"}}</tool_call>'
    )
    httpd.shutdown()
    httpd.server_close()
    before = list(env.unwrapped.episode.messages)
    *_, terminated, truncated, info = env.step("Anything else?")
    assert terminated and info["ended_by"] == "error"
    assert "cannot reach the model server at " + url in info["error"]
    assert env.unwrapped.episode.messages[: len(before)] == before
    assert env.unwrapped.episode.calls[0].error is None


def test_unreachable_server_at_reset_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    suite = get_suite("retail")
    user = LLMUser(suite, suite.task("5"), base_url=url, model="m", max_retries=0, timeout=2)
    with pytest.raises(ModelServerError, match=url):
        user.opening(suite.new_world(suite.task("5")))
