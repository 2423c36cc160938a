"""Agents by name: ``oracle``, ``noisy-oracle``, ``random``, ``knn``, ``smollm2`` (in transformers, or
in vLLM as ``vllm:smollm2``), ``hf:``, ``vllm:`` (offline or ``@BASE_URL``), ``openai:``; and
:class:`~envace_gym.agents.private_rehearsal.PrivateRehearsal`, which wraps any of them."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any, cast

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.agents.knn import KNNAgent
from envace_gym.agents.noisy_oracle import NoisyOracle
from envace_gym.agents.oracle import OracleAgent
from envace_gym.agents.private_rehearsal import PrivateRehearsal
from envace_gym.agents.random_agent import RandomAgent
from envace_gym.specs import AgentSpec, import_module, parse_agent

AGENTS = {"oracle": OracleAgent, "noisy-oracle": NoisyOracle, "random": RandomAgent, "knn": KNNAgent}
NAMES = (
    "oracle, noisy-oracle, random, knn, smollm2, vllm:smollm2, hf:PATH, vllm:PATH, vllm:PATH@BASE_URL, "
    "openai:MODEL@BASE_URL, MODULE:CLASS"
)


def load(name: str | AgentSpec, env: gym.Env | None = None, **kwargs: Any) -> Agent:
    """The agent called ``name`` (the names of the command line, parsed by
    :func:`~envace_gym.specs.parse_agent`, or already parsed), bound to ``env`` where it needs one."""
    spec = parse_agent(name)
    name = spec.name
    if spec.kind in ("hf", "vllm"):
        local = Path(spec.arg).expanduser()
        if spec.arg.startswith(("/", ".", "~")) and not local.exists():
            raise FileNotFoundError(f"no model at {spec.arg!r}: no such file or folder")
        if local.is_dir() and not (local / "config.json").is_file():
            raise FileNotFoundError(
                f"no model in {spec.arg!r}: the folder has no config.json (a transformers model "
                "folder holds config.json, the weights and the tokenizer; "
                "`envace-gym tiny-model PATH` writes one)"
            )
    if spec.kind == "builtin":
        return _builtin(name, env, **kwargs)
    if spec.kind == "vllm" and spec.arg == "smollm2" and spec.base_url is None:
        # the same model in vLLM's engine, its context (8192 tokens) the default
        from envace_gym.agents.hf import smollm2_path
        from envace_gym.agents.vllm import VLLMAgent

        agent = VLLMAgent(smollm2_path(kwargs.pop("cache_dir", None)), env, **{"max_model_len": 8192} | kwargs)
        agent.name = name
        return agent
    if spec.kind == "hf":
        from envace_gym.agents.hf import HFAgent

        return HFAgent(spec.arg, env, **check_kwargs(HFAgent, name, kwargs))
    if spec.kind == "vllm" and spec.base_url is not None:
        from envace_gym.agents.vllm import VLLMServerAgent

        return VLLMServerAgent(spec.arg, spec.base_url, env, **kwargs)
    if spec.kind == "vllm":
        from envace_gym.agents.vllm import VLLMAgent

        return VLLMAgent(spec.arg, env, **kwargs)
    if spec.kind == "openai":
        from envace_gym.agents.openai import OpenAIAgent

        assert spec.base_url is not None  # parse_agent gives every openai: spec one
        return OpenAIAgent(spec.arg, spec.base_url, env, **spec.options | kwargs)
    return _user_agent(spec, env, **kwargs)


def _builtin(name: str, env: gym.Env | None, **kwargs: Any) -> Agent:
    """One of :data:`AGENTS`, or ``smollm2``; a ValueError listing the names for any other."""
    if name == "oracle" and isinstance(env, gym.vector.VectorEnv):
        from envace_gym.agents.vector import VectorOracle

        return VectorOracle(cast("gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv", env))  # as make_vec gives
    if name in AGENTS:
        return AGENTS[name](env, **check_kwargs(AGENTS[name], name, kwargs))
    if name == "smollm2":
        from envace_gym.agents.hf import load_smollm2

        return load_smollm2(env, **kwargs)
    raise ValueError(f"unknown agent {name!r}; use one of: {NAMES}")


def holds_model(name: str) -> bool:
    """Whether the agent ``name`` loads a model's weights into this process (``smollm2``, ``hf:PATH``,
    ``vllm:PATH``): worth loading once and binding to each env."""
    return parse_agent(name).holds_model


def _user_agent(spec: AgentSpec, env: gym.Env | None, **kwargs: Any) -> Agent:
    """``MODULE:CLASS`` or ``PATH.py:CLASS``: an :class:`Agent` subclass, given ``env=`` if it takes one."""
    cls = getattr(import_module(spec.arg), spec.attr or "", None)
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise ValueError(f"{spec.name!r} names no envace_gym.agents.Agent subclass")
    check_kwargs(cls, spec.name, kwargs)
    if "env" in inspect.signature(cls).parameters:
        kwargs["env"] = env
    return cls(**kwargs)


SIMPLE_TYPES = (bool, int, float, str)


def _fits(value: Any, kind: type) -> bool:
    """Whether ``value`` is a ``kind`` as JSON means it: a bool is no number, an int is a float."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, kind) or (kind is float and isinstance(value, int))


def check_kwargs(cls: type[Any], name: str, kwargs: dict) -> dict:
    """``kwargs`` if ``cls`` takes each of them with a value of its annotated type (checked for
    ``bool``, ``int``, ``float`` and ``str`` annotations, and their optional forms), else one
    ValueError naming the agent, the keyword and what it takes."""
    signature = inspect.signature(cls)
    if any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
        return kwargs
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # annotations that do not resolve here: names are still checked
        hints = {}
    for key, value in kwargs.items():
        if key not in signature.parameters or key == "env":
            takes = ", ".join(p for p in signature.parameters if p not in ("self", "env")) or "none"
            raise ValueError(f"the {name} agent takes no keyword {key!r}; it takes: {takes}")
        allowed = [t for t in typing.get_args(hints.get(key)) or (hints.get(key),) if t in SIMPLE_TYPES]
        if type(None) in typing.get_args(hints.get(key)) and value is None:
            continue
        if allowed and not any(_fits(value, t) for t in allowed):
            raise ValueError(
                f"the {name} agent's {key} must be {' or '.join(t.__name__ for t in allowed)}, got {value!r}"
            )
    return kwargs


def with_rehearsal(
    agent: Agent, env: gym.Env, budget: int = 0, world_model: str | None = None, **options: Any
) -> Agent:
    """``agent`` with test-time private rehearsal of ``budget`` attempts
    (:class:`~envace_gym.agents.private_rehearsal.PrivateRehearsal`'s
    ``options``; a ``world_model`` named as for :func:`load`, loaded in ``env``). The options are
    checked at every budget; budget 0 is the agent itself."""
    wrapped = PrivateRehearsal(
        agent, env, budget, world_model=load(world_model, env=env) if world_model else None, **options
    )
    return wrapped if budget else agent


__all__ = [
    "AGENTS",
    "Agent",
    "KNNAgent",
    "NoisyOracle",
    "OracleAgent",
    "PrivateRehearsal",
    "RandomAgent",
    "load",
    "with_rehearsal",
]
