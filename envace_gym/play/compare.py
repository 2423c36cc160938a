"""Real against rehearsed dynamics, call by call: shadow episodes (:func:`compare_calls`), a comparison
set up and written as ``envace-gym compare`` does it (:class:`Comparison`), and its fidelity summary."""

from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym

from envace_gym import agents
from envace_gym.agents import Agent
from envace_gym.agents.base import RoleSplit
from envace_gym.config_fields import COUNT, check_settings, setting
from envace_gym.core.messages import escape_tags
from envace_gym.core.response import execute
from envace_gym.env_settings import SHARED_RANGES, EnvSettings, shared
from envace_gym.fidelity import fidelity, summarize
from envace_gym.play.loop import make_envs, run_episode
from envace_gym.play.records import CompareRecord, OutputLock, write_record
from envace_gym.reporting.figures import plot_fidelity
from envace_gym.wrappers import unwrap


def compare_calls(
    env: gym.Env,
    actor: Agent,
    rehearser: Agent,
    task_ids: list[str],
    seed: int = 0,
    failures: list[tuple[str, str]] | None = None,
) -> Iterator[dict]:
    """Shadow episodes (actions from ``actor``, rehearsals from ``rehearser``), played by
    :func:`~envace_gym.play.loop.run_episode`: one record per call. With a ``failures`` list, an agent's
    exception ends its episode (the calls before it are kept) and is appended as
    ``(task_id, "Type: message")``; without one, it is raised as a RuntimeError naming the task."""
    agent, inner = RoleSplit(actor, rehearser), unwrap(env)
    calls: list[dict] = []
    for i, task_id in enumerate(task_ids):

        def shadowed(role: str, info: dict, task_id: str = task_id) -> None:
            for call in info["tool_calls"]:
                if call.get("rehearsed") is None:
                    continue  # rejected before anything ran: nothing to compare
                record = CompareRecord(
                    task_id=task_id,
                    tool=call["name"],
                    arguments=call["arguments"],
                    real=call["real"],
                    rehearsed=call["rehearsed"],
                    **call["fidelity"],
                    world_model=rehearser.name,
                    state_dependent=depends_on_state(inner, call) if inner.suite.private_worlds else None,
                )
                calls.append(record.model_dump())

        played = run_episode(env, agent, task_id, seed + i, options={"dynamics": "shadow"}, on_step=shadowed)
        yield from calls
        calls.clear()
        if played["ended_by"] == "agent_error":  # a model's failure: a dead server, a prompt past its context
            if failures is None:
                raise RuntimeError(f"task {task_id}: {played['error']}")
            failures.append((task_id, played["error"]))


def compare_chunk(worker, episodes: list[tuple[str, int]]) -> list[dict]:
    """A Ray worker's share of a comparison (:class:`~envace_gym.play.distributed.EnvWorker`'s ``job``):
    the call records of ``episodes``, each played from its own seed."""
    records: list[dict] = []
    for task_id, seed in episodes:
        worker.agent.reseed(seed)
        worker.rehearser.reseed(seed)
        records += compare_calls(worker.envs[0], worker.agent, worker.rehearser, [task_id], seed=seed)
    return records


@dataclass
class CompareConfig:
    """``compare``'s settings: ``agent`` rehearses and ``actor`` acts in shadow episodes of ``env_id``
    (an id, or ``MODULE:ID``), episode i seeded ``seed + i``; ``workers`` Ray actors play them, or this
    process; ``replays`` plays them that many times, for the determinism probe (:func:`determinism`).
    The env's settings are :class:`~envace_gym.env_settings.EnvSettings`'s (its dynamics: shadow);
    each field's default and help are also ``envace-gym compare``'s option's."""

    env_id: str | None = shared("env_id")
    agent: str = setting("knn", "The agent whose rehearsals are compared.")
    actor: str = setting("oracle", "The agent that takes the actions.")
    split: str | None = shared("split")
    task_ids: list[str] | None = shared("task_ids")
    user: str = shared("user")
    max_turns: int | None = shared("max_turns")
    limit: int | None = shared("limit")
    seed: int = shared("seed")
    workers: int | None = shared("workers")
    ray_address: str | None = shared("ray_address")
    out: str | Path | None = setting(
        None, "JSONL file for the records (default: runs/NAMESPACE/ENV/AGENT-compare.jsonl)."
    )
    overwrite: bool = shared("overwrite")
    replays: int = setting(
        1,
        "Play the same episodes this many times and report how much the agent's rehearsals of the "
        "same calls vary (exact and leaf agreement; in this process only).",
    )

    def __post_init__(self):
        check_settings(self, {**SHARED_RANGES, COUNT: ("replays", "max_turns", *SHARED_RANGES[COUNT])})
        self.env_settings = EnvSettings(
            self.env_id, self.split, self.task_ids, dynamics="shadow", user=self.user, max_turns=self.max_turns
        )
        if self.replays > 1 and self.workers is not None:
            raise ValueError("--replays replays the episodes in this process: leave out --workers")


