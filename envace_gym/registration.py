"""The ``EnvACE/*`` Gymnasium ids, users' suites, and ``module:NAME`` specs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

from envace_gym.envs.bfcl import categories as bfcl_categories
from envace_gym.specs import import_module

if TYPE_CHECKING:
    from envace_gym.suite import Suite

SCORE_TRUNCATED = WrapperSpec("ScoreTruncated", "envace_gym.wrappers:ScoreTruncated", {})
ENV_IDS: dict[str, tuple[str, dict]] = {
    f"EnvACE/tau2-{domain}-v0": ("envace_gym.envs.tau2:make_env", {"domain": domain})
    for domain in ("retail", "airline", "telecom", "mock")
}
ENV_IDS["EnvACE/tau2-mock-gen-v0"] = ("envace_gym.envs.tau2.mock_gen:make_env", {})
ENV_IDS["EnvACE/tau2-mock-office-v0"] = ("envace_gym.envs.tau2.mock_office:make_env", {})
ENV_IDS.update(
    {bfcl_categories.env_id(c): ("envace_gym.envs.bfcl:make_env", {"category": c}) for c in bfcl_categories.ALL}
)
ENV_IDS.update(
    {f"EnvACE/vitabench-{d}-v0": ("envace_gym.envs.vitabench:make_env", {"domain": d}) for d in ("delivery", "instore")}
)


REMOTE_ID = "EnvACE/remote-v0"  # gym.make(REMOTE_ID, url=...): a RemoteEnv (not a suite: not in ENV_IDS)


def make_registered(entry_point: str | Callable, **kwargs):
    """An env of a registered id: ``entry_point(**kwargs)``, a simulator given by name (``simulator="oracle"``)
    resolved here, as that agent playing in the new env (the env itself knows no agents)."""
    name = kwargs.get("simulator")
    if isinstance(name, str):
        kwargs["simulator"] = partial(_load_agent, name)
    if isinstance(entry_point, str):
        module, _, attribute = entry_point.partition(":")
        return getattr(importlib.import_module(module), attribute)(**kwargs)
    return entry_point(**kwargs)


def _load_agent(name: str, env):
    from envace_gym import agents

    return agents.load(name, env=env)


def register_all() -> None:
    if REMOTE_ID not in gym.registry:
        gym.register(
            id=REMOTE_ID, entry_point="envace_gym.integrations.openenv.client:RemoteEnv", disable_env_checker=True
        )
    for env_id, (entry_point, kwargs) in ENV_IDS.items():
        if env_id not in gym.registry:
            # The env enforces its own turn limit and reports it as truncation. Gymnasium's
            # passive checker is off: after a first reset that raised (a bad task id), it fails
            # every later step. tests/test_env.py runs gymnasium's check_env on every suite.
            # ScoreTruncated sits outside the TimeLimit that max_episode_steps= adds: a cut
            # episode is scored (envace_gym/wrappers.py).
            gym.register(
                id=env_id,
                entry_point=partial(make_registered, entry_point),
                kwargs=kwargs,
                disable_env_checker=True,
                additional_wrappers=(SCORE_TRUNCATED,),
            )


def _suite_env(suite: Suite, **kwargs):
    from envace_gym.env import EnvACEEnv

    return EnvACEEnv(suite, **kwargs)


def register_suite(env_id: str, suite: Suite, **defaults) -> None:
    """Register a suite as a Gymnasium id: ``gym.make(env_id, **kwargs)`` is
    ``EnvACEEnv(suite, **defaults, **kwargs)``, wrapped as the ``EnvACE/*`` ids are. Registering
    the id again replaces it."""
    register_factory(env_id, partial(_suite_env, suite), **defaults)


def register_factory(env_id: str, factory: Callable[..., gym.Env], **defaults) -> None:
    """Register ``factory`` as a Gymnasium id: ``gym.make(env_id, **kwargs)`` is ``factory(**defaults,
    **kwargs)``, wrapped as the ``EnvACE/*`` ids are. Registering the id again replaces it."""
    gym.registry.pop(env_id, None)
    gym.register(
        id=env_id,
        entry_point=partial(make_registered, factory),
        kwargs=defaults,
        disable_env_checker=True,
        additional_wrappers=(SCORE_TRUNCATED,),
    )


def resolve_env(spec: str) -> str:
    """The Gymnasium id of ``spec``: an id, or ``MODULE:ID`` / ``PATH.py:ID``, whose module is
    imported first (it registers the id, e.g. with :func:`register_suite`)."""
    module, _, env_id = spec.rpartition(":")
    if module:
        import_module(module)
    if env_id not in gym.registry and f"EnvACE/{env_id}" in gym.registry:
        raise ValueError(f"no env {env_id!r}; did you mean EnvACE/{env_id}?")
    return env_id
