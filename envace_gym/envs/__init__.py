"""Deprecated: the suites moved to :mod:`envace_gym.suites`. ``envace_gym.envs.X`` is the module
``envace_gym.suites.X`` (the same object, so classes compare equal); the env constructors the suite
packages held are :func:`envace_gym.make_mcp_env` and ``gym.make`` of the ids."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

warnings.warn(
    "envace_gym.envs is now envace_gym.suites; import from there (this alias will be removed)",
    DeprecationWarning,
    stacklevel=2,
)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``envace_gym.envs.X`` as the (imported now if not yet) module ``envace_gym.suites.X``."""

    def __init__(self):
        self._own_specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(__name__ + ".") or name == f"{__name__}.mcp":  # mcp: a module of old names
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        module = importlib.import_module("envace_gym.suites" + spec.name[len(__name__) :])
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._own_specs.pop(module.__spec__.name)  # the import system gave it the alias's


if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
