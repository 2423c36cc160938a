"""Spec strings: ``NAME:MODEL@BASE_URL[?options]`` (``openai:``, ``vllm:``, ``judge:``, ``llm:``,
``vitabench:``) and the ``MODULE`` / ``PATH.py`` of ``MODULE:NAME`` forms. Imports no other envace_gym
module, so that every module may use it."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

OPTIONS = {"timeout": float, "max_retries": int, "max_reply_bytes": int}  # of a MODEL@BASE_URL spec


def parse_spec(spec: str, prefix: str) -> tuple[str, str, dict]:
    """``PREFIX:MODEL@BASE_URL[?timeout=S&max_retries=N&max_reply_bytes=B]`` as ``(model, base_url, options)``."""
    model, _, rest = spec.removeprefix(prefix).partition("@")
    base_url, _, query = rest.partition("?")
    if not model or not base_url:
        raise ValueError(f"expected '{prefix}MODEL@BASE_URL[?timeout=S&max_retries=N&max_reply_bytes=B]', got {spec!r}")
    options = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        if key not in OPTIONS:
            raise ValueError(f"unknown option {key!r} in {spec!r}; use {', '.join(OPTIONS)}")
        try:
            options[key] = OPTIONS[key](value)
        except ValueError:
            raise ValueError(f"option {key} in {spec!r} needs a number, got {value!r}") from None
    return model, base_url, options


def import_module(name: str) -> ModuleType:
    """A module by dotted name (the working directory first on the path) or a ``.py`` file by path;
    a failure of any kind is one ``ImportError`` that names it."""
    try:
        if not name.endswith(".py"):
            cwd = os.getcwd()
            added = cwd not in sys.path
            if added:  # for this import alone: the caller's sys.path is left as it was
                sys.path.insert(0, cwd)
            try:
                return importlib.import_module(name)
            finally:
                if added and cwd in sys.path:
                    sys.path.remove(cwd)
        path = Path(name).resolve()
        known = sys.modules.get(path.stem)
        if known is not None:
            file = getattr(known, "__file__", None)
            if file and Path(file).resolve() == path:
                return known
            raise ImportError(f"another module named {path.stem!r} is already imported; rename the file")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # before it runs: dataclasses and pickle look it up
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[path.stem]
            raise
        return module
    except Exception as e:
        raise ImportError(f"cannot import {name!r}: {type(e).__name__}: {e}") from e
