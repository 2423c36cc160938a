"""Run and compare records (JSONL) as a pandas DataFrame with the dtypes the records mean."""

from __future__ import annotations

import json
from pathlib import Path

# text columns that pandas' own JSON reader would turn into numbers or dates (task id "5" -> 5)
TEXT_COLUMNS = ("task_id", "env_id", "split", "agent", "dynamics", "reward_source", "ended_by", "error", "tool")


def rows(path: str | Path) -> list[dict]:
    """The records of a JSONL file; a line that is not a JSON object is a ValueError naming the file and line."""
    out = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
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
