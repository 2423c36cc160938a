"""Modules that moved. Their old names still import, as the very same modules, with a DeprecationWarning
naming the new place; the old names will be removed in a later release."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

#: old module: new module
MOVED = {
    "envace_gym.runner": "envace_gym.play.loop",
    "envace_gym.runs": "envace_gym.play.run",
    "envace_gym.compare": "envace_gym.play.compare",
    "envace_gym.distributed": "envace_gym.play.distributed",
    "envace_gym.records": "envace_gym.play.records",
    "envace_gym.bounded": "envace_gym.response",
    "envace_gym.settings": "envace_gym.config_fields",
    "envace_gym.testing": "envace_gym.fixtures",
}
#: old package: new package, for their modules (the old package itself warns on import, and
#: ``envace_gym.envs.mcp`` is a module of its own that keeps the old constructors)
MOVED_PACKAGES = {"envace_gym.envs": "envace_gym.suites"}
KEPT = {"envace_gym.envs.mcp"}


def new_name(name: str) -> str | None:
    """Where the module ``name`` is now, or None if it did not move."""
    if name in MOVED:
        return MOVED[name]
    for old, new in MOVED_PACKAGES.items():
        if name.startswith(old + ".") and name not in KEPT:
            return new + name[len(old) :]
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a moved module's old name as the (imported now if not yet) module of its new name."""

    def __init__(self):
        self._own_specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if new_name(name) else None

    def create_module(self, spec):
        new = new_name(spec.name)
        assert new is not None  # find_spec's
        if spec.name in MOVED:
            warnings.warn(f"{spec.name} is now {new}; import it from there", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._own_specs.pop(module.__spec__.name)  # the import system gave it the alias's


def install() -> None:
    """Make the old names importable (once per process)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
