"""The episode record: its task, its calls, and the replay tables of recorded responses."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.limits import Limits
from envace_gym.core.response import OVER_TIME, execute

if TYPE_CHECKING:
    from envace_gym.core.suite import Suite, World


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
    route: dict | None = None  # adaptive dynamics: the estimate and reason that routed the call
    # a call the world answered under mixing dynamics (or after a world drifted): "consistent" when the
    # world had run every earlier call of the episode, "state_diverged" when it missed a rehearsed one
    world: str | None = None

    @property
    def ran(self) -> bool:
        """Whether the call passed validation (so a world may execute it)."""
        return self.source != "rejected"

    def info(self) -> dict:
        out = {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "requestor": self.requestor,
            "source": self.source,
            "error": self.error,
        }
        if self.rehearsed is not None:
            out["real"], out["rehearsed"] = self.content, self.rehearsed
            out["fidelity"] = self.fidelity
        if self.route is not None:
            out["route"] = self.route
        if self.world is not None:
            out["world"] = self.world
        return out


@dataclass
class Task:
    """One problem of a suite. ``data`` is the suite's own task object (gold included).

    Two generic fields serve the defaults: ``user``, what the generic
    :class:`~envace_gym.core.suite.ScriptedUser` says (its opening message, or a list: the
    opening, then one message per agent reply), and ``gold``, the task's gold calls in
    order (``{"name", "arguments"}``, optionally ``"requestor"``), which the default
    :class:`~envace_gym.core.grader.Grader` scores against and the oracle plays.
    """

    id: str
    data: Any = None
    user: str | Sequence[str] = ""
    gold: Sequence[dict] = ()


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
                    if (
                        response.error is not None
                        and response.error.code == ErrorCode.LIMIT_EXCEEDED
                        and response.native == OVER_TIME
                        and call.name not in self.suite.stateless_tools
                    ):
                        skipped.add(i)
                        break
            else:
                return world


def recording_table(recordings: list[dict] | None, grader, task: Task) -> dict:
    """The responses that answer calls under replay dynamics, by :func:`recording_key`: ``recordings``
    (``name``, ``arguments``, ``response`` each) where given, else the grader's recordings of ``task``."""
    if recordings is None:
        grader.require_gold(task)
        table = grader.recordings(task)
    else:
        table = {}
        for r in recordings:
            table.setdefault(recording_key(r["name"], r["arguments"]), []).append(r["response"])
    return {k: list(v) for k, v in table.items()}


def recording_key(name: str, arguments: dict) -> tuple[str, str]:
    """A call's key in a replay table: its name and canonical arguments (:func:`canonical`)."""
    return name, json.dumps(canonical(arguments), sort_keys=True)


def canonical(value: Any) -> Any:
    """A JSON value with its numbers compared as numbers: an integral float is its int (``22.0`` is ``22``), a
    bool stays a bool. Calls are checked against their schemas first, so a number only stands where the schema
    allows one, and this is all that is left of comparing by the schema's types.

    >>> canonical({"celsius": 22.0, "on": True, "at": [1.5, 2.0]})
    {'celsius': 22, 'on': True, 'at': [1.5, 2]}
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def recorded(table: dict, name: str, arguments: dict) -> str | ToolError:
    """The next recorded answer to this call in ``table`` (by :func:`recording_key`; the last one repeats),
    or the ``no_recording`` error."""
    answers = table.get(recording_key(name, arguments))
    if not answers:
        return ToolError(ErrorCode.NO_RECORDING, f"no recorded response for {name} with these arguments")
    return answers.pop(0) if len(answers) > 1 else answers[0]
