"""Config dataclass fields that carry their help (one source for a setting's default, its
documentation and its command-line option: :mod:`envace_gym.cli.options` builds the options),
and the one check of their numbers: finite, of their type, in their :class:`Range`."""

from __future__ import annotations

import math
import numbers
import types
from collections.abc import Iterable, Mapping
from copy import copy
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Union, get_args, get_origin, get_type_hints


def setting(default: Any = MISSING, help: str = "") -> Any:
    """A dataclass field with its help in ``metadata["help"]``; a list or dict default is copied
    for each instance; without a default the field is required."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Range:
    """The values a number may take: ``least`` or more (more than ``least`` when ``above``), up to ``most``."""

    least: float = -math.inf
    most: float = math.inf
    above: bool = False

    def __contains__(self, value: Any) -> bool:
        return (value > self.least if self.above else value >= self.least) and value <= self.most

    def __str__(self) -> str:
        if self.above:
            return f"above {self.least}" + ("" if self.most == math.inf else f" and at most {self.most}")
        if self.most == math.inf:
            return "0 or more" if self.least == 0 else f"at least {self.least}"
        return f"at most {self.most}" if self.least == -math.inf else f"between {self.least} and {self.most}"


COUNT = Range(1)  # sizes, steps, turns, tokens
NONNEGATIVE = Range(0)  # 0: none, never, off
POSITIVE = Range(0, above=True)  # learning rates, temperatures
SHARE = Range(0, 1)  # a probability
SEED = Range(0, 2**32 - 1)  # what numpy seeds


def option(name: str) -> str:
    """A field's command-line option: ``--NAME`` with dashes."""
    return f"--{name.replace('_', '-')}"


def check_number(label: str, value: Any, within: Range | None = None, whole: bool = False) -> None:
    """Refuse, naming it ``label``, a ``value`` that is not a finite number (a whole one with ``whole``;
    a bool is neither) or not ``within`` its range."""
    kind = numbers.Integral if whole else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"{label} must be {'a whole number' if whole else 'a number'}, got {value!r:.80}")
    try:
        finite = whole or math.isfinite(value)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise ValueError(f"{label} must be a finite number, got {value!r:.80}")
    if within is not None and value not in within:
        raise ValueError(f"{label} must be {within}, got {value!r:.80}")


def numeric_fields(cls: type) -> dict[str, tuple[bool, bool]]:
    """The int and float fields of the dataclass ``cls``: ``(whole, optional)`` by name."""
    hints, out = get_type_hints(cls), {}
    for f in fields(cls):
        hint = hints[f.name]
        kinds = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
        number = next((k for k in kinds if k in (int, float)), None)
        if number is not None:
            out[f.name] = (number is int, type(None) in kinds)
    return out


def check_settings(config: object, ranges: Mapping[Range, Iterable[str]]) -> None:
    """Refuse a number field of the dataclass ``config`` that is not a finite number of its type
    (None passes where the field allows it: not given) or, named in ``ranges`` (range -> names),
    out of its range: a ValueError naming it as its option, ``--NAME``."""
    within = {name: limits for limits, names in ranges.items() for name in names}
    for name, (whole, optional) in numeric_fields(type(config)).items():
        value = getattr(config, name)
        if not (value is None and optional):
            check_number(option(name), value, within.get(name), whole)


def check_least(least: int, values: dict, names: Iterable[str], as_options: bool = False) -> None:
    """Refuse a value of ``values`` named in ``names`` that is not a number of at least ``least``
    (None: not given), naming it (as its option, ``--NAME``, with ``as_options``)."""
    for name in names:
        if values[name] is not None:
            check_number(option(name) if as_options else name, values[name], Range(least))
