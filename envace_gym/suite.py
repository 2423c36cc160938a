"""The core abstractions every task suite implements: task, world, suite, and the episode record."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from envace_gym.errors import ErrorCode, ToolError
from envace_gym.limits import BudgetExceeded, Limits, run_bounded, run_isolated
from envace_gym.messages import loads_bounded
from envace_gym.tools import ToolSet


@dataclass(frozen=True)
class Response:
    """A tool response: JSON text of an object or array, or a structured error.

    ``native`` is the suite's own rendering of the same result (for example the
    string tau2's environment would have returned), kept for faithful evaluation.
    """

    text: str | None = None
    error: ToolError | None = None
    native: Any = None

    @property
    def content(self) -> str:
        return self.error.content() if self.error else self.text

    @classmethod
    def from_native(cls, native: Any) -> Response:
        """A suite's own result as a JSON object or array: JSON text is parsed, the rest wrapped."""
        value = None
        if isinstance(native, str):
            try:
                value = json.loads(native)
            except ValueError:
                pass
        if not isinstance(value, (dict, list)):
            value = {"result": native}
        return cls(text=json.dumps(value), native=native)


@dataclass
class CallRecord:
    """One tool call of an episode and how it was answered."""

    id: str
    name: str
    arguments: dict
    requestor: str  # "assistant" or "user"
    source: str  # "real", "rehearsed", "simulated", "replay", "rejected", "unanswered"
    content: str = ""
    error: str | None = None
    native: Any = None
    rehearsed: str | None = None  # shadow dynamics: what the agent rehearsed
    fidelity: dict | None = None
    position: int = -1  # index in the episode's messages of the message this call precedes

    @property
    def ran(self) -> bool:
        """Whether the call passed validation (so a world may execute it)."""
        return self.source != "rejected"

    def info(self) -> dict:
        out = {"id": self.id, "name": self.name, "arguments": self.arguments,
               "requestor": self.requestor, "source": self.source, "error": self.error}
        if self.rehearsed is not None:
            out["real"], out["rehearsed"] = self.content, self.rehearsed
            out["fidelity"] = self.fidelity
        return out


@dataclass
class Task:
    """One problem of a suite. ``data`` is the suite's own task object (gold included)."""

    id: str
    data: Any


class World(ABC):
    """The real, executable backend of one episode."""

    @abstractmethod
    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        """Run one schema-valid call against this world's state."""

    @abstractmethod
    def fork(self) -> World:
        """An independent copy that shares no mutable state with this world."""


@dataclass
class UserReply:
    """A user's answer. ``tools``, when set, replaces the agent's tools from now on."""

    text: str
    stop: bool = False
    calls: list[CallRecord] = field(default_factory=list)
    tools: ToolSet | None = None


class User(ABC):
    """The other side of the conversation."""

    @abstractmethod
    def opening(self, world: World) -> str:
        """The first user message."""

    @abstractmethod
    def reply(self, agent_text: str, world: World) -> UserReply:
        """Answer one agent message (a user may act on ``world`` through user tools)."""


@dataclass
class Episode:
    """Everything one episode produced; what rewards and agents read."""

    suite: Suite
    task: Task
    world: World
    dynamics: str
    messages: list[dict] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    ended_by: str | None = None  # "user_stop", "transfer", "max_turns", ...
    limits: Limits = field(default_factory=Limits)

    @property
    def truncated(self) -> bool:
        return self.ended_by in ("max_turns", "max_steps")

    def replayed_world(self) -> World:
        """A fresh world after every call of the episode that passed validation, in order.

        Each call runs within the episode's limits; if one runs out of time, the replay
        starts again without it, so its partial effects never count.
        """
        skipped: set[int] = set()
        while True:
            world = self.suite.new_world(self.task)
            for i, call in enumerate(self.calls):
                if call.ran and i not in skipped:
                    response = execute(self.suite, world, call.name, call.arguments, self.limits, call.requestor)
                    if response.error is not None and response.error.code == ErrorCode.LIMIT_EXCEEDED \
                            and response.native == OVER_TIME and call.name not in self.suite.stateless_tools:
                        skipped.add(i)
                        break
            else:
                return world


