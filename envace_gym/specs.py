"""Spec strings: ``NAME:MODEL@BASE_URL[?options]`` (``openai:``, ``vllm:``, ``judge:``, ``llm:``,
``vitabench:``), the ``MODULE`` / ``PATH.py`` of ``MODULE:NAME`` forms, and agent names
(:func:`parse_agent`, the one place they are split). Imports no other envace_gym module, so that every
module may use it."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

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


@dataclass(frozen=True)
class AgentSpec:
    """An agent's name (``agents.load``'s, ``--agent``, ``--model``) parsed by :func:`parse_agent`.

    ``kind`` and ``arg``: ``builtin`` and the name (``oracle``, ``smollm2``, ...); ``hf`` or ``vllm`` and
    the model (a path or ``smollm2``), with ``base_url`` for ``vllm:PATH@BASE_URL``; ``openai`` and the
    model, with ``base_url`` and ``options``; ``file`` or ``module`` and the ``PATH.py`` or ``MODULE``,
    with ``attr`` the class."""

    name: str
    kind: str
    arg: str
    base_url: str | None = None
    attr: str | None = None
    options: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def transformers(self) -> bool:
        """Whether it is a transformers model (``hf:PATH``, ``smollm2``)."""
        return self.kind == "hf" or (self.kind == "builtin" and self.arg == "smollm2")

    @property
    def holds_model(self) -> bool:
        """Whether it loads a model's weights into this process (``smollm2``, ``hf:PATH``, ``vllm:PATH``)."""
        return self.transformers or (self.kind == "vllm" and self.base_url is None)


def parse_agent(name: str | AgentSpec) -> AgentSpec:
    """The :class:`AgentSpec` of ``name``: ``NAME`` (builtin), ``hf:PATH``, ``vllm:PATH``,
    ``vllm:PATH@BASE_URL``, ``openai:MODEL@BASE_URL[?options]`` (:func:`parse_spec`), ``PATH.py:CLASS``
    or ``MODULE:CLASS``; a ValueError saying the form expected where ``name`` has none of them. A spec
    already parsed is its own."""
    if isinstance(name, AgentSpec):
        return name
    if not isinstance(name, str) or not name:
        raise ValueError(f"an agent name is a non-empty string, got {name!r}")
    kind, colon, arg = name.partition(":")
    if not colon:
        return AgentSpec(name, "builtin", name)
    if kind == "openai":
        model, base_url, options = parse_spec(name, "openai:")
        return AgentSpec(name, kind, model, base_url, options=options)
    if kind == "hf" or (kind == "vllm" and "@" not in arg):
        if not arg:
            raise ValueError(f"expected '{kind}:PATH', got {name!r}")
        return AgentSpec(name, kind, arg)
    if kind == "vllm":
        path, _, base_url = arg.rpartition("@")
        if not path or not base_url:
            raise ValueError(f"expected 'vllm:PATH@BASE_URL', got {name!r}")
        return AgentSpec(name, kind, path, base_url)
    module, _, attr = name.rpartition(":")
    if not module or not attr.isidentifier():
        raise ValueError(f"expected 'MODULE:CLASS' or 'PATH.py:CLASS', got {name!r}")
    return AgentSpec(name, "file" if module.endswith(".py") else "module", module, attr=attr)


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
