"""Copy-on-write state, so that a world costs what its episode touches.

A suite loads and validates its database once. Each episode's world wraps the
large keyed collections of that database in a :class:`CowMapping`: reading an
item through ``[]`` copies just that item into the episode's own overlay, so
mutations never reach the shared template, and forking or scoring a world only
looks at the overlay.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, MutableMapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

_MISSING = object()
_ATOMIC = frozenset({str, int, float, bool, type(None)})


def deep_copy(value: Any, memo: dict | None = None) -> Any:
    """``copy.deepcopy(value)``, about twice as fast on database items: plain lists and dicts and
    pydantic models (those that keep pydantic's ``__deepcopy__``) are copied here, as pydantic and
    ``copy`` would copy them (shared references stay shared), anything else by ``copy.deepcopy``."""
    kind = type(value)
    if kind in _ATOMIC:
        return value
    if memo is None:
        memo = {}
    copied = memo.get(id(value), _MISSING)
    if copied is not _MISSING:
        return copied
    # containers are in the memo before their items are copied (a cycle finds its copy);
    # atoms are tested inline, which saves a call per leaf
    if kind is list:
        out = memo[id(value)] = []
        out.extend(v if type(v) in _ATOMIC else deep_copy(v, memo) for v in value)
        return out
    if kind is dict:
        mapping = memo[id(value)] = {}
        mapping.update(
            {
                k if type(k) in _ATOMIC else deep_copy(k, memo): v if type(v) in _ATOMIC else deep_copy(v, memo)
                for k, v in value.items()
            }
        )
        return mapping
    if getattr(kind, "__deepcopy__", None) is not BaseModel.__deepcopy__:
        return copy.deepcopy(value, memo)
    model = memo[id(value)] = object.__new__(kind)
    setattr_ = object.__setattr__
    setattr_(
        model, "__dict__", {k: v if type(v) in _ATOMIC else deep_copy(v, memo) for k, v in value.__dict__.items()}
    )  # a model's own dict: not shared
    setattr_(model, "__pydantic_extra__", deep_copy(value.__pydantic_extra__, memo))
    setattr_(model, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
    private = getattr(value, "__pydantic_private__", None)
    # pydantic's own copy of the private attributes (a temporary dict, which ``copy`` keeps alive)
    setattr_(
        model,
        "__pydantic_private__",
        None
        if private is None
        else copy.deepcopy({k: v for k, v in private.items() if v is not PydanticUndefined}, memo),
    )
    return model


class CowMapping(MutableMapping):
    """A mapping over a shared, never-mutated ``base`` with a private overlay.

    ``m[k]`` returns the overlay's copy of the item (made on first access), so the
    caller may mutate it. Iteration over ``values()``/``items()`` yields the overlay
    item where there is one and the shared base item otherwise: callers that
    iterate must only read (the tau2 tools do; a test guards the shared base).
    """

    __slots__ = ("base", "local", "deleted")

    def __init__(self, base: dict, local: dict | None = None, deleted: set | None = None):
        self.base = base
        self.local = local if local is not None else {}
        self.deleted = deleted if deleted is not None else set()

    def __getitem__(self, key):
        item = self.local.get(key, _MISSING)
        if item is not _MISSING:
            return item
        if key in self.deleted or key not in self.base:
            raise KeyError(key)
        item = self.local[key] = deep_copy(self.base[key])
        return item

    def peek(self, key, default=None):
        """The current item without copying it (read only)."""
        if key in self.local:
            return self.local[key]
        if key in self.deleted:
            return default
        return self.base.get(key, default)

    def __setitem__(self, key, value):
        self.local[key] = value
        self.deleted.discard(key)

    def __delitem__(self, key):
        if key not in self:
            raise KeyError(key)
        self.local.pop(key, None)
        if key in self.base:
            self.deleted.add(key)

    def __contains__(self, key) -> bool:
        return key in self.local or (key in self.base and key not in self.deleted)

    def __iter__(self) -> Iterator:
        for key in self.base:
            if key not in self.deleted:
                yield key
        for key in self.local:
            if key not in self.base:
                yield key

    def __len__(self) -> int:
        return len(self.base) - len(self.deleted) + sum(1 for k in self.local if k not in self.base)

    def values(self):
        return (item for _, item in self.items())

    def items(self):
        """Pairs in iteration order, the overlay's item where there is one."""
        local, deleted = self.local, self.deleted
        for key, item in self.base.items():
            if key not in deleted:
                yield key, local.get(key, item)
        for key, item in local.items():
            if key not in self.base:
                yield key, item

    def touched(self) -> set:
        return set(self.local) | self.deleted

    def fork(self) -> CowMapping:
        return CowMapping(self.base, deep_copy(self.local), set(self.deleted))


def dump(value: Any) -> str:
    """A canonical JSON text of a model or plain value (tau2's hashing rules)."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    return json.dumps(value, sort_keys=True, default=str)


def cow_model(template: BaseModel) -> BaseModel:
    """A copy of ``template`` whose dict fields are copy-on-write and other fields deep copies."""
    fields: dict[str, Any] = {}
    for name in type(template).model_fields:
        value = getattr(template, name)
        fields[name] = CowMapping(value) if isinstance(value, dict) else deep_copy(value)
    return type(template).model_construct(**fields)


def fork_model(model: BaseModel) -> BaseModel:
    """An independent copy of a model made by :func:`cow_model` (or a plain model)."""
    fields: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        fields[name] = value.fork() if isinstance(value, CowMapping) else deep_copy(value)
    return type(model).model_construct(**fields)


def model_diff(a: BaseModel, b: BaseModel, b_dumps: dict | None = None) -> list[str]:
    """Paths (``field`` or ``field[key]``) where two models of one type differ.

    Copy-on-write fields are compared only on the keys either side touched, so the
    cost follows what the episodes changed, not the size of the database. ``b_dumps``
    keeps the dumps of ``b``'s items between calls, for a ``b`` that never changes.
    """

    def dump_b(path: tuple, value: Any) -> str:
        if b_dumps is None:
            return dump(value)
        if path not in b_dumps:
            b_dumps[path] = dump(value)
        return b_dumps[path]

    diffs = []
    for name in type(a).model_fields:
        va, vb = getattr(a, name), getattr(b, name)
        if isinstance(va, CowMapping) and isinstance(vb, CowMapping) and va.base is vb.base:
            for key in sorted(va.touched() | vb.touched(), key=str):
                ia, ib = va.peek(key, _MISSING), vb.peek(key, _MISSING)
                if (ia is _MISSING) != (ib is _MISSING) or (ia is not _MISSING and dump(ia) != dump_b((name, key), ib)):
                    diffs.append(f"{name}[{key}]")
        elif dump(_plain(va)) != dump_b((name,), _plain(vb)):
            diffs.append(name)
    return diffs


def _plain(value: Any) -> Any:
    if isinstance(value, CowMapping):
        return {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in value.items()}
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, list):
        return [v.model_dump() if isinstance(v, BaseModel) else v for v in value]
    return value
