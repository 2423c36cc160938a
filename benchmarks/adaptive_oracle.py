"""Real-call share of the oracle under adaptive dynamics: what the router sends to the world once the
rehearser is perfect. With a faithful rehearser, every tool should fall to the router's ``explore``
share after its first ``min_calls`` calls; a higher share means the router scores something other
than rehearsal quality (a world that drifted from the episode's history, say).

    python benchmarks/adaptive_oracle.py [--env EnvACE/tau2-mock-office-v0] [--split train] [--episodes 60]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import gymnasium as gym

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.play.loop import run_episode
from envace_gym.routing import FidelityRouter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="EnvACE/tau2-mock-office-v0")
    parser.add_argument("--split", default="default", help="the tasks' split (default: the suite's)")
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--min-calls", type=int, default=4)
    parser.add_argument("--explore", type=float, default=0.1)
    args = parser.parse_args()
    router = FidelityRouter(min_calls=args.min_calls, explore=args.explore)
    env = gym.make(args.env, split=args.split, dynamics="adaptive", router=router)
    oracle = agents.load("oracle", env=env)
    task_ids = env.unwrapped.task_ids
    routes = []
    for i in range(args.episodes):
        routes += run_episode(env, oracle, task_ids[i % len(task_ids)], seed=i)["routes"]
    # past the warm-up (uncertain: too few calls yet), the share of calls the router sent to the world
    settled = [r for r in routes if r["reason"] != "uncertain"]
    real = Counter(r["tool"] for r in settled if r["source"] == "real")
    total = Counter(r["tool"] for r in settled)
    print(
        json.dumps(
            {
                "env": args.env,
                "episodes": args.episodes,
                "explore": args.explore,
                "calls": len(routes),
                "settled_calls": len(settled),
                "real_share": round(sum(real.values()) / max(len(settled), 1), 3),
                "reasons": dict(Counter(r["reason"] for r in routes)),
                "by_tool": {t: f"{real[t]}/{n}" for t, n in sorted(total.items())},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
