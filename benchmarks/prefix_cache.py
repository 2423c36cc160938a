"""Prefill tokens vLLM actually computes per committed turn, prefix caching on: one run, four
independent runs, and N = 4 parallel private rehearsal, whose attempts share the committed prefix;
and one run under rehearsed dynamics, where the model writes every tool response itself.

A tiny model is first SFT-trained on ``EnvACE/tau2-mock-office-v0``'s oracle episodes for
``--sft-steps`` (or ``--model PATH`` is used as it is), so that it writes tool calls and JSON
rehearsals. One ``vllm:`` engine (prefix caching on, KV blocks of ``--block-size`` tokens, 32 by default)
then plays the first ``--tasks`` test tasks, sampling at temperature 1, with the prefix cache
reset before each episode. A request's computed prefill is its prompt length minus vLLM's own
``num_cached_tokens``. Private rehearsal's attempts are rehearsed by the model itself (its tool
responses are generations too). Every row is measured twice in the same run: with rehearsals
kept as written (append-only prompts) and stored as canonical JSON (``canonical``: how they
were stored before, every later prompt re-rendering them differently from the generated tokens).

    python benchmarks/prefix_cache.py [--tasks 10] [--sft-steps 1200] [--model PATH] [--out runs/prefix_cache]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym

import envace_gym  # noqa: F401
import envace_gym.env as env_module
from envace_gym.agents import PrivateRehearsal
from envace_gym.agents.vllm import VLLMAgent
from envace_gym.core.messages import rehearsal_content
from envace_gym.fixtures import tiny_model
from envace_gym.training import SFT, SFTConfig

ENV_ID = "EnvACE/tau2-mock-office-v0"


def canonical_content(action, max_chars):
    """Rehearsals stored as canonical JSON, whatever the model wrote (the storage before append-only)."""
    content, parsed = rehearsal_content(action, max_chars)
    return (json.dumps(json.loads(content)) if parsed else content), parsed


class PrefillMeter:
    """Wraps ``agent.llm.generate`` and adds up prompt and computed prefill tokens of every request."""

    def __init__(self, agent: VLLMAgent):
        self.prompt = self.computed = self.requests = 0
        generate = agent.llm.generate

        def counted(prompts, params, **kwargs):
            outputs = generate(prompts, params, **kwargs)
            for out in outputs:
                self.requests += 1
                self.prompt += len(out.prompt_token_ids)
                self.computed += len(out.prompt_token_ids) - (out.num_cached_tokens or 0)
            return outputs

        agent.llm.generate = counted


def play(env, agent, task_id: str, seed: int) -> int:
    """One committed episode; returns its committed act turns."""
    obs, _ = env.reset(seed=seed, options={"task_id": task_id})
    turns, done = 0, False
    while not done:
        turns += obs["role"] == "act"
        obs, _, terminated, truncated, _ = env.step(agent.act(obs))
        done = terminated or truncated
    return turns


def measure(agent: VLLMAgent, meter: PrefillMeter, env, task_ids: list[str], runs: int, budget: int) -> dict:
    """Computed prefill per committed turn of the first run, summed over ``runs`` independent runs
    (each its own episode, cache reset before it), with private rehearsal of ``budget`` attempts."""
    computed = prompt = requests = turns = 0
    for i, task_id in enumerate(task_ids):
        for k in range(runs):
            agent.llm.reset_prefix_cache()
            player = PrivateRehearsal(agent, env, budget=budget) if budget else agent
            before = (meter.computed, meter.prompt, meter.requests)
            played = play(env, player, task_id, seed=1000 * k + i)
            computed += meter.computed - before[0]
            prompt += meter.prompt - before[1]
            requests += meter.requests - before[2]
            turns += played if k == 0 else 0  # per committed turn of one run
    return {
        "computed_per_turn": computed / turns,
        "prompt_per_turn": prompt / turns,
        "committed_turns": turns,
        "requests_per_turn": requests / turns,
        "computed_per_request": computed / requests if requests else None,
        "cached_share": 1 - computed / prompt if prompt else None,
    }


def trained_model(out: Path, steps: int) -> Path:
    init = tiny_model(out / "init", hidden_size=256, layers=4, env_id=ENV_ID)
    sft = SFT(
        SFTConfig(
            model=f"hf:{init}",
            env_id=ENV_ID,
            out=str(out / "sft"),
            max_episodes=3000,
            batch=8,
            minibatch=8,
            steps=steps,
            lr=3e-3,
            save_every=0,
            seed=0,
            tensorboard=False,
        )
    )
    while sft.step < steps:
        sft.train_step()
    sft.model.save_pretrained(out / "model")
    sft.tokenizer.save_pretrained(out / "model")
    return out / "model"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--sft-steps", type=int, default=1200)
    parser.add_argument("--model", type=Path, help="a model to use as it is (default: SFT a tiny one)")
    parser.add_argument("--block-size", type=int, default=32, help="KV block tokens (vLLM CPU: a multiple of 32)")
    parser.add_argument("--out", type=Path, default=Path("runs/prefix_cache"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = args.model or trained_model(args.out, args.sft_steps)
    agent = VLLMAgent(
        model,
        max_new_tokens=48,
        temperature=1.0,
        seed=0,
        dtype="float32",
        max_model_len=4096,
        block_size=args.block_size,
        gpu_memory_utilization=0.1,
        kv_cache_memory_bytes=256 << 20,
    )
    meter = PrefillMeter(agent)
    env = gym.make(ENV_ID, split="test", dynamics="real", max_turns=5)
    rehearsed = gym.make(ENV_ID, split="test", dynamics="rehearsed", max_turns=5)
    task_ids = env.unwrapped.task_ids[: args.tasks]
    results, stored = {}, env_module.rehearsal_content
    for storage, content in (("as written", stored), ("canonical", canonical_content)):
        env_module.rehearsal_content = content
        rows = {
            "one run": measure(agent, meter, env, task_ids, 1, 0),
            "four independent runs": measure(agent, meter, env, task_ids, 4, 0),
            "N = 4 private rehearsal (parallel)": measure(agent, meter, env, task_ids, 1, 4),
            "one run, rehearsed dynamics": measure(agent, meter, rehearsed, task_ids, 1, 0),
        }
        one = rows["one run"]["computed_per_turn"]
        for row in rows.values():
            row["x_one_run"] = row["computed_per_turn"] / one
        results[storage] = rows
    env_module.rehearsal_content = stored
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"{args.tasks} office test tasks, block size {args.block_size}; prefill tokens computed per committed turn")
    print(
        f"{'rehearsals stored':<12} {'row':<36} {'computed':>9} {'prompt':>9} {'cached':>7} {'x one run':>9} "
        f"{'requests':>9} {'computed/request':>16}"
    )
    for storage, rows in results.items():
        for name, row in rows.items():
            print(
                f"{storage:<12} {name:<36} {row['computed_per_turn']:>9.1f} {row['prompt_per_turn']:>9.1f} "
                f"{row['cached_share']:>7.1%} {row['x_one_run']:>9.2f} {row['requests_per_turn']:>9.2f} "
                f"{row['computed_per_request']:>16.1f}"
            )


if __name__ == "__main__":
    main()
