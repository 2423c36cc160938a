"""Config dataclass fields that carry their help (one source for a setting's default, its
documentation and its command-line option: :mod:`envace_gym.cli.options` builds the options),
and the range check of their counts."""

from __future__ import annotations

from collections.abc import Iterable
from copy import copy
from dataclasses import MISSING, field
from typing import Any


def setting(default: Any = MISSING, help: str = "") -> Any:
    """A dataclass field with its help in ``metadata["help"]``; a list or dict default is copied
    for each instance; without a default the field is required."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def check_least(least: int, values: dict, names: Iterable[str], as_options: bool = False) -> None:
    """Refuse a value of ``values`` named in ``names`` that is below ``least`` (None: not given),
    naming it (as its option, ``--NAME``, with ``as_options``)."""
    for name in names:
        value = values[name]
        if value is not None and value < least:
            label = f"--{name.replace('_', '-')}" if as_options else name
            raise ValueError(f"{label} must be {'0 or more' if least == 0 else f'at least {least}'}, got {value!r}")
