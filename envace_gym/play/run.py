"""A run: an agent on every selected task of an env, in this process or on Ray workers, each
episode's record written to a JSONL file as it ends; ``resume`` keeps the records already there::

    run = Run(RunConfig("EnvACE/tau2-retail-v0", agent="oracle", limit=5))
    for record in run:  # the episodes still to play
        ...
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Generator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import gymnasium as gym

from envace_gym import agents, registration
from envace_gym.agents.base import Agent
from envace_gym.agents.hf import play_settings
from envace_gym.config_fields import COUNT, NONNEGATIVE, SEED, SHARE, check_settings, setting
from envace_gym.dynamics import DYNAMICS
from envace_gym.dynamics import get as get_dynamics
from envace_gym.play.loop import make_envs, run_batched
from envace_gym.play.records import OutputLock, agent_settings, id_path, resume_records, safe_name, write_record
from envace_gym.registration import resolve_env
from envace_gym.rewards import REWARDS, SPEC_REWARDS, default_reward
from envace_gym.routing import FidelityRouter
from envace_gym.specs import parse_spec
from envace_gym.wrappers import unwrap

REWARD_NAMES = ", ".join([*REWARDS, *(f"{prefix}:MODEL@BASE_URL" for prefix in SPEC_REWARDS)])


@dataclass
class RunConfig:
    """The settings of a run; each field's default and help are also ``envace-gym run``'s option's."""

    env_id: str | None = setting(
        help="A registered id (see `envace-gym list`), or MODULE:ID or PATH.py:ID (the module registers ID)."
    )
    agent: str = setting("oracle", f"Agent: {agents.NAMES} (an Agent subclass; PATH.py:CLASS too).")
    agent_kwargs: dict = setting(
        {}, "KEY=VALUE for the agent, e.g. max_new_tokens=64 (repeat; values are JSON where they parse)."
    )
    dynamics: str = setting("real", f"One of {', '.join(DYNAMICS)}.")
    simulator: str | None = setting(None, "The agent that answers tool calls under --dynamics simulated.")
    p_real: float = setting(0.5, "The chance that the real world answers a call under --dynamics mixed.")
    user: str = setting("scripted", "scripted, or llm:MODEL@BASE_URL (tau2's LLM user on an OpenAI-compatible server).")
    split: str | None = setting(None, "Task split (train, test, base).")
    task_ids: list[str] | None = setting(
        None, "Task ids (repeat or comma-separate); FIRST..LAST: the tasks between, in order."
    )
    reward: str | None = setting(
        None,
        f"One of {REWARD_NAMES} (default: world under real and shadow "
        "dynamics; where the policy answers calls, replay when the suite can "
        "rebuild its world here, so the means compare, else the dynamics' own).",
    )
    max_turns: int | None = setting(
        None,
        "Agent turns before truncation (default: the turn limit an hf:CHECKPOINT "
        "of `train` was trained with, else 50).",
    )
    repeats: int = setting(1, "Episodes per task.")
    batch: int = setting(1, "Episodes stepped together, their turns generated in one act_batch.")
    seed: int = setting(0, "Seed of the first episode (then +1 each).")
    limit: int | None = setting(None, "Only the first N of the selected tasks.")
    rehearsal_budget: int = setting(
        0, "Private rehearsal: attempts imagined in forks of the episode before each act turn (0: none)."
    )
    rehearsal_mode: str = setting("parallel", "parallel or sequential (each attempt sees the earlier ones).")
    rehearsal_select: str = setting(
        "best", "memory (generate with a digest of the attempts), best (the best-scored attempt's first turn) or vote."
    )
    rehearsal_scorer: str = setting(
        "errors", "best's scorer: errors (fewest error responses) or judge (the agent rates its attempts)."
    )
    rehearsal_horizon: int | None = setting(
        None, "Act turns per attempt (default: until its next message to the user)."
    )
    world_model: str | None = setting(None, "The agent that answers the attempts' tool calls (default: --agent).")
    workers: int | None = setting(
        None,
        "Ray workers playing the episodes (each its own envs and agent; --batch "
        "envs each). Default: this process alone.",
    )
    ray_address: str | None = setting(
        None, "With --workers: a Ray cluster to join (auto, ray://HOST:PORT); default: a local Ray."
    )
    url: str | None = setting(
        None,
        "Play the env that `envace-gym serve` serves at this URL (http://HOST:PORT), --batch sessions at once, "
        "instead of making it here (ENV_ID may be left out); the env's settings are the server's, the records "
        "the same.",
    )
    token: str | None = setting(None, "With --url: the server's token (serve --token; default: $ENVACE_SERVE_TOKEN).")
    resume: bool = setting(False, "Keep the records already in --out and play only the episodes they lack.")
    overwrite: bool = setting(False, "Replace the records already in --out (without it or --resume, they are kept).")
    gold_in_records: bool = setting(
        False, "Keep the gold's details (arguments, answers, rubrics) in each record's reward_info; never with --url."
    )
    out: str | None = setting(
        None,
        "JSONL file for the records (default: runs/NAMESPACE/ENV/AGENT-DYNAMICS.jsonl; AGENT-SETTINGS-DYNAMICS.jsonl "
        "with --agent-kwargs, SETTINGS a hash of them; DYNAMICS is served-DYNAMICS with --url).",
    )

    def __post_init__(self):
        check_settings(
            self,
            {
                COUNT: ("max_turns", "repeats", "batch", "limit", "rehearsal_horizon", "workers"),
                NONNEGATIVE: ("rehearsal_budget",),
                SHARE: ("p_real",),
                SEED: ("seed",),
            },
        )

    @property
    def rehearsal(self) -> dict:
        """:func:`envace_gym.agents.with_rehearsal`'s options."""
        return {
            "budget": self.rehearsal_budget,
            "mode": self.rehearsal_mode,
            "select": self.rehearsal_select,
            "world_model": self.world_model,
            "horizon": self.rehearsal_horizon,
            "scorer": self.rehearsal_scorer,
        }


