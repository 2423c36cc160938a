"""Any MCP server as envace-gym worlds, and FinMCP-Bench-style tasks (offline on their recordings).

from envace_gym.envs.mcp import make_env
env = make_env("python my_server.py", tasks="tasks.jsonl", dynamics="real")   # stdio
env = make_env("http://127.0.0.1:8000/mcp", tasks=[...])                      # streamable HTTP
env = make_env(None, tasks=load_finmcp("finmcp.jsonl"), dynamics="replay")      # offline
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym

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


def register_finmcp(path: str | Path, distinct: bool = False) -> str:
    """Register a FinMCP-Bench file (see :func:`~envace_gym.envs.mcp.tasks.load_finmcp`) as an id, its
    tasks played offline on their recordings; the id is returned. It is ``finmcp/STEM-v0``, or, where that
    id is another file's (or ``distinct``: other files given with it share its name), ``finmcp/STEM-HASH-v0``
    with a hash of the file's path. An id is never taken from another file or registration: a ValueError."""
    from envace_gym.records import safe_name
    from envace_gym.registration import register_factory

    path = Path(path).resolve()
    env_id = f"finmcp/{safe_name(path.stem)}-v0"
    if distinct or _FINMCP_FILES.get(env_id, path) != path:
        env_id = f"finmcp/{safe_name(path.stem)}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}-v0"
    if _FINMCP_FILES.get(env_id, path) != path or (env_id not in _FINMCP_FILES and env_id in gym.registry):
        raise ValueError(f"{env_id} is already registered for {_FINMCP_FILES.get(env_id, 'another env')}")
    register_factory(env_id, partial(make_env, None, load_finmcp(path), name=env_id))
    _FINMCP_FILES[env_id] = path
    return env_id


_FINMCP_FILES: dict[str, Path] = {}  # the ids register_finmcp gave, and their files


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
