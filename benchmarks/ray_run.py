"""Episodes per second with --workers 1, 2 and 4 (Ray actors) against one process.

Two suites, the oracle playing: ``Bench/slow-mcp-v0`` (one MCP server over streamable HTTP whose
tool takes 50 ms, four calls an episode: latency-bound) and ``EnvACE/tau2-retail-v0`` (cheap, CPU-bound calls: the
overhead). Every configuration plays the same episodes; wall time includes starting the actors,
reported separately as the time to the first record. On this 2-core machine the CPU-bound case
cannot gain beyond two workers.

    python benchmarks/ray_run.py [--episodes 48] [--out runs/ray_run.json]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import gymnasium as gym

import envace_gym  # noqa: F401
from envace_gym import agents, make_mcp_env
from envace_gym.play.loop import run_batched

SERVER = [sys.executable, str(Path(__file__).with_name("slow_mcp_server.py"))]  # + its port
TASKS = [
    {
        "id": f"lookup-{i}",
        "user": f"Look up keys k{i}a, k{i}b, k{i}c and k{i}d.",
        "gold": [{"name": "lookup", "arguments": {"key": f"k{i}{c}"}} for c in "abcd"],
    }
    for i in range(64)
]
SLOW = "Bench/slow-mcp-v0"
if SLOW not in gym.registry:  # imported by each Ray worker too (the spec names this file)
    # gym.make(SLOW, server=URL): the server's URL comes with the make arguments, to every worker too
    gym.register(SLOW, entry_point=partial(make_mcp_env, tasks=TASKS, reward="tool_f1"), disable_env_checker=True)


def in_process(env_id: str, episodes: list, make_kwargs: dict) -> dict:
    env = gym.make(env_id, **make_kwargs)
    start = time.perf_counter()
    records = list(run_batched([env], agents.load("oracle", env=env), episodes))
    seconds = time.perf_counter() - start
    env.close()
    return {"seconds": seconds, "episodes_per_second": len(records) / seconds, "first_record": None}


def distributed(spec_id: str, episodes: list, workers: int, make_kwargs: dict) -> dict:
    from envace_gym.play.distributed import WorkerSpec, run_distributed

    start, first = time.perf_counter(), None
    records = []
    for record in run_distributed(WorkerSpec(spec_id, "oracle", make_kwargs), episodes, workers):
        first = first or time.perf_counter() - start
        records.append(record)
    seconds = time.perf_counter() - start
    assert all(r["reward"] == 1.0 for r in records), [r["error"] for r in records if r["reward"] != 1.0][:3]
    return {"seconds": seconds, "episodes_per_second": len(records) / seconds, "first_record": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--out", type=Path, default=Path("runs/ray_run.json"))
    args = parser.parse_args()
    from envace_gym.play.distributed import connect

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([*SERVER, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)
    connect(None, 4)
    results = {}
    try:
        for name, env_id, spec_id, make_kwargs in (
            ("slow-mcp (50 ms a call)", SLOW, f"{__file__}:{SLOW}", {"server": f"http://127.0.0.1:{port}/mcp"}),
            ("tau2-retail (oracle)", "EnvACE/tau2-retail-v0", "EnvACE/tau2-retail-v0", {}),
        ):
            ids = gym.make(env_id, **make_kwargs).unwrapped.task_ids
            episodes = [(ids[i % len(ids)], i) for i in range(args.episodes)]
            row = {"one process": in_process(env_id, episodes, make_kwargs)}
            for workers in (1, 2, 4):
                row[f"{workers} workers"] = distributed(spec_id, episodes, workers, make_kwargs)
            results[name] = report(name, episodes, row)
    finally:
        server.kill()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


def report(name: str, episodes: list, row: dict) -> dict:
    """``row`` with each configuration's speed-up over one process, printed."""
    base = row["one process"]["episodes_per_second"]
    print(f"{name}, {len(episodes)} episodes:")
    for config, value in row.items():
        value["speedup"] = value["episodes_per_second"] / base
        first = f", first record after {value['first_record']:.1f} s" if value["first_record"] else ""
        print(f"  {config:12s} {value['episodes_per_second']:7.2f} episodes/s ({value['speedup']:.2f}x){first}")
    return row


if __name__ == "__main__":
    main()
