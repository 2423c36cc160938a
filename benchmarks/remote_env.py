"""RemoteEnv against the in-process env: per-step overhead, and episodes per second by sessions.

The oracle's actions on the first ``--tasks`` gold episodes of ``--env`` are recorded once in
process; then the same actions are stepped (1) in process and (2) through ``RemoteEnv`` against an
``envace-gym serve`` of the same id in a separate process on 127.0.0.1, side by side in one run.
Reported: median step time on each path and their ratio, the wire's floor (a ``state`` request,
answered on the server's event loop without an env call), and episodes per second with 1, 4 and
16 concurrent sessions (one thread and one ``RemoteEnv`` each) on that one server.

    python benchmarks/remote_env.py [--env EnvACE/tau2-retail-v0] [--tasks 40] [--out runs/remote_env.json]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import requests

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.integrations.openenv.client import RemoteEnv


def record(env_id: str, n: int) -> list[tuple[str, list]]:
    env = gym.make(env_id)
    oracle = agents.load("oracle", env=env)
    episodes = []
    for task_id in env.unwrapped.task_ids[:n]:
        obs, _ = env.reset(seed=0, options={"task_id": task_id})
        actions, done = [], False
        while not done:
            actions.append(oracle.act(obs))
            obs, _, terminated, truncated, _ = env.step(actions[-1])
            done = terminated or truncated
        episodes.append((task_id, actions))
    return episodes


def step_times(env: gym.Env, episodes) -> list[float]:
    times = []
    for task_id, actions in episodes:
        env.reset(seed=0, options={"task_id": task_id})
        for action in actions:
            start = time.perf_counter()
            env.step(action)
            times.append(time.perf_counter() - start)
    return times


def throughput(url: str, episodes, sessions: int) -> float:
    """Episodes per second with ``sessions`` concurrent sessions playing ``episodes`` between them."""
    envs = [RemoteEnv(url, timeout=120) for _ in range(sessions)]

    def play(k: int) -> None:
        for task_id, actions in episodes[k::sessions]:
            envs[k].reset(seed=0, options={"task_id": task_id})
            for action in actions:
                envs[k].step(action)

    for env in envs:  # connect first: the timing counts episodes, not handshakes
        env.reset(seed=0, options={"task_id": episodes[0][0]})
    start = time.perf_counter()
    with ThreadPoolExecutor(sessions) as pool:
        list(pool.map(play, range(sessions)))
    seconds = time.perf_counter() - start
    for env in envs:
        env.close()
    return len(episodes) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="EnvACE/tau2-retail-v0")
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("runs/remote_env.json"))
    args = parser.parse_args()
    episodes = record(args.env, args.tasks)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "envace_gym.cli", "serve", args.env, "--port", str(port), "--max-sessions", "17"],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                if requests.get(f"{url}/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.2)
        local = step_times(gym.make(args.env), episodes)
        remote_env = RemoteEnv(url, timeout=120)
        remote = step_times(remote_env, episodes)
        floor = []
        for _ in range(500):
            start = time.perf_counter()
            remote_env.state()
            floor.append(time.perf_counter() - start)
        remote_env.close()
        rates = {n: throughput(url, episodes, n) for n in (1, 4, 16)}
    finally:
        server.kill()
    result = {
        "env": args.env,
        "episodes": len(episodes),
        "steps": len(local),
        "in_process_step_ms": statistics.median(local) * 1e3,
        "remote_step_ms": statistics.median(remote) * 1e3,
        "overhead_ratio": statistics.median(remote) / statistics.median(local),
        "remote_overhead_ms": (statistics.median(remote) - statistics.median(local)) * 1e3,
        "wire_floor_ms": statistics.median(floor) * 1e3,
        "episodes_per_second": {str(n): r for n, r in rates.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"{args.env}: {len(episodes)} gold episodes, {len(local)} steps")
    print(
        f"median step: in process {result['in_process_step_ms']:.3f} ms · RemoteEnv {result['remote_step_ms']:.3f} ms"
        f" · ratio {result['overhead_ratio']:.1f}x (+{result['remote_overhead_ms']:.2f} ms a step)"
    )
    print(f"the wire's floor (a state request, no env call): {result['wire_floor_ms']:.3f} ms")
    print("episodes per second on one server: " + " · ".join(f"{n} sessions {r:.1f}" for n, r in rates.items()))


if __name__ == "__main__":
    main()
