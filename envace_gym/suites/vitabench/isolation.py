"""One world's own copies of VitaBench's class registries and of its order-id clock.

VitaBench's stores, products and locations add themselves, when built, to tables that
their classes keep by thread id (``ThreadSafeBase``), and its search and address tools
read those tables. Two tasks' worlds in one thread therefore see each other's objects
(VitaBench's runner clears the store and product tables between tasks, not the location
one), and a call run in another thread sees none. Here each table is replaced by a
stand-in that, in a thread where a world is active, is that world's own table, and
elsewhere VitaBench's per-thread table, so VitaBench's own code run beside it is
unaffected. Order ids hash the wall clock; inside a world the clock is the world's: the
task's time plus one second per id given, so an episode, its forks and its replays
assign the same ids.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

TABLES = ("_global_instances", "_polymorphic_instances")
LOCKS = ("_global_lock", "_polymorphic_lock")
_local = threading.local()


class Registries:
    """A world's tables, by (owning class, table name), and its clock (``epoch`` plus ``ticks`` seconds)."""

    def __init__(self, epoch: float):
        self.tables: dict[tuple[type, str], dict] = {}
        self.epoch, self.ticks = epoch, 0

    @contextmanager
    def active(self) -> Iterator[None]:
        """VitaBench's classes read and write these tables (and this clock) in this thread meanwhile."""
        previous = getattr(_local, "registries", None)
        _local.registries = self
        try:
            yield
        finally:
            _local.registries = previous

    def now(self) -> datetime:
        self.ticks += 1
        return datetime.fromtimestamp(self.epoch + self.ticks, UTC)


def _active() -> Registries | None:
    return getattr(_local, "registries", None)


class _ThreadTable(dict):
    """Stands in for one ``{thread id: {key: object}}`` table of VitaBench's."""

    def __init__(self, slot: tuple[type, str], existing: dict):
        super().__init__(existing)
        self.slot = slot

    def __contains__(self, thread_id) -> bool:
        return _active() is not None or super().__contains__(thread_id)

    def __getitem__(self, thread_id) -> dict:
        registries = _active()
        if registries is None:
            return super().__getitem__(thread_id)
        return registries.tables.setdefault(self.slot, {})


class _Clock:
    """Stands in for ``datetime`` in VitaBench's ``vita.environment.db``, which only asks it ``now()``."""

    @staticmethod
    def now(tz=None) -> datetime:
        registries = _active()
        return registries.now() if registries is not None else datetime.now(tz)


def _classes(base: type[Any]) -> Iterator[type[Any]]:
    for cls in base.__subclasses__():
        yield cls
        yield from _classes(cls)


def install() -> None:
    """Put the stand-ins in place: on the registry classes' roots (their subclasses inherit them) and
    wherever VitaBench already made a table of a class's own. Idempotent."""
    import vita.environment.db as db_module
    from vita.data_model.thread_safe_base import ThreadSafeBase

    roots = set(ThreadSafeBase.__subclasses__())
    for cls in _classes(ThreadSafeBase):
        for table, lock in zip(TABLES, LOCKS):
            own = vars(cls).get(table)
            if isinstance(own, _ThreadTable) or (own is None and cls not in roots):
                continue
            setattr(cls, table, _ThreadTable((cls, table), own or {}))
            if lock not in vars(cls):
                setattr(cls, lock, threading.Lock())
    db_module.datetime = _Clock
