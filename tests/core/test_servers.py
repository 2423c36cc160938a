"""Model servers that misbehave (malformed, slow, huge or failing replies): always one clear
ModelServerError within the stated time, for the judge, the openai agent, `run` and training."""

import json
import time

import gymnasium as gym
import pandas as pd
import pytest
from fakes import FakeChatServer, Raw
from helpers import play
from typer.testing import CliRunner

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.cli import app
from envace_gym.openai_client import ChatEndpoint, ModelServerError
from envace_gym.rewards import JudgeReward

CHAT = {"role": "user", "content": "hi"}


def _completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        }
    ).encode()


MALFORMED = {
    "truncated JSON": Raw(_completion("fine")[:40]),
    "HTML": Raw(b"<html><body>502 Bad Gateway</body></html>", content_type="text/html"),
    "not UTF-8": Raw(b"\xff\xfe{}"),
    "a list": Raw(b"[1, 2]"),
    "no choices": Raw(b'{"id": "x"}'),
    "empty choices": Raw(b'{"choices": []}'),
    "no message": Raw(b'{"choices": [{"index": 0}]}'),
    "message not an object": Raw(b'{"choices": [{"message": "hi"}]}'),
    "content not text": Raw(b'{"choices": [{"message": {"role": "assistant", "content": 5}}]}'),
    "a broken tool call": Raw(
        b'{"choices": [{"message": {"role": "assistant", "content": null, '
        b'"tool_calls": [{"id": "t", "function": "get_order_details"}]}}]}'
    ),
    "over the size limit": Raw(_completion("x" * (5 << 20))),
    "over the size limit, undeclared": Raw(_completion("x" * (5 << 20)), declare_length=False),
}


