"""Any MCP server as a suite."""

from __future__ import annotations

import copy
import time
import weakref
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from envace_gym.core.episode import Task
from envace_gym.core.grader import Grader
from envace_gym.core.messages import format_tool_call
from envace_gym.core.response import Response
from envace_gym.core.suite import DEFAULT_SYSTEM_PROMPT, Suite, World
from envace_gym.core.tools import MAX_TOOLS, ToolSet
from envace_gym.suites.mcp.runtime import Http, InProcess, Runtime, ServerError, Stdio, server_spec
from envace_gym.suites.mcp.worlds import MCPWorld, RecordedWorld

MAX_PAGES, LIST_SECONDS = 100, 60.0  # bounds of one tools/list: pages followed, seconds in all


def function_schema(tool: Any) -> dict:
    """An MCP tool (an SDK ``Tool``, or a dict with ``inputSchema``/``parameters``) or an OpenAI
    function schema, as an OpenAI function schema."""
    if isinstance(tool, dict) and tool.get("type") == "function":
        return tool
    if not isinstance(tool, dict):
        tool = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    parameters = (
        tool.get("inputSchema")
        or tool.get("input_schema")
        or tool.get("parameters")
        or {"type": "object", "properties": {}}
    )
    return {
        "type": "function",
        "function": {"name": tool["name"], "description": tool.get("description", ""), "parameters": parameters},
    }


class MCPSuite(Suite):
    """Tasks on one MCP server, or offline on their recorded trajectories.

    ``server``: a command line (stdio), a URL (streamable HTTP), or a
    :class:`~envace_gym.suites.mcp.runtime.Stdio`, :class:`~envace_gym.suites.mcp.runtime.Http` or
    :class:`~envace_gym.suites.mcp.runtime.InProcess` spec; ``None`` runs every task offline, where the
    world answers from the task's recording (``RecordedWorld``). Tools come from the
    server's ``tools/list`` (offline: the tasks' own tool lists), each task seeing its
    ``tools`` subset if it names one. A stdio server is one process per episode, taken
    from a pool of ``pool_size`` warm spares; an HTTP server is one shared world (one
    episode at a time unless ``Http(url, isolated=True)``). ``deterministic``: the
    server answers the same calls the same way, so a world forks by replaying its calls.
    ``call_timeout`` bounds every request (the env's ``limits.call_seconds`` is not applied); a
    server that dies or does not answer in it ends the episode. :meth:`close` stops the servers
    (so does garbage collection; an env made with ``owns_suite=True`` closes them on ``close``).
    """

    bounds_calls = True

    def __init__(
        self,
        tasks: Sequence[Task],
        server: Any = None,
        name: str = "mcp",
        deterministic: bool = False,
        pool_size: int = 1,
        call_timeout: float = 10.0,
        startup_timeout: float = 30.0,
    ):
        self.name, self.tasks = name, list(tasks)
        self.spec: Stdio | Http | InProcess | None = None if server is None else server_spec(server)
        # only an in-process server's (or an offline) world keeps its effects in this process
        self.private_worlds = self.spec is None or isinstance(self.spec, InProcess)
        self.deterministic, self.pool_size = deterministic, pool_size
        self.call_timeout, self.startup_timeout = call_timeout, startup_timeout
        self._runtime: Runtime | None = None
        self._server_tools: list[dict] | None = None
        self._toolsets: dict[str | tuple, ToolSet] = {}

    @property
    def runtime(self) -> Runtime:
        """The server's loop and sessions, started on first use (again after :meth:`close`)."""
        if self._runtime is None:
            assert self.spec is not None  # an offline suite has no server
            self._runtime = Runtime(self.spec, self.call_timeout, self.startup_timeout, self.pool_size)
            self._finalize = weakref.finalize(self, self._runtime.close)
        return self._runtime

    def close(self) -> None:
        """Stop every session and server of this suite; it starts again if used again."""
        if self._runtime is not None:
            self._finalize()
            self._runtime = None

    def _listed_tools(self) -> list[dict]:
        if self._server_tools is None:
            runtime = self.runtime
            session = runtime.open(self._fresh_state())
            deadline = time.monotonic() + LIST_SECONDS
            try:
                page = runtime.request(session, "list_tools")
                tools, pages = list(page.tools), 1
                while page.next_cursor:
                    if pages >= MAX_PAGES or len(tools) > MAX_TOOLS or time.monotonic() > deadline:
                        raise ServerError(
                            f"the MCP server {runtime.spec.name}'s tools/list goes past {MAX_PAGES} "
                            f"pages, {MAX_TOOLS} tools or {LIST_SECONDS} s; it is refused"
                        )
                    page = runtime.request(session, "list_tools", cursor=page.next_cursor)
                    tools += page.tools
                    pages += 1
                self._server_tools = [function_schema(t) for t in tools]
            finally:
                runtime.give_back(session)  # tools/list changes nothing: the session stays warm
        return self._server_tools

    def _fresh_state(self) -> Any:
        return copy.deepcopy(self.spec.state) if isinstance(self.spec, InProcess) else None

    def tools(self, task: Task) -> ToolSet:
        data = task.data or {}
        subset = data.get("tools")
        key = task.id if self.spec is None else tuple(subset or ())
        if key not in self._toolsets:
            if self.spec is None:
                schemas = [function_schema(t) for t in data.get("tool_schemas", ())]
            else:
                schemas = self._listed_tools()
            names = {s["function"]["name"] for s in schemas}
            if subset and not set(subset) <= names:
                raise ValueError(
                    f"task {task.id!r} names tools its server does not list: "
                    f"{sorted(set(subset) - names)}; it lists {sorted(names)}"
                )
            self._toolsets[key] = ToolSet([s for s in schemas if not subset or s["function"]["name"] in subset])
        return self._toolsets[key]

    @property
    def local_worlds(self) -> bool:
        """A server declared deterministic also runs rehearsed calls, on the episode's session (as a fork
        replays its calls)."""
        return self.private_worlds or self.deterministic

    def new_world(self, task: Task | None) -> World:
        if self.spec is None:
            assert task is not None  # an offline world plays its task's recording
            return RecordedWorld((task.data or {}).get("recording", ()))
        return MCPWorld(self.runtime, self.deterministic, self._fresh_state())

    def system_prompt(self, task: Task) -> str:
        return (task.data or {}).get("system") or DEFAULT_SYSTEM_PROMPT

    def opening_messages(self, task: Task) -> list[dict]:
        """A teacher-forced turn's gold history (see :func:`~envace_gym.suites.mcp.tasks.load_finmcp`)."""
        return copy.deepcopy((task.data or {}).get("history", []))

    @cached_property
    def grader(self) -> MCPGrader:
        return MCPGrader(self)


