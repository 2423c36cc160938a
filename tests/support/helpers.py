"""Small shared pieces of the tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port free now (the operating system's choice), for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def play(env, agent, task_id=None, seed=0, dynamics=None):
    """Run one episode to its end; returns (reward, last info, list of infos)."""
    options = {}
    if task_id is not None:
        options["task_id"] = task_id
    if dynamics is not None:
        options["dynamics"] = dynamics
    obs, info = env.reset(seed=seed, options=options)
    infos, done, reward = [info], False, 0.0
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        infos.append(info)
        done = terminated or truncated
    return reward, info, infos
