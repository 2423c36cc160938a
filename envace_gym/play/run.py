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
from typing import cast

from envace_gym import agents
from envace_gym.agents.base import Agent
from envace_gym.agents.hf import play_settings
from envace_gym.config_fields import COUNT, NONNEGATIVE, check_settings, setting
from envace_gym.dynamics import get as get_dynamics
from envace_gym.env_settings import (
    SHARED_RANGES,
    EnvSettings,
    expand_ranges,
    given_ids,
    shared,
)
from envace_gym.play.loop import make_envs, run_batched
from envace_gym.play.records import OutputLock, agent_settings, id_path, resume_records, safe_name, write_record
from envace_gym.registration import resolve_env
from envace_gym.specs import parse_agent
from envace_gym.wrappers import unwrap


@dataclass
class RunConfig(EnvSettings):
    """The settings of a run: the env's (:class:`~envace_gym.env_settings.EnvSettings`) and the agent's;
    each field's default and help are also ``envace-gym run``'s option's."""

    agent: str = shared("agent")
    agent_kwargs: dict = shared("agent_kwargs")
    repeats: int = setting(1, "Episodes per task.")
    batch: int = setting(1, "Episodes stepped together, their turns generated in one act_batch.")
    seed: int = shared("seed")
    limit: int | None = shared("limit")
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
    workers: int | None = shared("workers")
    ray_address: str | None = shared("ray_address")
    url: str | None = setting(
        None,
        "Play the env that `envace-gym serve` serves at this URL (http://HOST:PORT), --batch sessions at once, "
        "instead of making it here (ENV_ID may be left out); the env's settings are the server's, the records "
        "the same.",
    )
    token: str | None = shared("token")
    resume: bool = shared("resume")
    overwrite: bool = shared("overwrite")
    gold_in_records: bool = setting(
        False, "Keep the gold's details (arguments, answers, rubrics) in each record's reward_info; never with --url."
    )
    out: str | None = setting(
        None,
        "JSONL file for the records (default: runs/NAMESPACE/ENV/AGENT-DYNAMICS.jsonl; AGENT-SETTINGS-DYNAMICS.jsonl "
        "with --agent-kwargs, SETTINGS a hash of them; DYNAMICS is served-DYNAMICS with --url).",
    )

    def __post_init__(self):
        super().__post_init__()
        check_settings(
            self,
            {**SHARED_RANGES, COUNT: ("repeats", "batch", "rehearsal_horizon", *SHARED_RANGES[COUNT])}
            | {NONNEGATIVE: ("rehearsal_budget",)},
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
        agent_spec = parse_agent(c.agent)
        checkpoint = agent_spec.kind == "hf" and play_settings(agent_spec.arg).get("max_turns")
        self.on_turn: Callable[[int, float], None] | None = None  # run_batched's, for a caller to set
        self.resolved = resolved = c.resolve(max_turns=checkpoint or None)  # the env's settings, decided once
        self.env_id, self.make_kwargs = resolved.env_id, resolved.make_kwargs
        if c.gold_in_records:
            self.make_kwargs["gold_in_info"] = True
        self.envs = make_envs(self.env_id, c.batch if c.workers is None else 1, **self.make_kwargs)
        inner, dynamics = unwrap(self.envs[0]), resolved.dynamics
        self.max_turns = inner.max_turns or 50  # for the run's time estimate
        # a reward given scores the calls alike under any dynamics, and so does replay
        self.reward_note = (
            None
            if dynamics.all_real or resolved.given or resolved.reward == "replay"
            else reward_note(dynamics.default_reward, "this suite's world cannot be rebuilt here to replay the calls")
        )
        # reward_source may differ by episode where the run left the reward to each: the dynamics' default
        # or, for a task without gold, the judge (and None where the episode ended unscored)
        judge = resolved.judge or inner.suite.judge_reward()
        rewards = [inner.reward] if inner.reward else [dynamics.default_reward, judge]
        spec = self.envs[0].spec
        assert spec is not None  # gym.make's
        settings = {
            "env_id": spec.id,
            "split": inner.split,
            "dynamics": inner.dynamics,
            "reward_source": tuple(getattr(r, "__name__", r) for r in rewards if r is not None),
        }
        if c.workers is None:  # under workers the agent's name comes with the records they play
            env = self.envs[0]
            self.agent = agent.bind(env) if agent else agents.load(agent_spec, env=env, **c.agent_kwargs)
            if not self.agent.acts:
                raise ValueError(
                    f"{self.agent.name} is a world model and cannot act: it answers rehearse turns "
                    "only; give it as --simulator, --world-model or compare's --agent, and act with "
                    "another agent"
                )
            self.agent = agents.with_rehearsal(self.agent, self.envs[0], **c.rehearsal)
            settings["agent"] = self.agent.name
        check_reward_available(inner.reward or judge)
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
            if dynamics.all_real or served.reward
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


def reward_note(used: str, why: str) -> str:
    """What ``run`` says of a mean scored by the dynamics' default ``used``, for ``why``: which reward it is,
    and that a real run's mean compares only when scored by the same (the ``--reward`` to give both)."""
    return (
        f"rewards here are the {used!r} reward ({why}); a real run scores by 'world' unless given --reward, "
        f"and the two means do not compare unless both runs have the same reward (e.g. --reward {used}, or "
        "tool_f1: the transcript's rewards score the calls alike under any dynamics)"
    )


def check_reward_available(reward) -> None:
    """Refuse to start a run whose reward cannot be computed (a judge that is not configured)."""
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
