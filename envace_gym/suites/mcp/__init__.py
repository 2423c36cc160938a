"""Any MCP server as envace-gym worlds, and FinMCP-Bench-style tasks (offline on their recordings).

from envace_gym import make_mcp_env
env = make_mcp_env("python my_server.py", tasks="tasks.jsonl", dynamics="real")   # stdio
env = make_mcp_env("http://127.0.0.1:8000/mcp", tasks=[...])                      # streamable HTTP
env = make_mcp_env(None, tasks=load_finmcp("finmcp.jsonl"), dynamics="replay")      # offline
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envace_gym.core.episode import Task
from envace_gym.suites.mcp.runtime import Http, InProcess, ServerError, Stdio
from envace_gym.suites.mcp.suite import MCPSuite, function_schema
from envace_gym.suites.mcp.tasks import TaskRecord, finmcp_tasks, load_finmcp, load_tasks, unique_ids
from envace_gym.suites.mcp.worlds import DetachedWorld, ForkError, MCPWorld, RecordedWorld, response_of

SUITE_OPTIONS = ("name", "deterministic", "pool_size", "call_timeout", "startup_timeout")


def as_tasks(tasks: str | Path | Sequence[Task | dict | str]) -> list[Task]:
    """Tasks from a JSONL path, or a list of :class:`~envace_gym.core.episode.Task`, task records (dicts) or
    user messages."""
    if isinstance(tasks, (str, Path)):
        return load_tasks(tasks)
    out = []
    for i, task in enumerate(tasks):
        if isinstance(task, str):
            task = {"id": str(i), "user": task}
        out.append(task if isinstance(task, Task) else TaskRecord.model_validate(task).task())
    return unique_ids(out, "the tasks")


__all__ = [
    "DetachedWorld",
    "ForkError",
    "Http",
    "InProcess",
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
    "response_of",
]
