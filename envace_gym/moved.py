"""Names that moved since 0.1.0, the one release: ``envace_gym.envs`` is now :mod:`envace_gym.suites`, the
core modules (``envace_gym.suite``, ``episode``, ``tools``, ...) are in :mod:`envace_gym.core` and the viewer in
:mod:`envace_gym.reporting` (the old names import as the very same modules), and ``envace_gym.envs.mcp``'s
constructors and ``SelfRehearsal`` still work. Each use warns with :class:`Deprecated`, naming the new place and
:data:`REMOVAL`. Names renamed within the unreleased 0.2.0 keep no alias."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

#: the release that removes every alias here
REMOVAL = "0.3.0"
OLD, NEW = "envace_gym.envs", "envace_gym.suites"
KEPT = {"envace_gym.envs.mcp"}  # a module of its own: the old MCP constructors
#: 0.1.0's modules that moved, by old name
MOVED = {
    **{
        f"envace_gym.{name}": f"envace_gym.core.{name}"
        for name in ("suite", "episode", "grader", "response", "tools", "messages", "errors", "limits", "state")
    },
    "envace_gym.viewer": "envace_gym.reporting.viewer",
}


class Deprecated(DeprecationWarning):
    """The project's own deprecation warning (its tests make it an error unless a test expects it)."""


def warn(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that ``old`` is now ``new`` and goes in :data:`REMOVAL`."""
    warnings.warn(f"{old} is now {new}; it will be removed in {REMOVAL}", Deprecated, stacklevel=stacklevel)


def new_name(name: str) -> str | None:
    """Where the module ``name`` is now, or None if it did not move."""
    if name in MOVED:
        return MOVED[name]
    if name.startswith(OLD + ".") and name not in KEPT:
        return NEW + name[len(OLD) :]
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old suite module's name as the (imported now if not yet) module of its new name."""

    def __init__(self):
        self._own_specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if new_name(name) else None

    def create_module(self, spec):
        new = new_name(spec.name)
        assert new is not None  # find_spec's
        if spec.name in MOVED:
            warn(spec.name, new, stacklevel=2)
        module = importlib.import_module(new)
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._own_specs.pop(module.__spec__.name)  # the import system gave it the alias's


def install() -> None:
    """Make the old suite names importable (once per process)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())  # last: only names no other finder knows reach it
