"""The adaptive router on a fixed model, before and after the consistent-worlds fix, no training.

The model acts and rehearses train tasks under adaptive dynamics (sampled at temperature 1, as GRPO's
rollouts are; a fresh router, the trainer's settings), once as today (a local world also runs each
rehearsed call) and once as before the fix (``EnvACEEnv._keep_world`` a no-op: the world never runs a
rehearsed call, and every real call is scored). Same tasks, same episode seeds.

    python benchmarks/adaptive_drift.py MODEL [--episodes 256] [--seed 0] --out FILE
"""

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import envace_gym  # noqa: F401
from envace_gym.agents.hf import HFAgent
from envace_gym.env import EnvACEEnv
from envace_gym.play.loop import run_batched
from envace_gym.routing import FidelityRouter

ENV = "EnvACE/tau2-mock-office-v0"
FIXED = EnvACEEnv._keep_world


def measure(model: Path, episodes: int, seed: int, old: bool) -> dict:
    EnvACEEnv._keep_world = (lambda self, call: None) if old else FIXED
    router = FidelityRouter()
    envs = [gym.make(ENV, split="train", dynamics="adaptive", router=router, max_turns=5) for _ in range(8)]
    ids = envs[0].unwrapped.task_ids
    order = np.random.default_rng(seed).permutation(len(ids))
    group = 8
    jobs = [(ids[order[i // group % len(ids)]], seed * 10_000 + i) for i in range(episodes)]
    agent = HFAgent(model, temperature=1.0, seed=seed, max_new_tokens=48)
    shadow = []

    def on_step(role, info):
        shadow.extend(c for c in info.get("tool_calls", []) if c.get("source") == "real" and "fidelity" in c)

    records = list(run_batched(envs, agent, jobs, on_step=on_step))
    routes = [r for rec in records for r in rec.get("routes", [])]
    settled = [r for r in routes if r["reason"] != "uncertain"]
    by_tool = Counter(r["tool"] for r in settled)
    real_by_tool = Counter(r["tool"] for r in settled if r["source"] == "real")
    return {
        "behaviour": "before the fix (world never runs a rehearsed call)" if old else "consistent worlds (today)",
        "episodes": len(records),
        "reward": statistics.fmean(r["reward"] for r in records),
        "routed_calls": len(routes),
        "real_calls": sum(r["real_calls"] for r in records),
        "real_share_settled": round(sum(real_by_tool.values()) / max(len(settled), 1), 3),
        "reasons": dict(Counter(r["reason"] for r in routes)),
        "by_tool": {t: f"{real_by_tool[t]}/{n}" for t, n in sorted(by_tool.items())},
        "scored_leaf_match": statistics.fmean(c["fidelity"]["leaf_match"] for c in shadow) if shadow else None,
        "scored_calls": len(shadow),
        "world": dict(Counter(str(c.get("world")) for c in shadow)),
        "router": {k: {"calls": e.calls, "mean": round(e.mean, 3)} for k, e in router.estimates.items()},
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", type=Path)
    p.add_argument("--episodes", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    found = {"model": str(a.model), "seed": a.seed}
    for old in (False, True):
        found["old" if old else "new"] = measure(a.model, a.episodes, a.seed, old)
        a.out.write_text(json.dumps(found, indent=1))
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