@pytest.mark.parametrize("reply", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_reply_is_a_model_server_error_naming_the_url(server, reply):
    url, _ = server
    FakeChatServer.replies = [reply]
    agent = agents.load(f"openai:m@{url}", max_retries=0, timeout=10)
    env = gym.make("EnvACE/tau2-retail-v0")
    obs, _ = env.reset(options={"task_id": "5"})
    with pytest.raises(ModelServerError, match=url):
        agent.act(obs)


@pytest.mark.parametrize("reply", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_judge_reply_ends_the_step_with_an_error_not_an_exception(server, reply):
    url, _ = server
    FakeChatServer.replies = [reply]
    env = gym.make(
        "EnvACE/tau2-airline-v0", dynamics="rehearsed", reward=JudgeReward("grader", url, max_retries=0, timeout=10)
    )
    reward, info, _ = play(env, agents.load("oracle", env=env), task_id=env.unwrapped.task_ids[0])
    assert reward == 0.0 and url in info["error"] and info["reward_source"] == "judge"


def test_a_huge_reply_is_refused_before_it_is_read_whole(server):
    url, _ = server
    FakeChatServer.replies = [Raw(_completion("x" * 5000))]
    with pytest.raises(ModelServerError, match="over 1000 bytes"):
        ChatEndpoint(url, "m", max_retries=0, max_reply_bytes=1000).chat([CHAT])


@pytest.mark.parametrize(
    "reply", [Raw(_completion("late"), delay=10), Raw(_completion("slow"), pace=0.2)], ids=["hanging", "trickling"]
)
def test_timeout_bounds_the_whole_call_retries_included(server, reply):
    url, _ = server
    FakeChatServer.replies = [reply] * 4
    endpoint = ChatEndpoint(url, "m", timeout=1, max_retries=3)
    start = time.monotonic()
    with pytest.raises(ModelServerError, match=f"{url} did not answer within 1 s"):
        endpoint.chat([CHAT])
    assert time.monotonic() - start < 3


def test_server_errors_are_retried_while_time_is_left(server):
    url, _ = server
    FakeChatServer.replies = [Raw(b'{"error": "busy"}', status=503), {"role": "assistant", "content": "ok"}]
    assert ChatEndpoint(url, "m", timeout=10, max_retries=1).chat([CHAT]).content == "ok"
    FakeChatServer.replies = [Raw(b'{"error": {"message": "overloaded"}}', status=503)] * 2
    with pytest.raises(ModelServerError, match=f"{url} answered 503: .*overloaded"):
        ChatEndpoint(url, "m", timeout=10, max_retries=1).chat([CHAT])
    FakeChatServer.requests = []
    FakeChatServer.replies = [Raw(b'{"error": "no such model"}', status=404)]
    with pytest.raises(ModelServerError, match="answered 404"):
        ChatEndpoint(url, "m", timeout=10, max_retries=3).chat([CHAT])
    assert len(FakeChatServer.requests) == 1  # a client error is not retried


def test_a_judge_spec_takes_the_endpoint_options(server):
    url, _ = server
    FakeChatServer.replies = [Raw(_completion('{"score": 1}'), delay=10)] * 2
    env = gym.make("EnvACE/tau2-airline-v0", dynamics="rehearsed", reward=f"judge:grader@{url}?timeout=1&max_retries=1")
    endpoint = env.unwrapped.reward.endpoint
    assert (endpoint.base_url, endpoint.model, endpoint.timeout, endpoint.max_retries) == (url, "grader", 1, 1)
    start = time.monotonic()
    reward, info, _ = play(env, agents.load("oracle", env=env), task_id=env.unwrapped.task_ids[0])
    assert reward == 0.0 and "did not answer within 1 s" in info["error"] and time.monotonic() - start < 3
    agent = agents.load(f"openai:m@{url}?max_reply_bytes=100&timeout=2.5")
    assert (agent.endpoint.base_url, agent.endpoint.timeout, agent.endpoint.max_reply_bytes) == (url, 2.5, 100)


@pytest.mark.parametrize(
    "spec",
    [
        "judge:m@http://h/v1?timeout=soon",
        "judge:m@http://h/v1?retries=2",
        "judge:m@http://h/v1?timeout=0",
        "judge:m@http://h/v1?max_retries=-1",
        "judge:m@http://h/v1?timeout=nan",
        "judge:m@http://h/v1?timeout",
    ],
)
def test_bad_endpoint_options_are_refused(spec):
    with pytest.raises(ValueError, match="timeout|max_retries"):
        gym.make("EnvACE/tau2-retail-v0", reward=spec)


def test_run_survives_a_dead_agent_server_and_writes_every_record(tmp_path):
    out = tmp_path / "run.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "EnvACE/tau2-retail-v0",
            "--agent",
            "openai:m@http://127.0.0.1:9/v1?timeout=2&max_retries=0",
            "--task-ids",
            "5,6",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 1, result.output  # the run goes on, says which tasks failed, and exits 1
    assert "task 5 (seed 0) failed" in result.output and "task 6 (seed 1) failed" in result.output
    frame = pd.read_json(out, lines=True)
    assert list(frame.task_id.astype(str)) == ["5", "6"]
    assert (frame.ended_by == "agent_error").all() and (frame.reward == 0.0).all()
    assert frame.error.str.contains("cannot reach the model server at http://127.0.0.1:9/v1").all()


def test_training_leaves_out_episodes_whose_reward_failed_and_logs_them(server, tiny, tmp_path):
    from envace_gym.training import TrainConfig, Trainer

    url, _ = server
    # the scripted user ends each episode at the agent's first message, so every episode is judged
    config = TrainConfig(
        model=f"hf:{tiny}",
        env_id="EnvACE/tau2-retail-v0",
        out=str(tmp_path),
        group_size=2,
        tasks_per_step=1,
        steps=2,
        max_new_tokens=8,
        max_turns=4,
        eval_every=0,
        seed=0,
        reward=f"judge:grader@{url}?max_retries=0",
        env_kwargs={"user_kwargs": {"max_turns": 0}},
    )
    failed = Raw(b'{"error": "judge down"}', status=500)
    FakeChatServer.replies = [failed, {"role": "assistant", "content": '{"score": 1}'}, failed, failed]
    trainer = Trainer(config)
    updates = []
    update = trainer.update
    trainer.update = lambda rollouts: updates.append(rollouts) or update(rollouts)
    trainer.train()
    first, second = map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
    assert len(FakeChatServer.requests) == 4
    assert first["reward_errors"] == 1 and first["reward"] == 1.0 and "answered 500" in first["reward_error"]
    assert second["reward_errors"] == 2 and second["reward"] is None
    assert len(updates) == 1 and [r.reward for r in updates[0]] == [1.0]  # nothing learnt from a failed reward
    assert [r["lr"] for r in (first, second)] == pytest.approx([1e-5, 5e-6])  # the schedule still advances
