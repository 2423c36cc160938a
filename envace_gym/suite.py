"""The core abstractions every task suite implements: task, world, suite, and the episode record."""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from envace_gym.errors import ErrorCode, ToolError
from envace_gym.limits import BudgetExceeded, Limits, run_bounded, run_isolated
from envace_gym.messages import brackets_within_depth, format_tool_call, loads_bounded
from envace_gym.tools import ToolSet

DEFAULT_SYSTEM_PROMPT = ("You are a helpful assistant with tools. Call a tool when it helps; when the "
                         "request is done, answer the user in plain text.")


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
    def from_native(cls, native: Any, decode_scalars: bool = False) -> Response:
        """A suite's own result as a JSON object or array: objects and arrays as they are, JSON
        text parsed, the rest wrapped as ``{"result": ...}``: the text of a JSON scalar as it is
        (tau2's ``"4.0"``), or with ``decode_scalars`` its value (VitaBench's ``'"32.0"'``, its
        encoding of the float 32.0, as ``{"result": "32.0"}``, the string its agent reads)."""
        value = native
        if isinstance(native, str):
            try:
                value = json.loads(native)
            except ValueError:
                pass
        if not isinstance(value, (dict, list)):
            value = {"result": value if decode_scalars else native}
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
    """One problem of a suite. ``data`` is the suite's own task object (gold included).

    :class:`Suite`'s defaults read two generic fields: ``user``, what the scripted user
    says (its opening message, or a list: the opening, then one message per agent reply),
    and ``gold``, the task's gold calls in order (``{"name", "arguments"}``, optionally
    ``"requestor"``), which the actions rewards and the oracle use.
    """

    id: str
    data: Any = None
    user: str | Sequence[str] = ""
    gold: Sequence[dict] = ()


class World(ABC):
    """The real, executable backend of one episode.

    By default a call runs the world's method of the tool's name with the call's
    arguments as keywords, and what it returns (a dict or list, or JSON text) is the
    response; an exception it raises answers ``execution_error``. A world whose state
    is plain Python data forks by deep copy.
    """

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        """Run one schema-valid call against this world's state."""
        method = getattr(self, name, None)
        if name.startswith("_") or name in vars(World) or not callable(method):
            return Response(error=ToolError(ErrorCode.EXECUTION_ERROR,
                                            f"{type(self).__name__} has no method for the tool {name!r}"))
        return Response.from_native(method(**arguments))

    def fork(self) -> World:
        """An independent copy that shares no mutable state with this world."""
        return copy.deepcopy(self)


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


