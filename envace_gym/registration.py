"""The ``EnvACE/*`` Gymnasium ids, users' suites, and ``module:NAME`` specs: where a suite becomes an env.

A registered id names a :class:`SuiteEntry`: a suite factory and the env's defaults. ``gym.make(id)``
builds the suite, then :class:`~envace_gym.env.EnvACEEnv` on it; :func:`suite` gives the suite and its
task ids without an env. No suite knows the env or these ids.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec, find_highest_version, get_env_id, parse_env_id

from envace_gym.core.suite import Suite
from envace_gym.env import EnvACEEnv
from envace_gym.specs import import_module
from envace_gym.suites.bfcl import categories as bfcl_categories
from envace_gym.wrappers import unwrap

if TYPE_CHECKING:
    from envace_gym.core.episode import Task

SCORE_TRUNCATED = WrapperSpec("ScoreTruncated", "envace_gym.wrappers:ScoreTruncated", {})


@dataclass(frozen=True)
class SuiteEntry:
    """What an id builds: the suite ``factory(*args, *options)``, where ``options`` are the ``gym.make``
    keywords that pick a suite (mock-gen's ``task_seed``) with their defaults, and
    ``EnvACEEnv(suite, **defaults, **the other keywords)``. ``factory`` is a callable, or ``"module:name"``
    imported on first use (registering loads no suite code). Arguments go by position, as a suite's
    ``__reduce__`` gives them, so that a process-wide (cached) suite is found again when an env is
    unpickled. ``owns_suite``: each env gets its own suite and closes it (a server's processes) on
    ``close``."""

    factory: str | Callable[..., Suite]
    args: tuple = ()
    options: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)
    owns_suite: bool = False

    def suite(self, **options: Any) -> Suite:
        unknown = set(options) - set(self.options)
        if unknown:
            raise TypeError(f"unknown suite options {sorted(unknown)}; this id takes {sorted(self.options) or 'none'}")
        factory = self.factory
        if isinstance(factory, str):
            module, _, name = factory.partition(":")
            factory = getattr(importlib.import_module(module), name)
        return factory(*self.args, *(options.get(name, default) for name, default in self.options.items()))


def _given(suite: Suite) -> Suite:
    return suite


ENV_IDS: dict[str, SuiteEntry] = {
    f"EnvACE/tau2-{domain}-v0": SuiteEntry("envace_gym.suites.tau2:get_suite", (domain,))
    for domain in ("retail", "airline", "telecom", "mock")
}
ENV_IDS["EnvACE/tau2-mock-gen-v0"] = SuiteEntry(
    "envace_gym.suites.tau2.mock_gen:get_gen_suite", options={"task_seed": 0}, defaults={"split": "test"}
)
ENV_IDS["EnvACE/tau2-mock-office-v0"] = SuiteEntry(
    "envace_gym.suites.tau2.mock_office:get_office_suite", defaults={"split": "test"}
)
ENV_IDS["EnvACE/plan-choice-v0"] = SuiteEntry("envace_gym.suites.plan_choice:get_suite", defaults={"max_turns": 4})
ENV_IDS.update(
    {
        bfcl_categories.env_id(c): SuiteEntry("envace_gym.suites.bfcl:get_suite", (c,), defaults={"max_turns": None})
        for c in bfcl_categories.ALL
    }
)
ENV_IDS.update(  # a web-search env takes allow_fetch=[CIDR, ...]: networks its fetches may reach besides public ones
    {
        bfcl_categories.env_id(c): SuiteEntry(
            "envace_gym.suites.bfcl.web_search:category_suite",
            (c,),
            options={"allow_fetch": ()},
            defaults={"max_turns": None},
        )
        for c in bfcl_categories.WEB_SEARCH
    }
)
ENV_IDS.update(
    {
        f"EnvACE/vitabench-{d}-v0": SuiteEntry("envace_gym.suites.vitabench.suite:get_suite", (d,))
        for d in ("delivery", "instore")
    }
)


REMOTE_ID = "EnvACE/remote-v0"  # gym.make(REMOTE_ID, url=...): a RemoteEnv (not a suite: not in ENV_IDS)


def make_env(entry: SuiteEntry, **kwargs) -> EnvACEEnv:
    """The env of a registered id. Defaults: the entry's, then the suite's own split
    (:attr:`~envace_gym.core.suite.Suite.default_split`) and steps per turn; a simulator given by name
    (``simulator="oracle"``) is that agent playing in the new env (the env itself knows no agents)."""
    suite = entry.suite(**{k: kwargs.pop(k) for k in entry.options if k in kwargs})
    kwargs = {**entry.defaults, **kwargs}
    if kwargs.get("split", "default") == "default":
        kwargs["split"] = suite.default_split
    kwargs.setdefault("max_steps_per_turn", suite.max_steps_per_turn)
    return EnvACEEnv(suite, owns_suite=entry.owns_suite, **_with_agent(kwargs))


def make_registered(factory: Callable[..., gym.Env], **kwargs) -> gym.Env:
    """An env of an id registered with :func:`register_factory`: ``factory(**kwargs)``, a simulator
    given by name resolved as in :func:`make_env`."""
    return factory(**_with_agent(kwargs))


def _with_agent(kwargs: dict) -> dict:
    """``kwargs`` with a simulator given by name as a function of the env that loads that agent."""
    if isinstance(kwargs.get("simulator"), str):
        kwargs["simulator"] = partial(_load_agent, kwargs["simulator"])
    return kwargs


def _load_agent(name: str, env):
    from envace_gym import agents

    return agents.load(name, env=env)


def _register(env_id: str, entry_point: Callable, defaults: dict) -> None:
    # The env enforces its own turn limit and reports it as truncation. Gymnasium's passive
    # checker is off: after a first reset that raised (a bad task id), it fails every later
    # step. tests/core/test_gym_conformance.py runs gymnasium's check_env on every suite. ScoreTruncated sits
    # outside the TimeLimit that max_episode_steps= adds: a cut episode is scored (wrappers.py).
    gym.registry.pop(env_id, None)
    gym.register(
        id=env_id,
        entry_point=entry_point,
        kwargs=defaults,
        disable_env_checker=True,
        additional_wrappers=(SCORE_TRUNCATED,),
    )


def register_all() -> None:
    if REMOTE_ID not in gym.registry:
        gym.register(
            id=REMOTE_ID, entry_point="envace_gym.integrations.openenv.client:RemoteEnv", disable_env_checker=True
        )
    for env_id, entry in ENV_IDS.items():
        if env_id not in gym.registry:
            _register(env_id, partial(make_env, entry), {})


def register_suite(env_id: str, suite: Suite | Callable[[], Suite], **defaults) -> None:
    """Register a suite as a Gymnasium id: ``gym.make(env_id, **kwargs)`` is
    ``EnvACEEnv(suite, **defaults, **kwargs)``, wrapped as the ``EnvACE/*`` ids are. ``suite`` may be a
    function that builds one: then each env gets its own and closes it. Registering the id again replaces
    it."""
    if isinstance(suite, Suite):
        entry = SuiteEntry(_given, (suite,), defaults=defaults)
    else:
        entry = SuiteEntry(suite, defaults=defaults, owns_suite=True)
    _register(env_id, partial(make_env, entry), {})


def register_factory(env_id: str, factory: Callable[..., gym.Env], **defaults) -> None:
    """Register ``factory`` (any function that returns an env) as a Gymnasium id: ``gym.make(env_id,
    **kwargs)`` is ``factory(**defaults, **kwargs)``, wrapped as the ``EnvACE/*`` ids are. Registering the
    id again replaces it."""
    _register(env_id, partial(make_registered, factory), defaults)


class Registered(NamedTuple):
    """A registered id's suite, the split :func:`suite` read (None: every task) and its task ids."""

    suite: Suite
    split: str | None
    task_ids: list[str]


def suite(env_id: str, split: str | None = "default", **options: Any) -> Registered:
    """The suite of a registered id and the ids of its tasks in ``split`` (``"default"``: the id's
    default split; ``None``: every task), without making an env. ``options``: the suite's own keywords
    (mock-gen's ``task_seed``). An id registered with another entry point (:func:`register_factory`,
    ``gym.register``) is made once to read them."""
    entry_point = gym.spec(resolve_env(env_id)).entry_point
    if isinstance(entry_point, partial) and entry_point.func is make_env:
        entry: SuiteEntry = entry_point.args[0]
        the_suite = entry.suite(**options)
        if split == "default":
            split = entry.defaults.get("split", the_suite.default_split)
        return Registered(the_suite, split, the_suite.task_ids(split))
    given: dict[str, Any] = {} if split == "default" else {"split": split}
    env = gym.make(env_id, **options, **given)
    try:
        inner = unwrap(env)
        return Registered(inner.suite, inner.split, list(inner.task_ids))
    finally:
        env.close()


def make_mcp_env(server: Any, tasks: str | Path | Sequence[Task | dict | str], **kwargs) -> EnvACEEnv:
    """An env on an MCP server (a command line, a URL, a :class:`~envace_gym.suites.mcp.runtime.Stdio`,
    :class:`~envace_gym.suites.mcp.runtime.Http` or :class:`~envace_gym.suites.mcp.runtime.InProcess` spec,
    or ``None`` for offline tasks) that owns its suite: ``close()`` stops its servers. ``tasks``: a JSONL
    path, or a list of tasks, task records or user messages. ``kwargs`` go to
    :class:`~envace_gym.suites.mcp.suite.MCPSuite` (its options) and to the env."""
    from envace_gym.suites.mcp import SUITE_OPTIONS, MCPSuite, as_tasks

    options = {k: kwargs.pop(k) for k in SUITE_OPTIONS if k in kwargs}
    return EnvACEEnv(MCPSuite(as_tasks(tasks), server, **options), owns_suite=True, **kwargs)


def register_finmcp(path: str | Path, distinct: bool = False) -> str:
    """Register a FinMCP-Bench file (see :func:`~envace_gym.suites.mcp.tasks.load_finmcp`) as an id, its
    tasks played offline on their recordings; the id is returned. It is ``finmcp/STEM-v0``, or, where that
    id is another file's (or ``distinct``: other files given with it share its name), ``finmcp/STEM-HASH-v0``
    with a hash of the file's path. An id is never taken from another file or registration: a ValueError."""
    from envace_gym.play.records import safe_name
    from envace_gym.suites.mcp import MCPSuite, load_finmcp

    path = Path(path).resolve()
    env_id = f"finmcp/{safe_name(path.stem)}-v0"
    if distinct or _FINMCP_FILES.get(env_id, path) != path:
        env_id = f"finmcp/{safe_name(path.stem)}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}-v0"
    if _FINMCP_FILES.get(env_id, path) != path or (env_id not in _FINMCP_FILES and env_id in gym.registry):
        raise ValueError(f"{env_id} is already registered for {_FINMCP_FILES.get(env_id, 'another env')}")
    register_suite(env_id, partial(MCPSuite, load_finmcp(path), None, name=env_id))
    _FINMCP_FILES[env_id] = path
    return env_id


_FINMCP_FILES: dict[str, Path] = {}  # the ids register_finmcp gave, and their files


def resolve_env(spec: str) -> str:
    """The Gymnasium id of ``spec``: an id, or ``MODULE:ID`` / ``PATH.py:ID``, whose module is
    imported first (it registers the id, e.g. with :func:`register_suite`)."""
    module, _, env_id = spec.rpartition(":")
    if module:
        import_module(module)
    if env_id not in gym.registry and f"EnvACE/{env_id}" in gym.registry:
        raise ValueError(f"no env {env_id!r}; did you mean EnvACE/{env_id}?")
    namespace, name, version = parse_env_id(env_id)
    if env_id not in gym.registry and version is None:  # an id without -vN is its latest version's, by name too
        latest = find_highest_version(namespace, name)
        if latest is not None:
            return get_env_id(namespace, name, latest)
    return env_id
