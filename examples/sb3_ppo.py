"""PPO (stable-baselines3) trained under rehearsed dynamics, scored under real ones.

The policy chooses among candidate actions (``envace_gym.integrations.sb3.CandidateEnv``,
scored by ``CandidatePolicy``) on ``EnvACE/tau2-mock-gen-v0``. During training the
policy's calls never run on its episode's world: every tool response is written by a
world model, either the oracle (a perfect one: what the real world would answer) or
``knn`` (the most similar real response it remembers from gold episodes of other
training tasks). The reward is the same in both worlds, tau2's evaluator (database and
what was told to the user): under rehearsal it scores the episode's calls replayed on a
fresh world after the episode (``replay``), under real dynamics the episode's own world
(``world``). The trained policy is scored on held-out test tasks in the rehearsed world
it trained in and in the real one; a random policy is the baseline.

    python examples/sb3_ppo.py --steps 16000 --episodes 100 --out runs/sb3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO

import envace_gym  # noqa: F401  (registers the EnvACE/* ids)
from envace_gym.agents import KNNAgent, load
from envace_gym.integrations.sb3 import CandidateEnv, CandidatePolicy

ENV_ID = "EnvACE/tau2-mock-gen-v0"


def make(split: str, dynamics: str, world_model=None, max_turns: int = 8) -> CandidateEnv:
    # one reward for both worlds: the episode's calls run on a fresh real world afterwards, then
    # tau2's evaluator scores it ("replay"; under real dynamics it is "world", the same check)
    reward = "replay" if dynamics == "rehearsed" else "world"
    return CandidateEnv(
        gym.make(ENV_ID, split=split, dynamics=dynamics, reward=reward, max_turns=max_turns), world_model=world_model
    )


def knn_from_gold(n_tasks: int) -> KNNAgent:
    """A knn world model that remembers the real responses of the oracle's runs on training tasks."""
    env = gym.make(ENV_ID, split="train", dynamics="real")
    oracle, memory = load("oracle", env=env), []
    for i in range(n_tasks):
        # the last training tasks: PPO draws its tasks from the whole split, mostly others
        obs, _ = env.reset(options={"task_id": f"train_{4999 - i}"})
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(oracle.act(obs))
            done = terminated or truncated
        memory += [
            {"name": c.name, "arguments": c.arguments, "response": c.content}
            for c in env.unwrapped.episode.calls
            if c.source == "real"
        ]
    return KNNAgent(memory=memory)


def score(env: CandidateEnv, policy, task_ids: list[str]) -> dict:
    """Mean terminal reward (and its standard error) of ``policy(obs) -> index`` over ``task_ids``."""
    rewards, sources = [], set()
    for task_id in task_ids:
        obs, _ = env.reset(options={"task_id": task_id})
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            done = terminated or truncated
        rewards.append(reward)
        sources.add(info["reward_source"])
    r = np.array(rewards)
    return {
        "mean": float(r.mean()),
        "sem": float(r.std(ddof=1) / np.sqrt(len(r))),
        "episodes": len(r),
        "reward_source": sorted(sources),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16000, help="PPO environment steps per world model")
    parser.add_argument("--episodes", type=int, default=100, help="test tasks scored per setting")
    parser.add_argument("--world-models", default="oracle,knn")
    parser.add_argument("--knn-tasks", type=int, default=50, help="gold training episodes knn remembers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/sb3")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a small MLP: threads only contend
    test_ids = [f"test_{i}" for i in range(args.episodes)]
    real = make("test", "real")
    rng = np.random.default_rng(args.seed)
    results: dict = {
        "env": ENV_ID,
        "steps": args.steps,
        "random": {"real": score(real, lambda obs: int(rng.integers(32)), test_ids)},
    }
    for name in args.world_models.split(","):
        world_model = knn_from_gold(args.knn_tasks) if name == "knn" else name
        train = make("train", "rehearsed", world_model)
        start = time.time()
        model = PPO(
            CandidatePolicy,
            train,
            n_steps=512,
            batch_size=128,
            n_epochs=6,
            learning_rate=1e-3,
            ent_coef=0.01,
            gamma=0.98,
            seed=args.seed,
            policy_kwargs={"n_candidates": train.max_candidates},
            verbose=0,
        )
        model.learn(args.steps)
        seconds = time.time() - start

        def greedy(obs, model=model):
            return int(model.predict(obs, deterministic=True)[0])

        rehearsed = make("test", "rehearsed", world_model)  # "oracle" binds one to this env
        results[name] = {
            "train_seconds": round(seconds, 1),
            "rehearsed": score(rehearsed, greedy, test_ids),
            "real": score(real, greedy, test_ids),
        }
        results["random"].setdefault("rehearsed", {})[name] = score(
            rehearsed, lambda obs: int(rng.integers(32)), test_ids
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"{'policy':<22}{'rehearsed (replay)':>22}{'real (world)':>16}")
    for name in args.world_models.split(","):
        r = results[name]
        print(
            f"{'PPO, ' + name + ' world':<22}{r['rehearsed']['mean']:>15.3f} ± {r['rehearsed']['sem']:.3f}"
            f"{r['real']['mean']:>9.3f} ± {r['real']['sem']:.3f}   ({r['train_seconds']} s)"
        )
        rr = results["random"]["rehearsed"][name]
        print(
            f"{'random, ' + name + ' world':<22}{rr['mean']:>15.3f} ± {rr['sem']:.3f}"
            f"{results['random']['real']['mean']:>9.3f} ± {results['random']['real']['sem']:.3f}"
        )
    print(f"results in {out / 'results.json'}")


if __name__ == "__main__":
    main()
