"""Tasks for MCP suites: envace-gym's JSONL task format, and FinMCP-Bench's sample format.

One JSONL line is one task::

    {"id": "t1", "user": "Move 5 EUR from A-1 to B-2.",            # or a list: one per user turn
     "tools": ["transfer"],                                         # optional subset of the server's
     "tool_schemas": [...],                                         # optional (offline tasks): the tools
     "gold": [{"name": "transfer", "arguments": {...}, "step": 0}], # optional; one step = one parallel group
     "answer": "Done.",                                             # optional expected answer
     "recording": [{"name": ..., "arguments": {...}, "response": {...}}],  # optional recorded calls
     "system": "..."}                                               # optional system prompt
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envace_gym.core.episode import Task
from envace_gym.core.messages import escape_tags, loads_bounded
from envace_gym.core.response import Response


class GoldCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict = Field(default_factory=dict)
    step: int | None = None  # calls of one step are one parallel group (default: each its own)
    turn: int = 0  # the user message (0: the first) the call answers
    requestor: str = "assistant"


class RecordedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict = Field(default_factory=dict)
    response: Any


class TaskRecord(BaseModel):
    """One line of the JSONL task format."""

    model_config = ConfigDict(extra="forbid")
    id: str
    user: str | list[str] = Field(min_length=1)
    tools: list[str] | None = None
    tool_schemas: list[dict] = Field(default_factory=list)
    gold: list[GoldCall] = Field(default_factory=list)
    answer: str | None = None
    recording: list[RecordedCall] | None = None
    system: str | None = None
    history: list[dict] = Field(default_factory=list)  # messages before the first user turn
    meta: dict = Field(default_factory=dict)  # anything else a suite keeps (FinMCP's scenery, level, kind)

    def task(self) -> Task:
        data = self.model_dump(exclude={"id", "user", "gold"}, exclude_none=True)
        gold = [c.model_dump(exclude_none=True) for c in self.gold]
        return Task(self.id, data=data, user=self.user, gold=gold)


def _lines(path: str | Path) -> list[tuple[int, Any]]:
    """``(line number, record)`` of a JSONL file or a JSON array; bytes that are not UTF-8, a line
    that is not JSON or JSON nested too deeply is a ValueError naming the file and line (a
    leading byte-order mark is allowed)."""
    raw = Path(path).read_bytes().removeprefix(b"\xef\xbb\xbf")
    lines = raw.split(b"\n")
    for n, encoded in enumerate(lines, 1):
        try:
            encoded.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    text = raw.decode("utf-8")
    if text.lstrip().startswith("["):  # a JSON array of records
        try:
            return list(enumerate(loads_bounded(text), 1))
        except ValueError as e:
            raise ValueError(f"{path}: not a JSON array of records: {e}") from None
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                out.append((n, loads_bounded(line)))
            except ValueError as e:
                raise ValueError(f"{path}:{n}: not JSON: {e}") from None
    return out


def load_tasks(path: str | Path) -> list[Task]:
    """The tasks of a JSONL file in the format above; a bad line raises ``ValueError`` naming it."""
    tasks = []
    for n, record in _lines(path):
        try:
            tasks.append(TaskRecord.model_validate(record).task())
        except ValidationError as e:
            raise ValueError(f"{path}:{n}: not a task: {e}") from None
    return unique_ids(tasks, path)


def unique_ids(tasks: list[Task], where) -> list[Task]:
    """``tasks``, refused with a ValueError if two share an id."""
    seen = set()
    for task in tasks:
        if task.id in seen:
            raise ValueError(f"{where}: the task id {task.id!r} appears twice")
        seen.add(task.id)
    return tasks


# FinMCP-Bench ------------------------------------------------------------------
def _arguments(function: dict) -> dict:
    arguments = function.get("arguments") or {}
    return json.loads(arguments) if isinstance(arguments, str) else arguments


def _turns(messages: list[dict]) -> list[dict]:
    """The sample's trajectory cut at user messages: each turn's user text, the messages
    from its user message on, its calls with their steps, and their recorded responses."""
    turns: list[dict] = []
    step = 0
    responses = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    for m in messages:
        if m.get("role") == "user":
            turns.append({"user": m.get("content") or "", "messages": [], "gold": [], "recording": [], "answer": None})
        if not turns or m.get("role") == "system":
            continue
        turn = turns[-1]
        if m.get("role") == "assistant":
            calls = m.get("tool_calls") or []
            for call in calls:
                name, arguments = call["function"]["name"], _arguments(call["function"])
                turn["gold"].append({"name": name, "arguments": arguments, "step": step, "turn": len(turns) - 1})
                if call.get("id") in responses:
                    turn["recording"].append({"name": name, "arguments": arguments, "response": responses[call["id"]]})
            step += bool(calls)
            if not calls and m.get("content"):
                turn["answer"] = m["content"]
            m = (
                {
                    **m,
                    "tool_calls": [
                        {**c, "function": {**c["function"], "arguments": _arguments(c["function"])}} for c in calls
                    ],
                }
                if calls
                else m
            )
        elif m.get("role") == "tool":  # escaped as a step escapes a response: no tag survives
            m = {**m, "content": escape_tags(Response.from_native(m.get("content")).content)}
        turn["messages"].append(m)
    return turns


def finmcp_tasks(sample: dict, teacher_forced: bool = False) -> list[Task]:
    """The tasks of one FinMCP-Bench sample (``id``, ``scenery``, ``diff_level``, ``tool_list``,
    ``question``, ``answer``, ``task``, ``messages``): the gold calls and their recorded
    responses come from ``messages``. ``teacher_forced``: a multi-turn sample becomes one
    task per user turn, whose opening is the gold history before that turn."""
    messages = sample.get("messages") or [{"role": "user", "content": sample["question"]}]
    turns = _turns(messages)
    if not turns:
        raise ValueError("the sample has no user message and no question")
    system = next((m["content"] for m in messages if m.get("role") == "system"), None)
    tools = sample.get("tool_list") or []
    names = [t for t in tools if isinstance(t, str)]
    listed = set(names) | {t.get("function", t).get("name") for t in tools if isinstance(t, dict)}
    missing = sorted({g["name"] for t in turns for g in t["gold"]} - listed) if tools else []
    if missing:  # every such call would be rejected, while tool_f1 still counted it
        raise ValueError(f"the trajectory calls {', '.join(missing)}, which tool_list does not hold")
    common: dict[str, Any] = {
        "tool_schemas": [t for t in tools if not isinstance(t, str)],
        "tools": names or None,
        "system": system,
        "recording": [r for t in turns for r in t["recording"]],
        "meta": {"scenery": sample.get("scenery"), "diff_level": sample.get("diff_level"), "kind": sample.get("task")},
    }
    sample_id = str(sample["id"])
    if not teacher_forced or len(turns) == 1:
        record = TaskRecord(
            id=sample_id,
            user=[t["user"] for t in turns],
            gold=[g for t in turns for g in t["gold"]],
            answer=sample.get("answer") or turns[-1]["answer"],
            **common,
        )
        return [record.task()]
    tasks: list[Task] = []
    history: list[dict] = []
    for k, turn in enumerate(turns):
        gold = [GoldCall.model_validate({**call, "turn": 0}) for call in turn["gold"]]
        record = TaskRecord(
            id=f"{sample_id}#turn{k + 1}",
            user=turn["user"],
            gold=gold,
            answer=turn["answer"],
            history=list(history),
            **common,
        )
        tasks.append(record.task())
        history += turn["messages"]
    return tasks


def load_finmcp(path: str | Path, teacher_forced: bool = False) -> list[Task]:
    """The tasks of a FinMCP-Bench file (a JSON array or JSONL of samples); see :func:`finmcp_tasks`."""
    tasks = []
    for n, sample in _lines(path):
        try:
            if not isinstance(sample, dict):
                raise TypeError("a sample must be a JSON object")
            tasks += finmcp_tasks(sample, teacher_forced)
        except (AttributeError, KeyError, TypeError, ValueError, ValidationError) as e:
            raise ValueError(f"{path}:{n}: not a FinMCP-Bench sample: {type(e).__name__}: {e}") from None
    return unique_ids(tasks, path)
