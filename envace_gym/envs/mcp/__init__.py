"""Any MCP server as envace-gym worlds, and FinMCP-Bench-style tasks (offline on their recordings).

from envace_gym.envs.mcp import make_env
env = make_env("python my_server.py", tasks="tasks.jsonl", dynamics="real")   # stdio
env = make_env("http://127.0.0.1:8000/mcp", tasks=[...])                      # streamable HTTP
env = make_env(None, tasks=load_finmcp("finmcp.jsonl"), dynamics="replay")      # offline
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from envace_gym.envs.mcp.runtime import Http, InProcess, ServerError, Stdio
from envace_gym.envs.mcp.suite import MCPEnv, MCPSuite, function_schema
from envace_gym.envs.mcp.tasks import TaskRecord, finmcp_tasks, load_finmcp, load_tasks, unique_ids
from envace_gym.envs.mcp.worlds import DetachedWorld, ForkError, MCPWorld, RecordedWorld, response_of
from envace_gym.episode import Task

SUITE_OPTIONS = ("name", "deterministic", "pool_size", "call_timeout", "startup_timeout")


def as_tasks(tasks: str | Path | Sequence[Task | dict | str]) -> list[Task]:
    """Tasks from a JSONL path, or a list of :class:`~envace_gym.episode.Task`, task records (dicts) or
    user messages."""
    if isinstance(tasks, (str, Path)):
        return load_tasks(tasks)
    out = []
    for i, task in enumerate(tasks):
        if isinstance(task, str):
            task = {"id": str(i), "user": task}
        out.append(task if isinstance(task, Task) else TaskRecord.model_validate(task).task())
    return unique_ids(out, "the tasks")


def make_env(server: Any, tasks: str | Path | Sequence[Task | dict | str], **kwargs) -> MCPEnv:
    """An env on an MCP server (a command line, a URL, a :class:`~envace_gym.envs.mcp.runtime.Stdio`,
    :class:`~envace_gym.envs.mcp.runtime.Http` or :class:`~envace_gym.envs.mcp.runtime.InProcess` spec,
    or ``None`` for offline tasks) that owns its suite: ``close()`` stops its servers. ``kwargs`` go to
    :class:`~envace_gym.envs.mcp.suite.MCPSuite` (its options) and to the env."""
    options = {k: kwargs.pop(k) for k in SUITE_OPTIONS if k in kwargs}
    return MCPEnv(MCPSuite(as_tasks(tasks), server, **options), owns_suite=True, **kwargs)


def register_finmcp(path: str | Path) -> str:
    """Register a FinMCP-Bench file (see :func:`~envace_gym.envs.mcp.tasks.load_finmcp`) as the id
    ``finmcp/STEM-v0``, its tasks played offline on their recordings; the id is returned."""
    from envace_gym.registration import register_factory

    env_id = f"finmcp/{Path(path).stem}-v0"
    register_factory(env_id, partial(make_env, None, load_finmcp(path), name=env_id))
    return env_id


__all__ = [
    "DetachedWorld",
    "ForkError",
    "Http",
    "InProcess",
    "MCPEnv",
    "MCPSuite",
    "MCPWorld",
    "RecordedWorld",
    "ServerError",
    "Stdio",
    "TaskRecord",
    "as_tasks",
    "finmcp_tasks",
    "function_schema",
    "load_finmcp",
    "load_tasks",
    "make_env",
    "register_finmcp",
    "response_of",
]