class Run:
    """A run set up and checked before any episode is played: its envs, agent and reward, its
    ``episodes`` (``(task_id, seed)``, each task ``repeats`` times in a row; ``task_count``: the tasks
    selected before ``limit``), the records of them
    already in ``out`` (``earlier``, with ``resume``) and those still ``todo``. Iterating it plays
    ``todo`` and yields each record once it is written to ``out``. ``agent``, when given, is
    ``config.agent`` already loaded (a model kept across runs), bound to this run's env."""

    def __init__(self, config: RunConfig, agent: Agent | None = None):
        self.config = c = config
        if c.url is not None:
            self._serve_from(c)
            return
        if c.env_id is None:
            raise ValueError("give an env id, or --url to play a served env")
        self.env_id = env_id = resolve_env(c.env_id)
        max_turns = c.max_turns
        if max_turns is None and c.agent.startswith("hf:"):
            max_turns = play_settings(c.agent.removeprefix("hf:")).get("max_turns")
        self.on_turn: Callable[[int, float], None] | None = None  # run_batched's, for a caller to set
        # the options given (an unset one keeps the env's own default, or its registration's)
        given: dict[str, Any] = {"reward": c.reward, "max_turns": max_turns, "simulator": c.simulator}
        if c.gold_in_records:
            given["gold_in_info"] = True
        if not is_default(c, "p_real"):
            given["p_real"] = c.p_real
        if not is_default(c, "user"):
            given.update(user_option(c.user))
        self.make_kwargs = env_kwargs(
            env_id, c.split, c.task_ids, dynamics=c.dynamics, **{k: v for k, v in given.items() if v is not None}
        )
        if get_dynamics(c.dynamics).answers == "router":  # one router for the run's envs (each Ray worker: its copy)
            self.make_kwargs["router"] = FidelityRouter()
        self.envs = make_envs(env_id, c.batch if c.workers is None else 1, **self.make_kwargs)
        inner, dynamics = unwrap(self.envs[0]), get_dynamics(c.dynamics)
        if inner.reward is None:  # none given or registered: the one default (a registered reward is kept)
            tasks = [inner.suite.task(t) for t in inner.task_ids]
            reward = default_reward(inner.suite, c.dynamics, tasks, purpose="run")
            if reward is not None:
                self.make_kwargs["reward"] = reward
                for env in self.envs:
                    unwrap(env).reward = reward
        self.max_turns = inner.max_turns or 50  # for the run's time estimate
        self.reward_note = (
            None
            if dynamics.answers == "world" or inner.reward  # a reward given scores the calls alike under any dynamics
            else reward_note(dynamics.default_reward, "this suite's world cannot be rebuilt here to replay the calls")
        )
        # reward_source may differ by episode: --reward's, else the dynamics' default or, for a task without
        # gold, the suite's judge (and None where the episode ended unscored): a record may have any of them
        rewards = [inner.reward] if inner.reward else [dynamics.default_reward, inner.suite.judge_reward()]
        spec = self.envs[0].spec
        assert spec is not None  # gym.make's
        settings = {
            "env_id": spec.id,
            "split": inner.split,
            "dynamics": inner.dynamics,
            "reward_source": tuple(getattr(r, "__name__", r) for r in rewards if r is not None),
        }
        if c.workers is None:  # under workers the agent's name comes with the records they play
            self.agent = agent.bind(self.envs[0]) if agent else agents.load(c.agent, env=self.envs[0], **c.agent_kwargs)
            if not self.agent.acts:
                raise ValueError(
                    f"{self.agent.name} is a world model and cannot act: it answers rehearse turns "
                    "only; give it as --simulator, --world-model or compare's --agent, and act with "
                    "another agent"
                )
            self.agent = agents.with_rehearsal(self.agent, self.envs[0], **c.rehearsal)
            settings["agent"] = self.agent.name
        check_reward_available(self.envs[0])
        self._plan(inner.task_ids, settings)

    def _plan(self, task_ids: list[str], settings: dict) -> None:
        """The run's ``out``, ``episodes``, ``earlier`` records and those still ``todo``; the agent's
        settings (``agent_kwargs``, its secrets left out) are the run's settings too."""
        c = self.config
        self.agent_kwargs = settings["agent_kwargs"] = agent_settings(c.agent_kwargs)
        what = c.dynamics if c.url is None else f"served-{c.dynamics}"  # a served env's records apart
        self.out = records_file(c.out, self.env_id, c.agent, what, self.agent_kwargs)
        ids = task_ids[: c.limit]
        self.task_count = len(task_ids)
        self.episodes = [(task_id, c.seed + i) for i, task_id in enumerate(t for t in ids for _ in range(c.repeats))]
        self.lock = OutputLock(self.out).acquire()  # held until the episodes are played (or the run is dropped)
        try:
            check_not_written(self.out, c.resume, c.overwrite)
            self.earlier = resume_records(self.out, settings) if c.resume and self.out.exists() else []
        except BaseException:
            self.lock.release()
            raise
        done = {(r["task_id"], r["seed"]) for r in self.earlier}
        self.todo = [e for e in self.episodes if e not in done]

    def _serve_from(self, c: RunConfig) -> None:
        """Set up a run of the env an ``envace-gym serve`` serves at ``c.url``: ``batch`` sessions
        (:class:`~envace_gym.integrations.openenv.client.RemoteEnv`), the agent, the tasks it serves."""
        from envace_gym.integrations.openenv.client import RemoteEnv

        assert c.url is not None
        server_side = (
            *("split", "reward", "simulator", "p_real", "user", "max_turns", "workers", "ray_address"),
            "gold_in_records",
        )
        refused = [name for name in server_side if not is_default(c, name)]
        if c.rehearsal_budget:
            refused.append("rehearsal_budget")  # private rehearsal forks the env, which only the server holds
        if refused:
            raise ValueError(
                f"--url plays the env as the server made it: {', '.join('--' + n.replace('_', '-') for n in refused)} "
                "cannot be given with it (set the env's options on `envace-gym serve`; private rehearsal and "
                "--workers need the env in this process)"
            )
        token = c.token or os.environ.get("ENVACE_SERVE_TOKEN")
        self.envs = [RemoteEnv(c.url, token=token, dynamics=c.dynamics) for _ in range(c.batch)]
        served = cast(RemoteEnv, self.envs[0]).tasks()
        if c.env_id is not None and resolve_env(c.env_id) != served.env_id:
            raise ValueError(f"{c.url} serves {served.env_id}, not {c.env_id}")
        dynamics = get_dynamics(c.dynamics)  # an unknown name: refused before any episode
        self.env_id, self.max_turns, self.on_turn, self.make_kwargs = served.env_id, served.max_turns or 50, None, {}
        self.reward_note = (
            None
            if dynamics.answers == "world" or served.reward
            else reward_note(
                dynamics.default_reward,
                "the served env's default; serve --reward replay scores as a "
                "real run's 'world' where the suite can replay",
            )
        )
        self.agent = agents.load(c.agent, env=self.envs[0], **c.agent_kwargs)
        if not self.agent.acts:
            raise ValueError(f"{self.agent.name} is a world model and cannot act: play with another agent")
        ids = served.task_ids
        if c.task_ids:
            ids = expand_ranges(given_ids(c.task_ids), served.task_ids)
            missing = [t for t in ids if t not in served.task_ids]
            if missing:
                raise ValueError(f"{c.url} serves no task {missing[0]!r}")
        settings = {"env_id": served.env_id, "split": served.split, "dynamics": c.dynamics, "agent": self.agent.name}
        self._plan(ids, settings)

    def __iter__(self) -> Generator[dict, None, None]:
        """The records of ``todo``, each appended to ``out`` (a new file unless ``resume``) before it is
        yielded. A ValueError: the workers' agent is not the one of the ``earlier`` records."""
        c = self.config
        stream: Generator[dict, None, None]
        if c.workers is None:
            stream = run_batched(self.envs, self.agent, self.todo, on_turn=self.on_turn)
        else:
            from envace_gym.play.distributed import WorkerSpec, run_distributed

            # the id as given (MODULE:ID or PATH.py:ID too): each worker imports the module that registers it
            assert c.env_id is not None  # workers need the env in this process: no url
            spec = WorkerSpec(c.env_id, c.agent, self.make_kwargs, c.agent_kwargs, c.batch, rehearsal=c.rehearsal)
            stream = run_distributed(spec, self.todo, c.workers, c.ray_address)
        with closing(stream), self.lock, self.out.open("a" if c.resume else "w") as f, self._sessions():
            for record in stream:
                if self.earlier and record["agent"] != self.earlier[0]["agent"]:
                    raise ValueError(
                        f"{self.out} holds the records of another run: its agent is "
                        f"{self.earlier[0]['agent']!r}, this run's {record['agent']!r}; resume with "
                        "the same settings, or give another --out"
                    )
                record["agent_kwargs"] = self.agent_kwargs
                write_record(f, record)
                yield record

    @contextmanager
    def _sessions(self):
        """Close a served env's sessions when the run's episodes end (a later iteration opens new ones)."""
        try:
            yield
        finally:
            if self.config.url is not None:
                for env in self.envs:
                    env.close()


