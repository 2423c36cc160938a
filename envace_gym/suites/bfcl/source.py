"""How envace-gym reaches bfcl-eval: its data files, its backend classes and its AST checker.

bfcl-eval's config module creates result folders next to the installed package
unless ``BFCL_PROJECT_ROOT`` points elsewhere, so it is pointed at the cache
directory before anything of bfcl-eval is imported.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import types
from functools import cache
from importlib.resources import files

from envace_gym.cache import cache_dir

os.environ.setdefault("BFCL_PROJECT_ROOT", str(cache_dir("bfcl")))

from bfcl_eval.constants.executable_backend_config import (  # noqa: E402
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    STATELESS_CLASSES,
)

DATA = files("bfcl_eval") / "data"
VERSION = "BFCL_v4"


def _read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@cache
def entries(category: str) -> dict[str, dict]:
    """The entries of one BFCL category by id (``multi_turn_base``, ``simple_python``, ...)."""
    return {e["id"]: e for e in _read_jsonl(DATA / f"{VERSION}_{category}.json")}


@cache
def answers(category: str) -> dict[str, list]:
    """Each entry's ground truth by id; empty for the (ir)relevance categories, which have none."""
    path = DATA / "possible_answer" / f"{VERSION}_{category}.json"
    return {a["id"]: a["ground_truth"] for a in _read_jsonl(path)} if path.is_file() else {}


@cache
def class_docs(class_name: str) -> tuple[dict, ...]:
    """The function docs of one backend class, in bfcl-eval's own format."""
    return tuple(_read_jsonl(DATA / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]))


@cache
def backend_class(class_name: str) -> type:
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


def is_stateless(class_name: str) -> bool:
    return class_name in STATELESS_CLASSES


def stateless_classes() -> tuple[str, ...]:
    """Backend classes without state (their calls may run in a child process)."""
    return tuple(STATELESS_CLASSES)


class _KeepDots:
    """Stands in for a model config: function names are checked with their dots."""

    underscore_to_dot = False


class _AnyModel(dict):
    def __missing__(self, key):
        return _KeepDots()


@cache
def ast_checker():
    """bfcl-eval's ``ast_checker`` function.

    Its module imports bfcl-eval's model-config table, which imports every model
    SDK bfcl-eval supports; the checker only reads one flag from it (whether a
    model's function names had their dots replaced). So the module is imported
    with a one-flag stand-in for that table, which is removed again afterwards.
    """
    name = "bfcl_eval.eval_checker.ast_eval.ast_checker"
    if name in sys.modules:
        return sys.modules[name].ast_checker
    config_name = "bfcl_eval.constants.model_config"
    real = sys.modules.get(config_name)
    stand_in = types.ModuleType(config_name)
    stand_in.MODEL_CONFIG_MAPPING = _AnyModel()
    sys.modules[config_name] = stand_in
    try:
        module = importlib.import_module(name)
    finally:
        if real is None:
            del sys.modules[config_name]
        else:
            sys.modules[config_name] = real
    return module.ast_checker
