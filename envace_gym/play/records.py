"""The records that ``run``, ``compare`` and ``train`` write as JSONL: the type of a run record, the one
writer and reader of the files, their safe names and the lock that keeps one writer per output, a pandas
DataFrame with the dtypes the records mean, and the training curves."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
import warnings
import weakref
from itertools import accumulate
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer

from envace_gym.redaction import SECRET_NAMES

# text columns that pandas' own JSON reader would turn into numbers or dates (task id "5" -> 5)
TEXT_COLUMNS = ("task_id", "env_id", "split", "agent", "dynamics", "reward_source", "ended_by", "error", "tool")
#: How deep a record's brackets may nest: far above what run, compare and train write (the JSON values
#: inside them nest at most messages.MAX_JSON_DEPTH deep), far below what json and the viewer can walk.
MAX_DEPTH = 256
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')

#: what an episode is captured for (OpenEnv's capture purpose): evaluation, or a training rollout
CapturePurpose = Literal["eval", "train"]


class RunRecord(BaseModel):
    """One episode of ``envace-gym run``: a line of its JSONL output, its fields in this order.

    :mod:`~envace_gym.play.loop` builds it and yields ``model_dump()``; ``run --resume`` validates what it
    reads back with it; the viewer, ``sft`` and the study read its fields; ``model_json_schema()`` is its
    schema. The fields with a default keep it in the record of an episode that could not be played, and
    the rehearsal fields in that of an agent that does not rehearse.
    """

    model_config = ConfigDict(strict=True)

    task_id: str = Field(description="The task's id, as text.")
    env_id: str | None = Field(description="The Gymnasium id of the env; None for an env made without a spec.")
    split: str | None = Field(description="The suite's split the task comes from; None for a suite without splits.")
    seed: int | None = Field(
        description="The episode's reset seed (run seeds episode i with --seed + i); None: unseeded."
    )
    reward: float = Field(
        allow_inf_nan=False,
        description="The terminal reward; 0 for an episode that failed (agent_error, worker_error).",
    )
    reward_source: str | None = Field(
        description="What scored the episode: world, actions, actions_share, replay, "
        "a judge, ...; None for an episode that ended before it was scored."
    )
    reward_info: dict[str, Any] = Field(
        default_factory=dict,
        description="The reward's parts, as its reward function reports them (info['reward_info']).",
    )
    dynamics: str = Field(
        description="What answered the tool calls: real, rehearsed, simulated, replay, mixed or shadow."
    )
    purpose: CapturePurpose = Field(
        default="eval",
        description="What the episode was captured for (OpenEnv's capture purpose): eval (run, eval) or train "
        "(a training rollout); eval in records written before it was kept.",
    )
    agent: str = Field(description="The agent's name, with its private rehearsal settings if it rehearses.")
    agent_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="The agent's keyword settings (run's --agent-kwargs), those named like a secret (a key, "
        "token, secret or password: api_key, hf_token) left out; {} in records written before they were kept.",
    )
    turns: int = Field(description="The episode's turns (info['turn']).")
    tool_calls: int = Field(description="The tool calls the agent made, whatever answered them.")
    ended_by: str = Field(
        description="Why the episode ended: the env's reason (user_stop, transfer, max_turns, "
        "time_limit, ...), agent_error (the agent or its model server raised) or "
        "worker_error (its Ray worker kept failing)."
    )
    error: str | None = Field(
        default=None,
        description="What failed: the agent's exception, the worker's cause or "
        "the env's info['error'] (a failing judge or user); None when "
        "nothing did.",
    )
    seconds: float = Field(description="The episode's wall time in seconds, rounded to 4 decimals.")
    fidelity: dict[str, Any] | None = Field(
        default=None,
        description="Under shadow dynamics, the mean fidelity "
        "measures of the episode's calls (compare.summarize's 'all'); else None.",
    )
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The conversation at the episode's end (chat messages): what sft trains on."
    )
    tools: list[dict[str, Any]] = Field(default_factory=list, description="The tool schemas shown to the agent.")
    opening_messages: int = Field(
        default=0,
        description="How many leading messages the episode opened with (system "
        "prompt, the suite's opening, the user's first message); every later assistant "
        "message is the agent's.",
    )
    real_call_ids: list[str] = Field(
        default_factory=list,
        description="The ids of the agent's tool calls that the "
        "real world answered; the other tool messages were rehearsed, simulated, "
        "replayed or validation errors.",
    )
    real_calls: int = Field(default=0, description="How many calls the real world answered: len(real_call_ids).")
    rehearsal_attempts: int = Field(
        default=0,
        description="Private rehearsal: attempts imagined in forks of the "
        "episode (0 for an agent that does not rehearse).",
    )
    rehearsal_turns: int = Field(
        default=0, description="Private rehearsal: generations (act and rehearse turns) in those attempts."
    )
    rehearsal_tokens: int = Field(
        default=0,
        description="Private rehearsal: tokens generated in those attempts "
        "(exact for token agents, counted as words and symbols for others).",
    )
    rehearsal_seconds: float = Field(
        default=0.0, description="Private rehearsal: seconds spent rehearsing, rounded to 4 decimals."
    )
    routes: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Adaptive dynamics: per routed call, its tool, who answered it (real or rehearsed) and the "
        "router's estimate, count and reason that chose; left out of the JSON when empty.",
    )
    private_context: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Private rehearsal: per "
        "rehearsed turn, its position in messages, its attempts and the "
        "index of the chosen one (None: generated with their digest); "
        "left out of the JSON when empty.",
    )

    @model_serializer(mode="wrap")
    def _without_empty_context(self, handler) -> dict:
        """The fields, ``routes`` and ``private_context`` left out when empty."""
        record = handler(self)
        for name in ("routes", "private_context"):
            if not record.get(name):
                record.pop(name, None)
        return record


class CompareRecord(BaseModel):
    """One compared call of ``envace-gym compare``: a line of its JSONL output.

    Under shadow dynamics the real world answers the call and the rehearser writes its own answer
    first; the record holds both and the :func:`~envace_gym.fidelity.fidelity` measures between them.
    """

    model_config = ConfigDict(strict=True)

    task_id: str = Field(description="The task's id, as text.")
    tool: str = Field(description="The tool's name.")
    arguments: dict[str, Any] = Field(description="The call's arguments, as the actor wrote them.")
    real: str = Field(description="The tool message the real world answered (JSON text).")
    rehearsed: str = Field(description="The tool message the rehearser wrote for the same call (JSON text).")
    parsed: bool = Field(description="Whether the rehearsal parsed as a tool response.")
    shape: float = Field(description="Share of the two answers' leaf paths that both have (Jaccard), 0 to 1.")
    leaf_match: float = Field(description="Share of the real answer's leaves the rehearsal has with the same value.")
    error_agree: bool = Field(description="Whether both answers are errors, or neither is.")
    exact: bool = Field(description="Whether the two answers are the same JSON value.")
    world_model: str | None = Field(
        default=None, description="The rehearser's name (None in records written before it was kept)."
    )
    state_dependent: bool | None = Field(
        default=None,
        description="Whether the real answer depends on the episode's earlier calls: the same call on the "
        "task's fresh world answers otherwise. None where the suite's world cannot be rebuilt here (a server's).",
    )


def write_record(file: IO[str], record: dict) -> None:
    """Append ``record`` to an open JSONL file as one line, in one write, flushed: a reader never sees
    half of it, and a killed writer leaves at most its last line partial."""
    file.write(json.dumps(record) + "\n")
    file.flush()


def agent_settings(kwargs: dict) -> dict:
    """An agent's keyword settings as its run's records keep them: JSON values, sorted by name, those named
    like a secret (ending as :data:`~envace_gym.redaction.SECRET_NAMES` do: ``api_key``, ``token``) left out."""
    kept = {k: v for k, v in sorted(kwargs.items()) if not k.upper().endswith(SECRET_NAMES)}
    return json.loads(json.dumps(kept, default=repr))


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")


def safe_name(text: str) -> str:
    """``text`` as one file name: itself where it is a short plain name (letters, digits, ``_.-``), else its
    plain characters followed by a hash of the whole text, so that two names never share a file and none
    becomes a path (``hf:runs/step-1`` is ``hf_runs_step-1-`` and 8 hex digits)."""
    if _SAFE_NAME.fullmatch(text):
        return text
    plain = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._-")[:60]
    return f"{plain or 'name'}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def id_path(env_id: str) -> Path:
    """An env id as a relative folder: ``EnvACE/tau2-retail-v0`` is ``EnvACE/tau2-retail-v0``, its
    namespace a folder of its own; each part made a :func:`safe_name`."""
    namespace, _, name = env_id.rpartition("/")
    return Path(safe_name(namespace), safe_name(name)) if namespace else Path(safe_name(name))


class OutputInUse(ValueError):
    """Another process holds the lock on an output."""


_HELD_LOCKS: weakref.WeakSet[IO[str]] = weakref.WeakSet()  # the open lock files of this process's locks


def _drop_locks_in_child() -> None:
    """In a forked child (an isolated tool call, say): the held locks' descriptors made /dev/null, so that a
    child left running by a killed parent never keeps an output locked (a lock is its open file's, shared by
    every process holding that file open)."""
    held = [f for f in _HELD_LOCKS if not f.closed]
    if held:
        null = os.open(os.devnull, os.O_RDONLY)
        for f in held:
            os.dup2(null, f.fileno())
        os.close(null)
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_drop_locks_in_child)


def _gone(holder: str) -> int | None:
    """The pid a lock file names (``pid N (since ...)``) when no such process is left, else None."""
    match = re.match(r"pid (\d+)\b", holder)
    if match is None:
        return None
    try:
        os.kill(int(match[1]), 0)
    except ProcessLookupError:
        return int(match[1])
    except (OSError, OverflowError):  # alive, another user's
        pass
    return None


class OutputLock:
    """An exclusive lock on an output, so that a second process given the same file (or folder) is refused
    before it writes, rather than both writing into one file. The lock is ``FILE.lock`` (a folder's is
    ``FOLDER/.lock``), holding the holder's pid; the kernel drops it when the holder ends, however it ends,
    and no forked child keeps it. A lock still held though the pid it names is gone (held by some other
    descendant of a killed holder) is taken over, with a warning naming that pid.
    Use it as a context manager or with :meth:`acquire` and :meth:`release`."""

    def __init__(self, path: str | Path):
        path = Path(path)
        self.path = path
        self.file = path / ".lock" if path.is_dir() else path.with_name(path.name + ".lock")
        self._held: IO[str] | None = None

    def acquire(self) -> OutputLock:
        """Take the lock (a no-op while held); :class:`OutputInUse` names the process that holds it."""
        if self._held is not None:
            return self
        self.file.parent.mkdir(parents=True, exist_ok=True)
        while True:
            held = self.file.open("a+")
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.seek(0)
                holder = " ".join(held.read(200).split()) or "another process"
                dead = _gone(holder)
                if dead is not None and self._is(held):
                    warnings.warn(
                        f"{self.path}: its lock names pid {dead}, which has ended; taking the lock over",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    self.file.unlink(missing_ok=True)
                    held.close()
                    continue
                held.close()
                raise OutputInUse(
                    f"{self.path} is being written by {holder}; wait for it to end, or give another --out"
                ) from None
            if self._is(held):  # the holder before may have removed the file between our open and our lock
                break
            held.close()
        held.truncate(0)
        held.write(f"pid {os.getpid()} (since {time.strftime('%H:%M:%S')})")
        held.flush()
        self._held = held
        _HELD_LOCKS.add(held)
        return self

    def _is(self, opened: IO[str]) -> bool:
        """Whether ``opened`` is still the file at the lock's path."""
        try:
            return os.stat(self.file).st_ino == os.fstat(opened.fileno()).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Drop the lock and remove its file (a no-op when not held)."""
        if self._held is None:
            return
        _HELD_LOCKS.discard(self._held)
        self.file.unlink(missing_ok=True)
        self._held.close()
        self._held = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _depth(line: str) -> int:
    """How deep the brackets of a JSON line nest, counted on its text (without parsing or recursion)."""
    steps = (1 if c in "[{" else -1 for c in _STRING.sub("", line) if c in "[]{}")
    return max(accumulate(steps), default=0)


def rows(path: str | Path) -> list[dict]:
    """The records of a JSONL file; a line that is not a JSON object, or nests deeper than
    :data:`MAX_DEPTH`, is a ValueError naming the file and line. Lines end at ``\\n`` only, so
    U+2028 or U+0085 inside a string (JSON written with ``ensure_ascii=False``) stays in it."""
    out = []
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if line.count("[") + line.count("{") > MAX_DEPTH and _depth(line) > MAX_DEPTH:
            raise ValueError(f"{path}:{number}: nested deeper than {MAX_DEPTH} levels")
        try:
            row = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{number}: not JSON: {e}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: a record must be a JSON object")
        out.append(row)
    return out


def read(path: str | Path):
    """The records of a ``run`` or ``compare`` output (:func:`rows`), one row each: ``task_id`` and the
    other names stay text (pandas' ``string`` dtype, missing as ``<NA>``), numbers stay numbers, and
    nested fields (``reward_info``, ``messages``) are Python objects."""
    import pandas as pd

    frame = pd.DataFrame(rows(path))
    for column in TEXT_COLUMNS:
        if column in frame:
            frame[column] = frame[column].astype("string")
    return frame


def resume_records(path: str | Path, expected: dict) -> list[dict]:
    """The records of a ``run`` output that ``run --resume`` keeps: the first of each ``(task_id, seed)``.

    A last line that a killed run left partial is cut off the file (its episode is played again), and a
    whole last line without its newline gets one. Every record must be a :class:`RunRecord` and have the
    run settings of ``expected``: a field's value, or a tuple of the values it may have (``reward_source``
    may also be None: an episode that ended before it was scored); a setting it lacks must be the same in
    every record. Else a ValueError names the file and line. The records come back as ``RunRecord`` dumps.
    """
    path = Path(path)
    data = path.read_bytes()
    tail = data[data.rfind(b"\n") + 1 :]  # the last line, when it lacks its newline
    if tail.strip():
        try:
            json.loads(tail)
        except (ValueError, RecursionError):  # a record cut off mid-write
            with path.open("r+b") as f:
                f.truncate(len(data) - len(tail))
        else:
            with path.open("ab") as f:
                f.write(b"\n")
    lines = data.decode("utf-8", "replace").split("\n")
    numbers = [number for number, line in enumerate(lines, 1) if line.strip()]  # of the lines rows() reads
    expected = dict(expected)
    kept: dict[tuple, dict] = {}  # (task_id, seed) -> its first record
    for number, row in zip(numbers, rows(path)):
        try:
            record = RunRecord.model_validate(row).model_dump()
        except ValidationError as e:
            field = str(e.errors()[0]["loc"][0])
            raise ValueError(
                f"{path}:{number}: not a run record: {field} {f'is {row[field]!r:.80}' if field in row else 'missing'}"
            ) from None
        for field in ("env_id", "split", "agent", "agent_kwargs", "dynamics"):
            expected.setdefault(field, record[field])
        for field, want in expected.items():
            allowed = want if isinstance(want, tuple) else (want,)
            if record[field] not in allowed and not (field == "reward_source" and record[field] is None):
                raise ValueError(
                    f"{path}:{number}: the record of another run: its {difference(field, record[field], allowed)}; "
                    "resume with the same settings, or give another --out"
                )
        kept.setdefault((record["task_id"], record["seed"]), record)
    return list(kept.values())


def difference(field: str, recorded: Any, allowed: tuple) -> str:
    """How a record's ``field`` differs from the values a run ``allowed``: ``FIELD is X, this run's Y``;
    for settings (a dict against a dict), the first setting that differs, by name."""
    ours = allowed[0]
    if len(allowed) == 1 and isinstance(recorded, dict) and isinstance(ours, dict):
        name = next(k for k in sorted({*recorded, *ours}) if recorded.get(k, ...) != ours.get(k, ...))
        shown = [repr(d[name]) if name in d else "unset" for d in (recorded, ours)]
        return f"{field} {name} is {shown[0]:.80}, this run's {shown[1]:.80}"
    return f"{field} is {recorded!r:.80}, this run's {' or '.join(map(repr, allowed))}"
