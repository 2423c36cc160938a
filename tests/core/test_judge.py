"""The LLM-judge reward: its prompt, its strict reading of the verdict, and a dead judge."""

import json

import gymnasium as gym
import pytest
from fakes import FakeChatServer
from helpers import play

import envace_gym  # noqa: F401
from envace_gym import agents


def _env(url, **kw):
    return gym.make("EnvACE/tau2-airline-v0", dynamics="rehearsed", reward=f"judge:grader@{url}", **kw)


def test_judge_scores_the_episode_from_the_criteria_and_transcript(server):
    url, _ = server
    FakeChatServer.replies = [{"role": "assistant", "content": '{"score": 0.75, "reason": "mostly right"}'}]
    env = _env(url)
    task_id = env.unwrapped.task_ids[0]
    reward, info, _ = play(env, agents.load("oracle", env=env), task_id=task_id)
    assert reward == 0.75 and info["reward_source"] == "judge"
    assert info["reward_info"]["judge"] == {"score": 0.75, "model": "grader"}  # its reason may restate the gold
    (request,) = FakeChatServer.requests
    prompt = request["messages"][1]["content"]
    task = env.unwrapped.suite.task(task_id)
    assert all(a in prompt for a in task.data.evaluation_criteria.nl_assertions)
    assert "send_certificate" in prompt and env.unwrapped.suite.system_prompt(task)[:200] not in prompt
    assert request["model"] == "grader" and request["temperature"] == 0.0
    FakeChatServer.replies = [{"role": "assistant", "content": '{"score": 0.75, "reason": "mostly right"}'}]
    env = _env(url, gold_in_info=True)  # the user's own records may keep it
    _, kept, _ = play(env, agents.load("oracle", env=env), task_id=task_id)
    assert kept["reward_info"]["judge"]["reason"] == "mostly right"


@pytest.mark.parametrize(
    "reply",
    [
        "I think it went well",
        '{"score": 1.5}',
        '{"score": "1"}',
        '{"score": true}',
        '{"reason": "no score"}',
        "[0.9]",
        '{"score": ' + "9" * 400_000 + "}",
    ],
)
def test_a_malformed_verdict_is_zero_with_a_structured_error(server, reply):
    url, _ = server
    FakeChatServer.replies = [{"role": "assistant", "content": reply}]
    env = _env(url)
    reward, info, _ = play(env, agents.load("oracle", env=env), task_id=env.unwrapped.task_ids[0])
    assert reward == 0.0 and info["reward_info"]["error"]["code"] == "malformed_judgement"
    assert len(json.dumps(info["reward_info"])) < 2000


def test_a_dead_judge_ends_the_episode_with_an_error_and_loses_nothing():
    env = _env("http://127.0.0.1:9/v1?max_retries=0")
    reward, info, _ = play(env, agents.load("oracle", env=env), task_id=env.unwrapped.task_ids[0])
    assert reward == 0.0 and "127.0.0.1:9" in info["error"] and info["reward_source"] == "judge"
    assert len(env.unwrapped.episode.calls) > 0


def test_judge_spec_is_checked():
    with pytest.raises(ValueError, match="judge:MODEL@BASE_URL"):
        gym.make("EnvACE/tau2-retail-v0", reward="judge:no-url")
