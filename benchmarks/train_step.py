"""Tokens that forward and backward passes process per episode: ``inline`` against ``prompted``.

With ``inline`` rehearsal a training episode is one token sequence (the whole
conversation, act and rehearse tokens tagged in place). With ``prompted``
rehearsal (the EnvACE paper's layout) the conversation is one row for the act
tokens and every rehearse generation is a row of its own: its simulator prompt
plus the response. Gold-length episodes: the oracle's trajectories of
tau2-retail's test tasks, tokenized with SmolLM2's tokenizer.

    python benchmarks/train_step.py [--split test] [--min-calls 5]

Wall time per GRPO iteration against TRL's GRPOTrainer is in
``benchmarks/grpo_iteration.py``.
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


def rows(env, oracle, tokenizer, task_id: str) -> tuple[int, list[int], int]:
    """(inline sequence length, prompted row lengths, tool calls) of one gold episode."""
    env.unwrapped.rehearsal_format = "prompted"
    obs, _ = env.reset(options={"task_id": task_id})
    rehearse_rows, calls, done = [], 0, False
    while not done:
        action = oracle.act(obs)
        if obs["role"] == "rehearse":
            prompt, _ = render_prompt(tokenizer, obs)
            rehearse_rows.append(
                len(tokenizer(prompt + action + tokenizer.eos_token, add_special_tokens=False)["input_ids"])
            )
        obs, _, terminated, truncated, info = env.step(action)
        calls += len(info["tool_calls"])
        done = terminated or truncated
    episode = env.unwrapped.episode
    conversation = tokenizer.apply_chat_template(episode.messages, tools=env.unwrapped.tools.schemas, tokenize=False)
    inline = len(tokenizer(conversation, add_special_tokens=False)["input_ids"])
    return inline, [inline] + rehearse_rows, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", default="test")
    parser.add_argument("--min-calls", type=int, default=5)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    env = gym.make("EnvACE/tau2-retail-v0", split=args.split, dynamics="rehearsed", reward="replay")
    oracle = agents.load("oracle", env=env)
    results = [rows(env, oracle, tokenizer, t) for t in env.unwrapped.task_ids]
    print(
        f"tau2-retail {args.split}: {len(results)} gold episodes, mean tokens per episode through forward and backward"
    )
    print(f"{'episodes':>16}{'n':>4}{'inline':>9}{'prompted':>10}{'rows':>6}{'ratio':>8}")
    for label, chosen in (
        ("all", results),
        (f">= {args.min_calls} calls", [r for r in results if r[2] >= args.min_calls]),
    ):
        if chosen:
            inline = statistics.fmean(r[0] for r in chosen)
            prompted = statistics.fmean(sum(r[1]) for r in chosen)
            n_rows = statistics.fmean(len(r[1]) for r in chosen)
            print(f"{label:>16}{len(chosen):4d}{inline:9.0f}{prompted:10.0f}{n_rows:6.1f}{inline / prompted:8.3f}")


if __name__ == "__main__":
    main()
