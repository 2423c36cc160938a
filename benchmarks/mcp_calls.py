"""MCP calls through the bare SDK client and through envace-gym, and reset with and without the pool.

Per call: ``await client.call_tool(...)`` on an SDK ``Client`` in its own event loop
against one ``env.step`` (parsing, JSON Schema validation, the call through the env's
background portal, the response's conversion and checks) and against the world's
``execute`` alone, all on the bank server of tests/support/mcp_server.py over stdio; and the
portal's round trip to the loop thread with no request.

Reset: the seconds ``env.reset`` takes after an episode that made one call (so its
server is used up), with the warm pool (``pool_size=1``; the spare had the length of
an episode, ``--episode-seconds``, to start) and without it (``pool_size=0``: every
reset launches a server), and with the pool when resets come back to back.

    python benchmarks/mcp_calls.py [--calls 600] [--rounds 3] [--resets 8] [--episode-seconds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from envace_gym import make_mcp_env
from envace_gym.core.messages import format_tool_call

SERVER = [sys.executable, str(Path(__file__).parents[1] / "tests" / "support" / "mcp_server.py")]
ARGUMENTS = {"account_id": "A-1"}
ACTION = format_tool_call("get_balance", ARGUMENTS)


def sdk_side(calls: int) -> list[float]:
    async def run():
        times = []
        async with Client(StdioServerParameters(command=SERVER[0], args=SERVER[1:])) as client:
            for _ in range(calls):
                start = time.perf_counter()
                await client.call_tool("get_balance", ARGUMENTS)
                times.append(time.perf_counter() - start)
        return times

    return anyio.run(run)


async def nothing() -> None:
    return None


def env_side(env, calls: int) -> tuple[list[float], list[float], list[float]]:
    steps, executes, hops = [], [], []
    for _ in range(calls):
        start = time.perf_counter()
        env.step(ACTION)
        steps.append(time.perf_counter() - start)
    world = env.episode.world
    for _ in range(calls):
        start = time.perf_counter()
        world.execute("get_balance", ARGUMENTS)
        executes.append(time.perf_counter() - start)
    for _ in range(calls):
        start = time.perf_counter()
        world.runtime.portal.call(nothing)
        hops.append(time.perf_counter() - start)
    return steps, executes, hops


def reset_side(pool_size: int, resets: int, pause: float) -> list[float]:
    env = make_mcp_env(SERVER, ["benchmark"], pool_size=pool_size, max_turns=None)
    times = []
    for _ in range(resets):
        start = time.perf_counter()
        env.reset(seed=0)
        times.append(time.perf_counter() - start)
        env.step(ACTION)  # the episode uses its server, so the next reset needs another
        time.sleep(pause)
    env.close()
    return times


def row(label: str, times: list[float], scale: float, unit: str) -> str:
    return (
        f"{label:<44} {statistics.median(times) * scale:>9.2f} {unit} median  "
        f"{statistics.fmean(times) * scale:>9.2f} {unit} mean"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--resets", type=int, default=8)
    parser.add_argument("--episode-seconds", type=float, default=5.0)
    args = parser.parse_args()
    env = make_mcp_env(SERVER, ["benchmark"], max_turns=None)
    env.reset(seed=0)
    sdk, steps, executes, hops = [], [], [], []
    for _ in range(args.rounds):  # the sides take turns, so that a change in machine load hits both
        sdk += sdk_side(args.calls // args.rounds)
        more_steps, more_executes, more_hops = env_side(env, args.calls // args.rounds)
        steps += more_steps
        executes += more_executes
        hops += more_hops
    env.close()
    print(f"get_balance over stdio, {len(sdk)} calls each, in {args.rounds} alternating rounds")
    print(row("SDK Client.call_tool (bare)", sdk, 1e3, "ms"))
    print(row("portal round trip, no request", hops, 1e3, "ms"))
    print(row("envace-gym world.execute", executes, 1e3, "ms"))
    print(row("envace-gym env.step (one call)", steps, 1e3, "ms"))
    overhead = statistics.median(steps) - statistics.median(sdk)
    print(f"env.step overhead over the bare client: {overhead * 1e3:.2f} ms per call (median)")
    print(f"\nenv.reset after an episode with one call, {args.resets} resets each")
    print(
        row(
            f"warm pool, {args.episode_seconds:g} s episodes",
            reset_side(1, args.resets, args.episode_seconds),
            1e3,
            "ms",
        )
    )
    print(row("warm pool, back to back", reset_side(1, args.resets, 0.0), 1e3, "ms"))
    print(row("no pool (pool_size=0)", reset_side(0, args.resets, 0.0), 1e3, "ms"))


if __name__ == "__main__":
    main()
