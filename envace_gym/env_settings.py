"""The settings of the env a command plays, defined once: :class:`EnvSettings` (the env, its tasks,
its dynamics and their parameters, the reward, the user, the judge, the turn limit), a dataclass that
``run``'s, ``compare``'s and ``serve``'s configs inherit, and :meth:`EnvSettings.resolve`, the one
place they become ``gym.make``'s keywords, the reward and the router. A config that shares some of
these settings only, or another setting the commands share (``--limit``, ``--seed``, ``--resume``,
``--overwrite``, ``--token``, ``--workers``), takes its field with :func:`shared`, so that each
setting's help and default are written once (and each command's option is built from them:
:mod:`envace_gym.cli.options`).

Inheritance, not a nested ``env: EnvSettings``: the fields stay the configs' own, so every keyword
(``RunConfig(env_id, agent=..., dynamics=...)``) and option (``--dynamics``) keeps its name.
"""

from __future__ import annotations

from collections.abc import Callable
from copy import copy
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, Literal, cast

import gymnasium as gym

from envace_gym import agents, registration
from envace_gym.config_fields import COUNT, SEED, SHARE, check_settings, setting
from envace_gym.dynamics import DYNAMICS, Dynamics
from envace_gym.dynamics import get as get_dynamics
from envace_gym.registration import resolve_env
from envace_gym.rewards import REWARDS, SPEC_REWARDS, RewardFn, default_reward
from envace_gym.routing import FidelityRouter
from envace_gym.specs import parse_spec

REWARD_NAMES = ", ".join([*REWARDS, *(f"{prefix}:MODEL@BASE_URL" for prefix in SPEC_REWARDS)])


@dataclass
class EnvSettings:
    """The env an episode is played in: each field's default and help are also the option's of every
    command that plays one. :meth:`resolve` makes them ``gym.make``'s keywords."""

    env_id: str | None = setting(
        None, "A registered id (see `envace-gym list`), or MODULE:ID or PATH.py:ID (the module registers ID)."
    )
    split: str | None = setting(None, "Task split (train, test, base); all: every task.")
    task_ids: list[str] | None = setting(
        None, "Task ids (repeat or comma-separate); FIRST..LAST: the tasks between, in order."
    )
    dynamics: str = setting("real", f"One of {', '.join(DYNAMICS)}.")
    p_real: float | None = setting(
        None, "The chance that the real world answers a call under --dynamics mixed (default 0.5)."
    )
    simulator: str | None = setting(None, "The agent that answers tool calls under --dynamics simulated.")
    user: str = setting(
        "scripted", "scripted, or llm:MODEL@BASE_URL (the suite's LLM user on an OpenAI-compatible server)."
    )
    reward: str | RewardFn | None = setting(
        None,
        f"One of {REWARD_NAMES} (default: world under real and shadow "
        "dynamics; where the policy answers calls, replay when the suite can "
        "rebuild its world here, so the means compare, else the dynamics' own).",
    )
    judge: str | None = setting(
        None,
        "MODEL@BASE_URL: the judge of the tasks without gold calls (VitaBench's: its rubric judge) where no "
        "--reward is given (default: the suite's own, if it has one).",
    )
    max_turns: int | None = setting(
        None,
        "Agent turns before truncation (default: the turn limit an hf:CHECKPOINT "
        "of `train` was trained with, else the env's own).",
    )

    def __post_init__(self):
        check_settings(self, {COUNT: ("max_turns",), SHARE: ("p_real",)})
        get_dynamics(self.dynamics).check_keywords({"p_real": self.p_real, "simulator": self.simulator})
        user_option(self.user)  # checked before any env is made
        if self.judge is not None:
            parse_spec(self.judge, "")

    def resolve(
        self,
        max_turns: int | None = None,
        per_episode: bool = False,
        purpose: Literal["run", "train"] = "run",
        budget: int | None = None,
    ) -> Resolved:
        """The env's ``gym.make`` keywords, its reward and its router, decided once for a run's envs
        (``max_turns``: the limit where none is set, e.g. a checkpoint's). A setting left at its default
        is left out, so the env's registration keeps its own; the reward, unless given or registered, is
        :func:`~envace_gym.rewards.default_reward`'s for the run's tasks and ``purpose`` (None: each
        episode's own). ``per_episode``: the envs' episodes may choose their dynamics (a server's sessions,
        a held-out evaluation): no default reward is decided, and each env gets its own router.
        ``budget``: the router's real calls per refill (``train``'s per step)."""
        if self.env_id is None:
            raise ValueError("give an env id")
        env_id, dynamics = resolve_env(self.env_id), get_dynamics(self.dynamics)
        reward: str | RewardFn | None = self.reward or registered(env_id).get("reward")
        given, judge, ids = reward is not None, None, given_ids(self.task_ids or [])
        # the suite's tasks, looked up once where the reward or a FIRST..LAST range needs them
        needs_tasks = not (given or per_episode) or any(".." in t for t in ids)
        found = registration.suite(env_id, suite_split(self.split)) if needs_tasks else None
        kwargs: dict[str, Any] = {"dynamics": self.dynamics}
        if self.split is not None:
            kwargs["split"] = suite_split(self.split)
        if ids:
            kwargs["task_ids"] = expand_ranges(ids, found.task_ids) if found else ids
        options = {"max_turns": self.max_turns or max_turns, "simulator": self.simulator, "p_real": self.p_real}
        kwargs.update({k: v for k, v in options.items() if v is not None})
        if self.user != "scripted":
            kwargs.update(user_option(self.user))
        # one router for the run's envs (a Ray worker: its copy)
        router = FidelityRouter(budget=budget) if dynamics.routes and not per_episode else None
        if router is not None:
            kwargs["router"] = router
        if not (given or per_episode):
            assert found is not None  # looked up above
            suite = found.suite
            if self.judge is not None:
                judge = SPEC_REWARDS[suite.judge_spec](f"{suite.judge_spec}:{self.judge}")
            tasks = [suite.task(t) for t in kwargs.get("task_ids") or found.task_ids]
            reward = default_reward(suite, self.dynamics, tasks, purpose=purpose, judge=judge)
        if reward is not None:
            kwargs["reward"] = reward
        return Resolved(env_id, kwargs, reward, router, dynamics, given=given, judge=judge)