class MCPGrader(Grader):
    """Gold calls in steps and user turns (FinMCP-Bench's), played and replayed from the task's recording."""

    def has_gold(self, task: Task) -> bool:
        return bool(task.gold)

    def gold_calls(self, task: Task) -> list[dict]:
        """The gold calls, each with its ``step`` (calls of one step form one parallel group) and
        its user ``turn`` (the index of the user message it answers)."""
        return [
            {**call, "step": task.gold[i].get("step", i), "turn": task.gold[i].get("turn", 0)}
            for i, call in enumerate(super().gold_calls(task))
        ]

    def oracle_plan(self, task: Task) -> list[Any]:
        """For each user turn: each gold step as one message of its calls, then a text reply
        (the task's answer after the last turn)."""
        gold = [c for c in self.gold_calls(task) if c["requestor"] == "assistant"]
        turns = 1 if isinstance(task.user, str) else len(task.user)
        plan: list[Any] = []
        for turn in range(turns):
            steps: dict[Any, list[str]] = {}
            for call in gold:
                if call["turn"] == turn:
                    steps.setdefault(call["step"], []).append(format_tool_call(call["name"], call["arguments"]))
            plan += ["\n".join(calls) for calls in steps.values()]
            plan.append(((task.data or {}).get("answer") or "Done.") if turn == turns - 1 else "Done.")
        return plan

    def recordings(self, task: Task) -> dict[tuple[str, str], list[str]]:
        """The task's recorded responses where it has a recording, else its gold calls' real ones."""
        recording = (task.data or {}).get("recording")
        if recording is None:
            return super().recordings(task)
        world = RecordedWorld(recording)
        return {key: [Response.from_native(r).content for r in answers] for key, answers in world.table.items()}
