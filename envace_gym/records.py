"""Run and compare records (JSONL) as a pandas DataFrame with the dtypes the records mean."""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from pathlib import Path

# text columns that pandas' own JSON reader would turn into numbers or dates (task id "5" -> 5)
TEXT_COLUMNS = ("task_id", "env_id", "split", "agent", "dynamics", "reward_source", "ended_by", "error", "tool")
# far above what run, compare and train write (the JSON values inside them nest at most
# messages.MAX_JSON_DEPTH deep), far below what json and the viewer can walk with recursion
MAX_DEPTH = 256
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def _depth(line: str) -> int:
    """How deep the brackets of a JSON line nest, counted on its text (without parsing or recursion)."""
    steps = (1 if c in "[{" else -1 for c in _STRING.sub("", line) if c in "[]{}")
    return max(accumulate(steps), default=0)


def rows(path: str | Path) -> list[dict]:
    """The records of a JSONL file; a line that is not a JSON object, or nests deeper than
    :data:`MAX_DEPTH`, is a ValueError naming the file and line. Lines end at ``\\n`` only, so
    U+2028 or U+0085 inside a string (JSON written with ``ensure_ascii=False``) stays in it."""
    out = []
    for number, line in enumerate(Path(path).read_bytes().decode("utf-8").split("\n"), 1):
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


# what run's summary reads from each record it resumes, and the types it must have
RUN_FIELDS = {"task_id": str, "seed": (int, type(None)), "reward": (int, float), "env_id": (str, type(None)),
              "split": (str, type(None)), "agent": str, "dynamics": str, "reward_source": (str, type(None)),
              "turns": int, "tool_calls": int, "ended_by": str, "seconds": (int, float)}


def resume_records(path: str | Path, expected: dict) -> list[dict]:
    """The records of a ``run`` output that ``run --resume`` keeps: the first of each ``(task_id, seed)``.

    A last line that a killed run left partial is cut off the file (its episode is played again), and a
    whole last line without its newline gets one. Every record must have :data:`RUN_FIELDS` (a finite
    ``reward``) and the run settings of ``expected``: a field's value, or a tuple of the values it may
    have (``reward_source`` may also be None: an episode that ended before it was scored); a setting
    it lacks must be the same in every record. Else a ValueError names the file and line.
    """
    path = Path(path)
    data = path.read_bytes()
    tail = data[data.rfind(b"\n") + 1:]  # the last line, when it lacks its newline
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
    expected, kept = dict(expected), {}
    for number, record in zip(numbers, rows(path)):
        for field, types in RUN_FIELDS.items():
            value = record.get(field, ...)
            if isinstance(value, bool) or not isinstance(value, types) or (
                    field == "reward" and not math.isfinite(value)):
                raise ValueError(f"{path}:{number}: not a run record: {field} "
                                 f"{'missing' if value is ... else f'is {value!r:.80}'}")
        for field in ("env_id", "split", "agent", "dynamics"):
            expected.setdefault(field, record[field])
        for field, want in expected.items():
            allowed = want if isinstance(want, tuple) else (want,)
            if record[field] not in allowed and not (field == "reward_source" and record[field] is None):
                raise ValueError(f"{path}:{number}: the record of another run: its {field} is {record[field]!r}, "
                                 f"this run's {' or '.join(map(repr, allowed))}; resume with the same settings, "
                                 "or give another --out")
        kept.setdefault((record["task_id"], record["seed"]), record)
    return list(kept.values())
