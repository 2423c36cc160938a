"""Adaptive dynamics' router: per tool (and argument shape), a running estimate of how faithfully the
policy rehearses it, measured on shadow calls, and the choice for each new call: ask the real world
(the policy still rehearses first, so the estimate learns) or trust the policy's rehearsal.

The estimates are state that outlives an episode: :meth:`FidelityRouter.state_dict` goes into a
checkpoint, :meth:`~FidelityRouter.load_state_dict` restores it, and :func:`merge` adds the counts of
several processes' routers (each process routes on its own estimates between merges)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from envace_gym.config_fields import COUNT, NONNEGATIVE, Range, check_number

#: The most calls an estimate may count (a saved state's ``calls``): what a float still counts exactly.
MAX_CALLS = 2**53


@dataclass
class Estimate:
    """The fidelity of one key's shadow calls so far: how many, and the sum and sum of squares of the
    measure (``leaf_match`` by default, 0 to 1)."""

    calls: int = 0
    total: float = 0.0
    squares: float = 0.0

    @property
    def mean(self) -> float | None:
        return self.total / self.calls if self.calls else None

    def lower_bound(self, z: float) -> float:
        """The mean less ``z`` standard errors (0 before any call): what routing trusts."""
        if not self.calls:
            return 0.0
        mean = self.total / self.calls
        variance = max(0.0, self.squares / self.calls - mean * mean)
        return mean - z * math.sqrt((variance + 1e-4) / self.calls)


@dataclass
class FidelityRouter:
    """Routes each call of ``adaptive`` dynamics.

    A call goes to the real world (a shadow call: the policy rehearses it first and the two answers are
    compared with :func:`~envace_gym.fidelity.fidelity`) while its key's estimate has fewer than
    ``min_calls`` calls or its lower bound (mean less ``z`` standard errors) is below ``threshold``;
    otherwise the policy's rehearsal answers it, except for an ``explore`` share of real calls that keep
    the estimate honest. ``budget`` caps the real calls (None: no cap) until :meth:`refill`; past it,
    every call is rehearsed. The key is the tool's name with its argument names (``by_shape``) or the
    name alone.
    """

    threshold: float = 0.9
    min_calls: int = 4
    explore: float = 0.1
    z: float = 1.0
    budget: int | None = None
    by_shape: bool = True
    measure: str = "leaf_match"
    estimates: dict[str, Estimate] = field(default_factory=dict)
    real_calls: int = 0  # spent since the last refill

    def __post_init__(self):
        if not (math.isfinite(self.threshold) and 0.0 <= self.threshold <= 1.0):
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold!r}")
        if not (math.isfinite(self.explore) and 0.0 <= self.explore <= 1.0):
            raise ValueError(f"explore must be in [0, 1], got {self.explore!r}")
        if not (math.isfinite(self.z) and self.z >= 0):
            raise ValueError(f"z must be 0 or more, got {self.z!r}")
        check_number("min_calls", self.min_calls, COUNT, whole=True)
        if self.budget is not None:  # a NaN budget would compare false and lift the cap
            check_number("budget", self.budget, NONNEGATIVE, whole=True)

    def key(self, name: str, arguments: dict) -> str:
        """The estimate a call counts in: ``name(arg1,arg2)`` by its argument names, or ``name``."""
        return f"{name}({','.join(sorted(arguments))})" if self.by_shape else name

    def route(self, name: str, arguments: dict, rng: np.random.Generator) -> tuple[str, dict]:
        """``("shadow" | "policy", why)``: who answers the call, and the estimate and reason that chose it."""
        key = self.key(name, arguments)
        estimate = self.estimates.get(key, Estimate())
        why = {"key": key, "estimate": estimate.mean, "calls": estimate.calls}
        if self.budget is not None and self.real_calls >= self.budget:
            return "policy", why | {"reason": "budget spent"}
        if estimate.calls < self.min_calls:
            reason = "uncertain"
        elif estimate.lower_bound(self.z) < self.threshold:
            reason = "unfaithful"
        elif rng.random() < self.explore:
            reason = "explore"
        else:
            return "policy", why | {"reason": "faithful"}
        self.real_calls += 1
        return "shadow", why | {"reason": reason}

    def update(self, name: str, arguments: dict, score: dict) -> None:
        """Count one shadow call's fidelity (``score``: :func:`~envace_gym.fidelity.fidelity`'s measures)."""
        value = float(score[self.measure])
        estimate = self.estimates.setdefault(self.key(name, arguments), Estimate())
        estimate.calls += 1
        estimate.total += value
        estimate.squares += value * value

    def faithful(self, name: str, arguments: dict) -> bool:
        """Whether calls of this key are already rehearsed faithfully (what the gated world-model loss skips)."""
        estimate = self.estimates.get(self.key(name, arguments))
        return (
            estimate is not None and estimate.calls >= self.min_calls and estimate.lower_bound(self.z) >= self.threshold
        )

    def refill(self, budget: int | None = None) -> None:
        """Start a new budget period (a training step, say): ``budget`` real calls from now (default: the same)."""
        if budget is not None:
            check_number("budget", budget, NONNEGATIVE, whole=True)
            self.budget = budget
        self.real_calls = 0

    def state_dict(self) -> dict:
        """The estimates, as JSON-ready data (a checkpoint's ``router.json``)."""
        return {"estimates": {k: asdict(e) for k, e in sorted(self.estimates.items())}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s estimates; a malformed state is a ValueError naming the key (and
        the field: ``calls`` a whole number up to :data:`MAX_CALLS`)."""
        if not isinstance(state, Mapping) or not isinstance(state.get("estimates", {}), Mapping):
            raise ValueError("router state: it and its estimates must be mappings (key: calls, total, squares)")
        estimates = {}
        for key, value in state.get("estimates", {}).items():
            if not isinstance(value, Mapping):
                raise ValueError(f"router state: estimate {key!r} must be a mapping of calls, total and squares")
            try:
                calls, total, squares = value["calls"], float(value["total"]), float(value["squares"])
            except (KeyError, TypeError, ValueError, OverflowError):
                raise ValueError(f"router state: estimate {key!r} is not calls, total and squares") from None
            check_number(f"router state: estimate {key!r}: calls", calls, Range(0, MAX_CALLS), whole=True)
            estimate = Estimate(int(calls), total, squares)
            if not all(math.isfinite(x) and 0 <= x <= estimate.calls for x in (total, squares)):
                raise ValueError(f"router state: estimate {key!r} is out of range")
            estimates[str(key)] = estimate
        self.estimates = estimates


def merge(states: list[dict]) -> dict:
    """Several routers' :meth:`~FidelityRouter.state_dict` as one: each key's calls and sums added, so the
    merged mean is the mean over every process's shadow calls."""
    out: dict[str, Estimate] = {}
    for state in states:
        router = FidelityRouter()
        router.load_state_dict(state)
        for key, e in router.estimates.items():
            total = out.setdefault(key, Estimate())
            total.calls, total.total, total.squares = (
                total.calls + e.calls,
                total.total + e.total,
                total.squares + e.squares,
            )
    return {"estimates": {k: asdict(e) for k, e in sorted(out.items())}}
