"""EnvACE/plan-choice-v0: the noisy oracle's wrong plan is the other one, and only a clean refund scores."""

import gymnasium as gym
import pytest

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.core.messages import format_tool_call
from envace_gym.play.loop import run_episodes

ENV = "EnvACE/plan-choice-v0"
REFUND = format_tool_call("resolve_claim", {"resolution": "refund"})
REPLACE = format_tool_call("resolve_claim", {"resolution": "replacement"})
JUNK = '<tool_call>\n{"name": "resol'


def test_splits_and_the_noisy_oracles_coin_flip():
    env = gym.make(ENV, split="train", dynamics="real")
    assert len(env.unwrapped.task_ids) == 48 and len(gym.make(ENV).unwrapped.task_ids) == 16
    oracle = agents.load("oracle", env=env)
    assert {r["reward"] for r in run_episodes(env, oracle, env.unwrapped.task_ids)} == {1.0}
    noisy = agents.load("noisy-oracle", env=env, p=0.5, seed=0)
    records = list(run_episodes(env, noisy, env.unwrapped.task_ids, repeats=2))
    plans = [m["tool_calls"][0]["function"]["arguments"] for r in records for m in r["messages"][2:3]]
    assert {p["resolution"] for p in plans} == {"refund", "replacement"}  # the only wrong call is the other plan
    assert 0.35 <= sum(r["reward"] for r in records) / len(records) <= 0.65


@pytest.mark.parametrize("reward", ["strict_progress", "progress", "actions", "world"])
@pytest.mark.parametrize(
    "turns, score",
    [
        ([REFUND, "Done."], 1.0),
        ([REPLACE, "Done."], 0.0),
        ([REFUND + " " + JUNK, "Done."], 0.0),  # a rejected call after the refund costs it all
        ([REFUND, JUNK, "Done."], 0.0),
        ([REFUND, REFUND, "Done."], 0.0),  # the world settles a claim once
        ([REFUND, REFUND, REFUND], 0.0),  # no closing reply: cut at the turn limit
    ],
)
def test_only_the_clean_refund_scores(reward, turns, score):
    env = gym.make(ENV, dynamics="real", reward=reward, max_turns=3)
    env.reset(seed=0, options={"task_id": "test_0"})
    for text in turns:
        _, value, terminated, truncated, info = env.step(text)
        if terminated or truncated:
            break
    assert (terminated or truncated) and value == score, info.get("reward_info")