class Suite(ABC):
    """A family of tasks with their tools, worlds, users and evaluators."""

    name: str
    transfer_tool: str | None = None
    one_step: bool = False  # the episode ends with the agent's first message (calls scored, not run)
    # tools that read and change no world state (arithmetic): run in a child process under the
    # call budget, so that even one uninterruptible C-level operation is cut short
    stateless_tools: frozenset[str] = frozenset()

    @abstractmethod
    def task_ids(self, split: str | None) -> list[str]: ...

    @abstractmethod
    def task(self, task_id: str) -> Task: ...

    @abstractmethod
    def tools(self, task: Task) -> ToolSet: ...

    @abstractmethod
    def system_prompt(self, task: Task) -> str: ...

    @abstractmethod
    def new_world(self, task: Task) -> World:
        """A fresh world in the task's initial state."""

    @abstractmethod
    def opening_messages(self, task: Task) -> list[dict]:
        """Messages that precede the user's first turn (a greeting, a recorded history)."""

    @abstractmethod
    def make_user(self, kind: str | User, task: Task, seed: int | None, **kwargs) -> User: ...

    @abstractmethod
    def evaluate(self, task: Task, world: World, episode: Episode) -> tuple[float, dict]:
        """The suite's real evaluator on a world that holds the episode's effects."""

    @abstractmethod
    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        """Gold-action match; needs no world."""

    @abstractmethod
    def gold_calls(self, task: Task) -> list[dict]:
        """The task's gold calls in order: ``{"name", "arguments", "requestor"}``."""

    @abstractmethod
    def oracle_plan(self, task: Task) -> list[Any]:
        """The act actions an oracle plays, in order."""

    def criteria(self, task: Task) -> str:
        """The task's success criteria in words, for an LLM judge (never shown to the agent)."""
        calls = "\n".join(f"- {c['name']}({json.dumps(c['arguments'])})" for c in self.gold_calls(task))
        return f"The tool calls a correct episode makes:\n{calls or '- none'}"

    @cached_property
    def _recordings(self) -> dict[str, dict]:
        return {}

    def recordings(self, task: Task) -> dict[tuple[str, str], list[str]]:
        """Real responses of the task's gold calls, keyed by (name, canonical arguments)."""
        if task.id not in self._recordings:
            table: dict[tuple[str, str], list[str]] = {}
            world = self.new_world(task)
            for call in self.gold_calls(task):
                response = world.execute(call["name"], call["arguments"], call["requestor"])
                table.setdefault(recording_key(call["name"], call["arguments"]), []).append(response.content)
            self._recordings[task.id] = table
        return self._recordings[task.id]


OVER_TIME = "over_time"  # the ``native`` of a limit error whose call ran out of time


def execute(suite: Suite, world: World, name: str, arguments: dict, limits: Limits,
            requestor: str = "assistant") -> Response:
    """One schema-valid call on ``world`` within ``limits``; whatever happens, a Response.

    A call over its time budget answers ``limit_exceeded`` (its ``native`` is
    :data:`OVER_TIME`; the world may hold part of its effects unless the tool is
    stateless); an exception, a result that is not a Response, or one whose content
    is not a JSON object or array answers ``execution_error``; an oversized one
    ``limit_exceeded``.
    """

    def run():
        return world.execute(name, arguments, requestor)

    def error(code: ErrorCode, message: str, native=None) -> Response:
        return Response(error=ToolError(code, message[:1000]), native=native or f"Error: {message[:1000]}")

    try:
        if name in suite.stateless_tools:
            response = run_isolated(run, limits.call_seconds, limits.call_memory_bytes)
        else:
            response = run_bounded(run, limits.call_seconds)
    except BudgetExceeded:
        return error(ErrorCode.LIMIT_EXCEEDED, f"{name} ran past its time budget of {limits.call_seconds} s",
                     OVER_TIME)
    except MemoryError:
        return error(ErrorCode.LIMIT_EXCEEDED, f"{name} ran past its memory budget")
    except Exception as e:
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: {type(e).__name__}: {e}")
    if not isinstance(response, Response) or (response.text is None) == (response.error is None):
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: the world answered {type(response).__name__}, "
                                                "not a Response with text or an error")
    if response.error is not None:
        return response
    if len(response.text) > limits.response_chars:
        return error(ErrorCode.LIMIT_EXCEEDED, f"{name}: the response exceeds {limits.response_chars} characters")
    try:
        value = loads_bounded(response.text)
    except ValueError as e:
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: the world's response is not valid JSON: {e}")
    if not isinstance(value, (dict, list)):
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: the world's response is not a JSON object or array")
    return response


def recording_key(name: str, arguments: dict) -> tuple[str, str]:
    return name, json.dumps(arguments, sort_keys=True)