def is_default(config: RunConfig, name: str) -> bool:
    """Whether ``config``'s field ``name`` holds its default (was not given)."""
    return getattr(config, name) == RunConfig.__dataclass_fields__[name].default


def env_kwargs(env_id: str, split: str | None, task_ids: list[str] | None, **kwargs) -> dict:
    """``gym.make`` arguments with the tasks asked for: ``task_ids`` each one id or several comma-separated,
    ``FIRST..LAST`` being every task from FIRST to LAST in the split's order."""
    if split is not None:
        kwargs["split"] = split
    if task_ids:
        ids = given_ids(task_ids)
        if any(".." in t for t in ids):
            ids = expand_ranges(ids, registration.suite(env_id, split if split is not None else "default").task_ids)
        kwargs["task_ids"] = ids
    return kwargs


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


def reward_note(used: str, why: str) -> str:
    """What ``run`` says of a mean scored by the dynamics' default ``used``, for ``why``: which reward it is,
    and that a real run's mean compares only when scored by the same (the ``--reward`` to give both)."""
    return (
        f"rewards here are the {used!r} reward ({why}); a real run scores by 'world' unless given --reward, "
        f"and the two means do not compare unless both runs have the same reward (e.g. --reward {used}, or "
        "tool_f1: the transcript's rewards score the calls alike under any dynamics)"
    )


