"""What a suite implements: its tasks, tools and worlds (:class:`Suite`, :class:`World`), its users
(:class:`User`) and the grader of its episodes (:attr:`Suite.grader`)."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from envace_gym.core.episode import CallRecord, Task
from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.grader import Grader, NoGoldGrader
from envace_gym.core.response import Response
from envace_gym.core.tools import ToolSet

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with tools. Call a tool when it helps; when the "
    "request is done, answer the user in plain text."
)


class World:
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
            return Response(
                error=ToolError(ErrorCode.EXECUTION_ERROR, f"{type(self).__name__} has no method for the tool {name!r}")
            )
        return Response.from_native(method(**arguments))

    #: why the world can answer no more (a server that died), once it cannot: the env then ends the
    #: episode with ``info["error"]`` naming it
    failure: str | None = None

    def fork(self) -> World:
        """An independent copy that shares no mutable state with this world."""
        return copy.deepcopy(self)

    def detached(self) -> World:
        """The world of a fork whose dynamics ask no world (rehearsed, simulated, replay). Default: a
        :meth:`fork`; a world that cannot fork cheaply (a server session) gives one that answers nothing."""
        return self.fork()

    def close(self, wait: bool = True) -> None:
        """End the episode's hold on outside resources (a server session); the env calls it when the
        next episode starts (``wait=False``) and on ``close``. Default: nothing."""


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


class Suite(ABC):
    """A family of tasks with their tools and worlds, and the grader of their episodes.

    A suite lists its :attr:`tasks` and implements the two abstract methods, :meth:`tools`
    and :meth:`new_world`. Every other method has a default: the tasks without splits,
    one generic system prompt, no opening messages, the generic :class:`ScriptedUser`
    (the task's ``user`` messages), a :attr:`grader` that scores against the tasks'
    ``gold`` calls, and nothing to :meth:`close`.
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

    @property
    def local_worlds(self) -> bool:
        """Whether a world may also run the calls the policy rehearsed, at no real cost, so that under
        dynamics that mix real and rehearsed answers it stays consistent with the episode's history
        (docs/guides/dynamics.md). Default: :attr:`private_worlds`."""
        return self.private_worlds

    # the users make_user builds by kind ("llm": an LLM user, given user_kwargs model and base_url)
    users: tuple[str, ...] = ("scripted",)
    # the prefix of SPEC_REWARDS whose judge scores its tasks without gold, given MODEL@BASE_URL
    # (EnvSettings.judge): a generic LLM judge unless the suite has its own
    judge_spec: str = "judge"

    # the suite's worlds bound each call themselves (a server's request timeout): the env's
    # ``limits.call_seconds`` is not applied on top
    bounds_calls: bool = False
    # the benchmark's limit of tool-calling steps in one user turn: the env's default (None: none)
    max_steps_per_turn: int | None = None

    @abstractmethod
    def tools(self, task: Task) -> ToolSet:
        """The tools the agent is shown for the task."""

    @abstractmethod
    def new_world(self, task: Task) -> World:
        """A fresh world in the task's initial state."""

    @cached_property
    def grader(self) -> Grader:
        """The one object that holds the gold and scores episodes (override it, as a cached property,
        to return your own :class:`~envace_gym.core.grader.Grader`). Default: a ``Grader`` of the tasks'
        ``gold`` calls, or a :class:`~envace_gym.core.grader.NoGoldGrader` when no task has any."""
        return Grader(self) if any(task.gold for task in self.tasks) else NoGoldGrader(self)

    def isolates(self, name: str, arguments: dict) -> bool:
        """Whether this call runs in a child process (:attr:`stateless_tools`); a suite may keep calls
        it can bound by their arguments in process."""
        return name in self.stateless_tools

    def close(self) -> None:  # noqa: B027 (a hook with nothing to do by default)
        """Release what the suite holds (a server's processes); an env that owns its suite calls it on
        ``close``. Default: nothing."""

    def splits(self) -> list[str]:
        """The names :meth:`task_ids` takes (default: none)."""
        return []

    def task_ids(self, split: str | None = "default") -> list[str]:
        """The ids of a split's tasks, of all tasks (``None``), or of :attr:`default_split`'s."""
        split = self.default_split if split == "default" else split
        if split is not None:
            raise ValueError(
                f"{self.name} has no split {split!r}; splits: {', '.join(self.splits()) or 'none (pass split=None)'}"
            )
        return [t.id for t in self.tasks]

    @cached_property
    def _task_index(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}

    def task(self, task_id: str) -> Task:
        """The task of this id (default: from :attr:`tasks`)."""
        if task_id not in self._task_index:
            raise KeyError(f"{self.name} has no task {task_id!r}")
        return self._task_index[task_id]

    def system_prompt(self, task: Task) -> str:
        """The episode's system message (default: one generic prompt)."""
        return DEFAULT_SYSTEM_PROMPT

    def opening_messages(self, task: Task) -> list[dict]:
        """Messages that precede the user's first turn (a greeting, a recorded history; default: none)."""
        return []

    def make_user(self, kind: str | User, task: Task, seed: int | None, **kwargs) -> User:
        """``"scripted"``: the generic :class:`ScriptedUser` saying the task's ``user`` messages."""
        if isinstance(kind, User):
            return kind
        if kind == "scripted":
            return ScriptedUser(task.user, **kwargs)
        raise ValueError(f"{self.name} has the scripted user only: use user='scripted' or a User, not {kind!r}")

    def summary(self, task: Task) -> str:
        """One line about the task for listings (default: its first user message)."""
        user = task.user if isinstance(task.user, str) else next(iter(task.user or ()), "")
        return str(user or "")

    # shortcuts to the grader's answers, for callers that hold only a suite (the CLI, tests)
    def has_gold(self, task: Task) -> bool:
        return self.grader.has_gold(task)

    def gold_calls(self, task: Task) -> list[dict]:
        return self.grader.gold_calls(task)

    def oracle_plan(self, task: Task) -> list[Any]:
        return self.grader.oracle_plan(task)

    def judge_reward(self) -> Any:
        return self.grader.judge_reward()