@dataclass
class Resolved:
    """:meth:`EnvSettings.resolve`'s answer: the registered ``env_id``, ``make_kwargs`` for ``gym.make``
    (``reward`` and ``router`` among them where set), the ``reward`` (None: each episode's default),
    whether it was ``given`` (or registered), the ``router`` (adaptive dynamics), the ``dynamics``
    entry and the ``judge`` given for the tasks without gold."""

    env_id: str
    make_kwargs: dict
    reward: str | RewardFn | None
    router: FidelityRouter | None
    dynamics: Dynamics
    given: bool = False
    judge: RewardFn | None = None


@dataclass
class _Shared:
    """The settings that commands share besides the env's (one definition each, taken by :func:`shared`)."""

    agent: str = setting("oracle", f"Agent: {agents.NAMES} (an Agent subclass; PATH.py:CLASS too).")
    agent_kwargs: dict = setting(
        {}, "KEY=VALUE for the agent, e.g. max_new_tokens=64 (repeat; values are JSON where they parse)."
    )
    limit: int | None = setting(None, "Only the first N of the selected tasks.")
    seed: int = setting(0, "Seed of the first episode (then +1 each).")
    workers: int | None = setting(
        None, "Ray workers playing the episodes (each its own envs and agent). Default: this process alone."
    )
    ray_address: str | None = setting(
        None, "With --workers: a Ray cluster to join (auto, ray://HOST:PORT); default: a local Ray."
    )
    resume: bool = setting(False, "Keep the records already in --out and play only the episodes they lack.")
    overwrite: bool = setting(False, "Replace the records already in --out (without it or --resume, they are kept).")
    token: str | None = setting(
        None,
        "The shared secret of `envace-gym serve` (Authorization: Bearer TOKEN, X-EnvACE-Token or ?token=; "
        "set it on serve whenever --host is not a loopback address); default: $ENVACE_SERVE_TOKEN.",
    )


SHARED_RANGES = {COUNT: ("limit", "workers"), SEED: ("seed",)}  # the ranges of _Shared's numbers


def shared(name: str, default: Any = MISSING, required: bool = False) -> Any:
    """A config field with the help and default (``default`` when given; none when ``required``) of the
    shared setting ``name``: :class:`EnvSettings`'s field or another that commands share (``limit``,
    ``seed``, ``workers``, ``ray_address``, ``resume``, ``overwrite``, ``token``)."""
    found: Field = next(f for cls in (EnvSettings, _Shared) for f in fields(cls) if f.name == name)
    if required:
        return setting(help=found.metadata["help"])
    if default is MISSING:
        factory = found.default_factory
        default = found.default if factory is MISSING else cast("Callable[[], Any]", factory)()
    return setting(copy(default), found.metadata["help"])


def shared_names() -> set[str]:
    """The names of the settings :func:`shared` gives."""
    return {f.name for cls in (EnvSettings, _Shared) for f in fields(cls)}


def registered(env_id: str) -> dict:
    """The ``gym.make`` keywords an id's registration gives (its defaults, e.g. a ``reward``): its
    :class:`~envace_gym.registration.SuiteEntry`'s, its entry point's (a ``functools.partial``) and its spec's."""
    spec = gym.spec(env_id)
    entry = getattr(spec.entry_point, "args", ())
    defaults = entry[0].defaults if entry and isinstance(entry[0], registration.SuiteEntry) else {}
    return {**getattr(spec.entry_point, "keywords", {}), **spec.kwargs, **defaults}


def suite_split(split: str | None) -> str | None:
    """A ``--split`` as the suite takes it: None (not given) is the id's default split, ``all`` every task (None)."""
    return "default" if split is None else None if split == "all" else split


def given_ids(task_ids: list[str]) -> list[str]:
    """``--task-ids`` values as ids: each value one id or several comma-separated."""
    return [t.strip() for v in task_ids for t in v.split(",") if t.strip()]


def expand_ranges(ids: list[str], order: list[str]) -> list[str]:
    """``ids`` with each ``FIRST..LAST`` replaced by the ids from FIRST to LAST in ``order``."""
    out = []
    for item in ids:
        first, dots, last = item.partition("..")
        if not dots:
            out.append(item)
            continue
        missing = [t for t in (first, last) if t not in order]
        if missing:
            raise ValueError(f"--task-ids {item}: no task {missing[0]!r} in the selected split")
        a, b = order.index(first), order.index(last)
        if a > b:
            raise ValueError(f"--task-ids {item}: {first!r} comes after {last!r} in the split's order")
        out += order[a : b + 1]
    return out


def user_option(spec: str) -> dict:
    """The ``gym.make`` arguments of a user: ``scripted`` (or another suite user name), or
    ``llm:MODEL@BASE_URL[?timeout=S...]``."""
    if not spec.startswith("llm:"):
        return {"user": spec}
    model, base_url, options = parse_spec(spec, "llm:")
    if "max_reply_bytes" in options:
        raise ValueError(f"{spec!r}: a user takes timeout and max_retries (max_reply_bytes is a judge's option)")
    return {"user": "llm", "user_kwargs": {"model": model, "base_url": base_url, **options}}