def check_reward_available(env: gym.Env) -> None:
    """Refuse to start a run whose reward cannot be computed (a judge that is not configured)."""
    inner = unwrap(env)
    reward = inner.reward
    if reward is None and inner.task_ids:
        reward = default_reward(inner.suite, inner.dynamics, [inner.suite.task(inner.task_ids[0])])
    unavailable = getattr(reward, "unavailable", None)
    if unavailable:
        raise ValueError(f"the {getattr(reward, '__name__', 'reward')} reward cannot be computed here: {unavailable}")


def check_not_written(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to write over an output that already holds something, unless told to continue it or replace it."""
    if resume and overwrite:
        raise ValueError("--resume continues the output and --overwrite replaces it: give one of them")
    held = out.is_file() and out.stat().st_size > 0 or out.is_dir() and any(out.iterdir())
    if held and not (resume or overwrite):
        raise ValueError(f"{out} already holds results: --resume continues them, --overwrite replaces them")


def records_file(out: str | Path | None, env_id: str, agent: str, what: str, agent_kwargs: dict | None = None) -> Path:
    """``out``, or where a run's (or a comparison's) records go when no file is given:
    ``runs/NAMESPACE/ENV/AGENT-WHAT.jsonl`` (``AGENT-SETTINGS-WHAT.jsonl`` with ``agent_kwargs``, SETTINGS 8 hex
    digits of their hash), each name made safe (:func:`~envace_gym.play.records.safe_name`), so that two envs,
    agents, agent settings or dynamics never share a file; its folder is made."""
    if not out:
        settings = f"-{hashlib.sha256(json.dumps(agent_kwargs).encode()).hexdigest()[:8]}" if agent_kwargs else ""
        out = Path("runs") / id_path(env_id) / f"{safe_name(agent)}{settings}-{what}.jsonl"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return out