class ScriptedUser(User):
    """A user who says fixed messages: the first as the opening, then one per agent reply;
    after the last, the next agent reply ends the episode (``user_stop``)."""

    def __init__(self, messages: str | Sequence[str]):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        if not any(self.messages):
            raise ValueError("the scripted user needs the task's messages: Task(..., user='...')")
        self.said = 0

    def opening(self, world: World) -> str:
        self.said = 1
        return self.messages[0]

    def reply(self, agent_text: str, world: World) -> UserReply:
        if self.said >= len(self.messages):
            return UserReply("", stop=True)
        self.said += 1
        return UserReply(self.messages[self.said - 1])


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
        return self.ended_by in ("max_turns", "max_steps", "time_limit")

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
    """A family of tasks with their tools, worlds, users and evaluators.

    A suite needs only what it really has: its ``tasks`` (a list of :class:`Task`), its
    :meth:`tools` and a :meth:`new_world`. Everything else has a default, each one a
    method to override: one generic system prompt, no opening messages, the generic
    :class:`ScriptedUser` (the task's ``user`` messages), no splits, and gold-call
    scoring, an oracle plan and a world evaluator from the tasks' optional ``gold``.
    """

    name: str = "suite"
    tasks: Sequence[Task] = ()
    transfer_tool: str | None = None
    default_split: str | None = None  # the split ``task_ids()`` lists (None: every task)
    one_step: bool = False  # the episode ends with the agent's first message (calls scored, not run)
    # tools that read and change no world state (arithmetic): run in a child process under the
    # call budget, so that even one uninterruptible C-level operation is cut short
    stateless_tools: frozenset[str] = frozenset()
    # a world's effects stay in this process (Python objects), so a world model may run one in
    # private; False for worlds on a server, whose calls reach outside (see PrivateRehearsal)
    private_worlds: bool = True

    @abstractmethod
    def tools(self, task: Task) -> ToolSet: ...

    @abstractmethod
    def new_world(self, task: Task) -> World:
        """A fresh world in the task's initial state."""

    def isolates(self, name: str, arguments: dict) -> bool:
        """Whether this call runs in a child process (:attr:`stateless_tools`); a suite may keep calls
        it can bound by their arguments in process."""
        return name in self.stateless_tools

    def splits(self) -> list[str]:
        """The names :meth:`task_ids` takes (default: none)."""
        return []

    def task_ids(self, split: str | None = "default") -> list[str]:
        """The ids of a split's tasks, of all tasks (``None``), or of :attr:`default_split`'s."""
        split = self.default_split if split == "default" else split
        if split is not None:
            raise ValueError(f"{self.name} has no split {split!r}; "
                             f"splits: {', '.join(self.splits()) or 'none (pass split=None)'}")
        return [t.id for t in self.tasks]

    @cached_property
    def _task_index(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}

    def task(self, task_id: str) -> Task:
        if task_id not in self._task_index:
            raise KeyError(f"{self.name} has no task {task_id!r}")
        return self._task_index[task_id]

    def system_prompt(self, task: Task) -> str:
        return DEFAULT_SYSTEM_PROMPT

    def opening_messages(self, task: Task) -> list[dict]:
        """Messages that precede the user's first turn (a greeting, a recorded history)."""
        return []

    def make_user(self, kind: str | User, task: Task, seed: int | None, **kwargs) -> User:
        """``"scripted"``: the generic :class:`ScriptedUser` saying the task's ``user`` messages."""
        if isinstance(kind, User):
            return kind
        if kind == "scripted":
            return ScriptedUser(task.user, **kwargs)
        raise ValueError(f"{self.name} has the scripted user only: use user='scripted' or a User, not {kind!r}")

    def evaluate(self, task: Task, world: World, episode: Episode) -> tuple[float, dict]:
        """The suite's real evaluator on a world that holds the episode's effects (default:
        :meth:`score_actions`; override it to check the world's state)."""
        return self.score_actions(task, episode)

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        """Gold-action match, needing no world: 1 when every gold call was made (same requestor,
        name and arguments, in any order, each made call matching one gold call), else 0."""
        made = [(c.requestor, *recording_key(c.name, c.arguments)) for c in episode.calls if c.ran]
        checks = []
        for call in self.gold_calls(task):
            key = (call["requestor"], *recording_key(call["name"], call["arguments"]))
            met = key in made
            if met:
                made.remove(key)
            checks.append({"action": call["name"], "arguments": call["arguments"], "met": met})
        reward = 1.0 if all(c["met"] for c in checks) else 0.0
        return reward, {"action": reward, "action_checks": checks}

    def summary(self, task: Task) -> str:
        """One line about the task for listings (default: its first user message)."""
        user = task.user if isinstance(task.user, str) else next(iter(task.user or ()), "")
        return str(user or "")

    def communicate_checks(self, task: Task, episode: Episode) -> list[dict]:
        """What the agent had to tell the user, each ``{"info", "met"}`` (default: nothing)."""
        return []

    def has_gold(self, task: Task) -> bool:
        """Whether the task has gold calls (default: yes). The oracle, the ``actions`` rewards and
        replay of gold need them; a task without them is scored by :meth:`judge_reward`."""
        return True

    def require_gold(self, task: Task) -> None:
        """Refuse, with one ValueError, what needs gold calls on a task that has none."""
        if not self.has_gold(task):
            raise ValueError(f"{self.name} task {task.id!r} has no gold calls, so the oracle, the 'actions' "
                             "rewards and replay of gold cannot run on it; use a judge reward")

    def judge_reward(self) -> Any:
        """The suite's own judge (a reward callable), the default reward of its tasks without gold
        under every dynamics (default: none)."""
        return None

    def gold_calls(self, task: Task) -> list[dict]:
        """The task's gold calls in order: ``{"name", "arguments", "requestor"}``."""
        self.require_gold(task)
        return [{"name": c["name"], "arguments": c.get("arguments", {}),
                 "requestor": c.get("requestor", "assistant")} for c in task.gold]

    def oracle_plan(self, task: Task) -> list[Any]:
        """The act actions an oracle plays, in order (default: each gold call, then "Done.")."""
        return [format_tool_call(c["name"], c["arguments"]) for c in self.gold_calls(task)
                if c["requestor"] == "assistant"] + ["Done."]

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
                response = execute(self, world, call["name"], call["arguments"], Limits(), call["requestor"])
                table.setdefault(recording_key(call["name"], call["arguments"]), []).append(response.content)
            self._recordings[task.id] = table
        return self._recordings[task.id]


OVER_TIME = "over_time"  # the ``native`` of a limit error whose call ran out of time


def _error_response(code: ErrorCode, message: str, native: Any = None) -> Response:
    return Response(error=ToolError(code, message[:1000]), native=native or f"Error: {message[:1000]}")


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

    error = _error_response

    try:
        if suite.isolates(name, arguments):
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
    if response.error is None:
        return checked(name, response, limits)
    native = response.native if isinstance(response.native, (str, type(None))) else repr(response.native)
    if native is not None and len(native) > limits.response_chars:  # an error keeps at most the limit
        response = Response(error=response.error, native=native[:limits.response_chars])
    return response


class DumpedJSON(str):
    """Text that ``json.dumps`` wrote for a dict or list, as a world's own code marks it: JSON of an
    object or array by construction, so :func:`checked` parses it only when it may hold NaN or
    Infinity (``json.dumps`` writes both) or have enough brackets to nest too deep."""


def _plainly_standard(text: str) -> bool:
    return "NaN" not in text and "Infinity" not in text and brackets_within_depth(text)


def checked(name: str, response: Response, limits: Limits, who: str = "the world's") -> Response:
    """``response`` if its text is standard JSON (an object or array) within ``limits.response_chars``,
    else the ``limit_exceeded`` or ``execution_error`` that replaces it (real and replayed alike)."""
    error = _error_response
    if not isinstance(response.text, str):
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: {who} response is not text")
    if len(response.text) > limits.response_chars:
        return error(ErrorCode.LIMIT_EXCEEDED, f"{name}: the response exceeds {limits.response_chars} characters")
    if type(response.text) is DumpedJSON and _plainly_standard(response.text):
        return response
    try:
        value = loads_bounded(response.text)
    except ValueError as e:
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: {who} response is not valid JSON: {e}")
    if not isinstance(value, (dict, list)):
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: {who} response is not a JSON object or array")
    return response


def recording_key(name: str, arguments: dict) -> tuple[str, str]:
    return name, json.dumps(arguments, sort_keys=True)


def recorded(table: dict, name: str, arguments: dict) -> str | ToolError:
    """The next recorded answer to this call in ``table`` (by :func:`recording_key`; the last one repeats),
    or the ``no_recording`` error."""
    answers = table.get(recording_key(name, arguments))
    if not answers:
        return ToolError(ErrorCode.NO_RECORDING, f"no recorded response for {name} with these arguments")
    return answers.pop(0) if len(answers) > 1 else answers[0]