class Comparison:
    """A comparison set up and checked before any episode, as :class:`~envace_gym.play.run.Run` is: its
    shadow ``env``, its ``task_ids`` and its ``out`` (locked; refused where it holds results, unless
    ``overwrite``). Iterating it plays the episodes and yields each call's record once it is written to
    ``out``; ``records`` then holds them and ``failures`` the episodes that failed, as
    ``(task_id, error)``. :meth:`finish` writes the summary beside ``out``."""

    def __init__(self, config: CompareConfig):
        from envace_gym.play.run import check_not_written, records_file

        self.config = c = config
        resolved = c.env_settings.resolve()
        self.env_id, self.make_kwargs = resolved.env_id, resolved.make_kwargs
        (self.env,) = make_envs(self.env_id, 1, **self.make_kwargs)
        self.task_ids = unwrap(self.env).task_ids[: c.limit]
        if c.workers is None:
            self.actor, self.rehearser = (agents.load(name, env=self.env) for name in (c.actor, c.agent))
        self.out = records_file(c.out, self.env_id, c.agent, "compare")
        self.lock = OutputLock(self.out).acquire()
        try:
            check_not_written(self.out, False, c.overwrite)
        except BaseException:
            self.lock.release()
            raise
        self.records: list[dict] = []
        self.failures: list[tuple[str, str]] = []

    def _calls(self) -> Iterator[dict]:
        c = self.config
        if c.workers is None:
            return compare_calls(self.env, self.actor, self.rehearser, self.task_ids, c.seed, self.failures)
        from envace_gym.play.distributed import WorkerSpec, run_distributed

        episodes = [(task_id, c.seed + i) for i, task_id in enumerate(self.task_ids)]
        spec = WorkerSpec(self.env_id, c.actor, self.make_kwargs, rehearser=c.agent, job=compare_chunk)
        return run_distributed(spec, episodes, c.workers, c.ray_address)

    def __iter__(self) -> Iterator[dict]:
        with self.lock, self.out.open("w") as f:
            for record in self._calls():
                if record.get("tool") is None:  # an episode whose worker kept failing
                    self.failures.append((record["task_id"], record["error"]))
                    continue
                write_record(f, record)
                self.records.append(record)
                yield record

    def finish(self) -> dict:
        """The fidelity per tool and over all calls (:func:`~envace_gym.fidelity.summarize`), with
        ``replays`` more than 1 the determinism probe under ``"determinism"``; written to
        ``OUT.summary.json``, and plotted to ``OUT.png``."""
        c = self.config
        summary: dict = summarize(self.records)
        plot_fidelity(
            summary, self.out.with_suffix(".png"), f"{self.env_id}: {c.agent} rehearsing against the real world"
        )
        if c.replays > 1:  # the same episodes again: do the agent's rehearsals of the same calls agree?
            again = [
                list(compare_calls(self.env, self.actor, self.rehearser, self.task_ids, c.seed))
                for _ in range(c.replays - 1)
            ]
            summary["determinism"] = determinism([self.records, *again])
        self.out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1))
        return summary

    def close(self) -> None:
        self.env.close()


def determinism(replays: list[list[dict]]) -> dict:
    """How much a world model's rehearsals of the same calls vary across replays of the same shadow
    episodes (each a list of :func:`compare_calls` records): over the calls every replay made (by task,
    position and call), ``exact`` is the share whose rehearsals are all the same JSON value and ``leaf``
    the mean leaf agreement of each pair of them (:func:`~envace_gym.fidelity.fidelity`'s
    ``leaf_match``, taken both ways). A world model that answers one call differently each time is
    a finding: its rehearsals are samples, not a world."""
    keyed: list[dict[tuple, str]] = []
    for records in replays:
        seen: Counter[tuple] = Counter()
        by_call = {}
        for r in records:
            call = (r["task_id"], r["tool"], json.dumps(r["arguments"], sort_keys=True))
            seen[call] += 1
            by_call[(*call, seen[call])] = r["rehearsed"]
        keyed.append(by_call)
    common = set(keyed[0]).intersection(*keyed[1:]) if keyed else set()
    if len(replays) < 2 or not common:
        return {"replays": len(replays), "calls": len(common), "exact": None, "leaf": None}
    exact, leaf = [], []
    for key in sorted(common):
        texts = [by_call[key] for by_call in keyed]
        exact.append(len({json.dumps(_value(t), sort_keys=True) for t in texts}) == 1)
        pairs = list(itertools.combinations(texts, 2))
        leaf.append(
            statistics.fmean((fidelity(a, b)["leaf_match"] + fidelity(b, a)["leaf_match"]) / 2 for a, b in pairs)
        )
    return {
        "replays": len(replays),
        "calls": len(common),
        "exact": statistics.fmean(exact),
        "leaf": statistics.fmean(leaf),
    }


def depends_on_state(env, call: dict) -> bool:
    """Whether ``call``'s real answer in ``env``'s episode differs from its answer on the task's fresh
    world (as JSON values): an answer that earlier calls of the episode shaped."""
    fresh = execute(env.suite, env.suite.new_world(env.episode.task), call["name"], call["arguments"], env.limits)
    return _value(escape_tags(fresh.content)) != _value(call["real"])


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text
