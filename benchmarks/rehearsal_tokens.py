"""Tokens a model processes per episode: ``inline`` against ``prompted`` rehearsal.

Over the gold trajectories of tau2-retail's test tasks (the oracle acts and
rehearses the real responses), every generation's prompt is rendered with the
SmolLM2 tokenizer and the tool-aware chat template. A generation costs its
prompt tokens not covered by a cached prefix (the longest common prefix with any
sequence processed before in the episode, as a prefix cache keeps them) plus its
generated tokens. ``prompted`` is measured twice: with examples from the episode
only, and with examples also drawn from a cache of real responses (filled by
real-dynamics gold episodes of the train split), the two settings of issue 3.

    python benchmarks/rehearsal_tokens.py [--split test] [--min-calls 5]
"""

from __future__ import annotations

import argparse
import statistics

import gymnasium as gym
from transformers import AutoTokenizer

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.hf import smollm2_path
from envace_gym.agents.prompting import render_prompt
from envace_gym.play.loop import run_episode
from envace_gym.rehearse_prompts import ResponseCache


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def episode_tokens(
    env, oracle, tokenizer, task_id: str, rehearsal_format: str, cache: ResponseCache | None = None
) -> tuple[int, int]:
    """(tokens processed, tool calls) for one gold episode."""
    env.unwrapped.rehearsal_format, env.unwrapped.response_cache = rehearsal_format, cache
    obs, _ = env.reset(options={"task_id": task_id})
    seen: list[list[int]] = []
    total, calls, done = 0, 0, False
    while not done:
        action = oracle.act(obs)
        prompt, _ = render_prompt(tokenizer, obs)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completion_ids = tokenizer(action + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        cached = max((_common_prefix(prompt_ids, s) for s in seen), default=0)
        total += len(prompt_ids) - cached + len(completion_ids)
        seen.append(prompt_ids + completion_ids)
        obs, _, terminated, truncated, info = env.step(action)
        calls += len(info["tool_calls"])
        done = terminated or truncated
    return total, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", default="test")
    parser.add_argument("--min-calls", type=int, default=5)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    env = gym.make("EnvACE/tau2-retail-v0", split=args.split, dynamics="rehearsed", reward="replay")
    oracle = agents.load("oracle", env=env)
    cache = ResponseCache(per_tool=3)
    filler = gym.make("EnvACE/tau2-retail-v0", split="train", response_cache=cache)
    filling = agents.load("oracle", env=filler)
    for task_id in filler.unwrapped.task_ids:
        run_episode(filler, filling, task_id)
    rows = []
    for task_id in env.unwrapped.task_ids:
        inline, calls = episode_tokens(env, oracle, tokenizer, task_id, "inline")
        prompted, _ = episode_tokens(env, oracle, tokenizer, task_id, "prompted")
        cached, _ = episode_tokens(env, oracle, tokenizer, task_id, "prompted", cache)
        rows.append((task_id, calls, inline, prompted, cached))
    print(f"tau2-retail {args.split}: {len(rows)} gold episodes, SmolLM2 tokenizer, mean tokens per episode")
    print(f"{'episodes':>16}{'n':>4}{'inline':>8}{'prompted':>10}{'ratio':>7}{'prompted+cache':>16}{'ratio':>7}")
    for label, chosen in (("all", rows), (f">= {args.min_calls} calls", [r for r in rows if r[1] >= args.min_calls])):
        if not chosen:
            continue
        inline, prompted, cached = (statistics.fmean(r[k] for r in chosen) for k in (2, 3, 4))
        print(
            f"{label:>16}{len(chosen):4d}{inline:8.0f}{prompted:10.0f}{inline / prompted:7.3f}"
            f"{cached:16.0f}{inline / cached:7.3f}"
        )


if __name__ == "__main__":
    main()
