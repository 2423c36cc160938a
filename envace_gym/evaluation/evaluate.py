"""``envace-gym eval``: an agent on the paper's benchmarks (or chosen envs), each a :class:`~envace_gym.play.run.Run`
with its records in ``OUT/records``, scored as its leaderboard scores it; optionally again under private
rehearsal, and as a world model on shadow episodes beside the oracle (the bound) and knn (the baseline)."""

from __future__ import annotations

import shutil
import statistics
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym

from envace_gym import agents, registration
from envace_gym.agents.base import Agent
from envace_gym.config_fields import COUNT, NONNEGATIVE, check_settings, setting
from envace_gym.env_settings import EnvSettings, given_ids, shared
from envace_gym.evaluation.benchmarks import KNOWN, PAPER, Benchmark, absent_category, domain_name, own_benchmark
from envace_gym.evaluation.results import (
    WORLD_METRICS,
    BenchmarkResult,
    EvalResults,
    WorldModelRow,
    failure_causes,
    markdown,
    overall,
    reported,
)
from envace_gym.play.compare import compare_calls, determinism
from envace_gym.play.records import OutputLock, RunRecord, id_path, safe_name, write_record
from envace_gym.play.run import Run, RunConfig, check_not_written
from envace_gym.registration import resolve_env
from envace_gym.reporting.figures import plot_eval
from envace_gym.wrappers import unwrap


@dataclass
class EvalConfig:
    """The settings of an evaluation; each field's default and help are also ``envace-gym eval``'s option's."""

    agent: str = shared("agent")
    agent_kwargs: dict = shared("agent_kwargs")
    suites: list[str] = setting(
        ["paper"],
        "paper (BFCL v4's wrapped categories, tau2 retail, airline and telecom, VitaBench delivery and "
        "in-store), or env ids, comma-separated or repeated: an MCP suite as PATH.py:ID, a FinMCP-Bench file "
        "as its path (.json or .jsonl, played offline on its recordings).",
    )
    trials: int = setting(1, "Episodes per task (tau2's pass^k for k up to this).")
    user: str = shared("user")
    judge: str | None = shared("judge")
    limit: int | None = shared("limit")
    max_turns: int | None = shared("max_turns")
    rehearse: int = setting(0, "Also run every env under private rehearsal of N attempts per turn (0: no).")
    world_model: bool = setting(
        False, "Also score the agent as a world model (shadow episodes), beside the oracle and knn."
    )
    replays: int = setting(
        1,
        "With --world-model, play each world model's shadow episodes N times and report how much its "
        "rehearsals of the same calls vary (the determinism probe; 1: no probe).",
    )
    workers: int | None = shared("workers")
    engine_logs: bool = setting(
        False, "Show a vllm: agent's engine logs (without it only its errors reach the terminal)."
    )
    resume: bool = shared("resume")
    overwrite: bool = shared("overwrite")
    out: str = setting("runs/eval", "Output folder: results.json, results.md, results.png, records/.")

    def __post_init__(self):
        if "@" in self.user and not self.user.startswith("llm:"):  # MODEL@BASE_URL, as eval took it first
            self.user = f"llm:{self.user}"
        if self.user != "scripted" and not self.user.startswith("llm:"):
            raise ValueError(f"--user {self.user!r}: give scripted, or llm:MODEL@BASE_URL (or MODEL@BASE_URL)")
        counts = ("trials", "limit", "max_turns", "replays", "workers")
        check_settings(self, {COUNT: counts, NONNEGATIVE: ("rehearse",)})
        EnvSettings(user=self.user, judge=self.judge)  # the env's settings, checked as run checks them
        if self.replays > 1 and not self.world_model:
            raise ValueError("--replays probes the world model: give --world-model too")


def benchmarks(suites: list[str]) -> list[Benchmark]:
    """The benchmarks ``suites`` names: ``paper``'s three; an env id of a paper benchmark joins that
    benchmark (scored its way over the envs given); any other env id, or a FinMCP-Bench file
    (registered here), is a benchmark of its own."""
    chosen: dict[str, list[str]] = {}
    own: dict[str, Benchmark] = {}
    names = given_ids(suites)
    files = {Path(n).resolve() for n in names if n.endswith((".json", ".jsonl"))}
    stems = Counter(f.stem for f in files)
    for name in names:
        if name.endswith((".json", ".jsonl")):
            if not Path(name).is_file():
                raise ValueError(f"no FinMCP-Bench file at {name!r}")
            file = Path(name).resolve()
            name = registration.register_finmcp(file, distinct=stems[file.stem] > 1)
        elif name != "paper" and resolve_env(name) not in gym.registry:
            raise ValueError(f"unknown suite {name!r}: give paper, a registered env id (envace-gym list) or a file")
        for b in KNOWN if name == "paper" else [next((b for b in KNOWN if name in b.env_ids), None)]:
            if b is None:
                own.setdefault(name, own_benchmark(name))
                chosen.setdefault(name, [name])
            else:
                ids = chosen.setdefault(b.name, [])
                ids += [e for e in (b.env_ids if name == "paper" else (name,)) if e not in ids]
    paper = {b.name: b for b in KNOWN}
    return [
        replace(paper[n], env_ids=tuple(e for e in paper[n].env_ids if e in ids)) if n in paper else own[n]
        for n, ids in chosen.items()
    ]


class Evaluation:
    """An evaluation set up: its benchmarks and output folder. :meth:`runs` yields the runs to play,
    :meth:`results` scores what they wrote."""

    def __init__(self, config: EvalConfig):
        self.config = config
        self.benchmarks = benchmarks(config.suites)
        if config.workers and any(e.startswith("finmcp/") for b in self.benchmarks for e in b.env_ids):
            raise ValueError("--workers: Ray workers cannot see a FinMCP file's id; register it in a PATH.py:ID module")
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.lock = OutputLock(self.out).acquire()  # one eval per folder, until close()
        try:
            check_not_written(self.out / "records", config.resume, config.overwrite)
        except ValueError:
            self.lock.release()
            raise
        if config.overwrite:
            shutil.rmtree(self.out / "records", ignore_errors=True)
        # what this eval rewrites goes first: after an interruption no older results sit beside new records
        for old in [
            *(self.out / f"results.{ext}" for ext in ("json", "md", "png")),
            *self.out.glob("world/**/*.jsonl"),
        ]:
            old.unlink(missing_ok=True)
        (self.out / "records").mkdir(exist_ok=True)
        self.skipped: dict[str, dict[str, str]] = {b.name: {} for b in self.benchmarks}
        self.played: dict[tuple[str, int], dict[str, Path]] = {}  # (benchmark, rehearse) -> records by env id
        self.left_out: dict[str, str] = {}  # envs without a world-model row, and why
        self.counts: dict[str, tuple[int, int]] = {}  # env id -> (tasks played, tasks of its split)
        self.model: Agent | None = None  # see _model

    def _model(self) -> Agent | None:
        """The evaluated agent when it holds a model in this process (``smollm2``, ``hf:``, ``vllm:PATH``),
        loaded once and kept for every run and world-model row; None for any other agent."""
        c = self.config
        if self.model is None and c.workers is None and agents.holds_model(c.agent):
            self.model = agents.load(c.agent, **c.agent_kwargs)
        return self.model

    def _load(self, name: str, env: gym.Env) -> Agent:
        """The agent ``name`` in ``env``: the evaluated agent's kept model bound to it, or loaded afresh."""
        own = name == self.config.agent
        model = self._model() if own else None
        return model.bind(env) if model else agents.load(name, env=env, **(self.config.agent_kwargs if own else {}))

    def close(self) -> None:
        """Stop the kept model's engine (a vLLM agent's worker processes), if it has one, and release the
        output folder."""
        close = getattr(self.model, "close", None)
        try:
            if close:
                close()
        finally:
            self.lock.release()

    def write(self, results: EvalResults) -> list[Path]:
        """Write ``results.json``, ``results.md`` and ``results.png`` in the output folder, each whole or
        not at all (written aside, then renamed into place); their paths."""
        paths = [self.out / f"results.{ext}" for ext in ("json", "md", "png")]
        for path, write in zip(
            paths,
            (
                lambda p: p.write_text(results.model_dump_json(indent=1)),
                lambda p: p.write_text(markdown(results)),
                lambda p: plot_eval(results, p),
            ),
        ):
            aside = path.with_name(f".{path.name}.part{path.suffix}")
            try:
                write(aside)
                aside.replace(path)
            finally:
                aside.unlink(missing_ok=True)
        return paths

    def run_config(self, benchmark: Benchmark, env_id: str, rehearse: int = 0) -> RunConfig:
        """The run of ``env_id``: the settings this eval shares with ``run`` passed as they are (the user to
        a suite that has an LLM user, else its scripted one), plus the benchmark's split."""
        c = self.config
        kind = f"rehearse{rehearse}" if rehearse else "real"
        llm_user = (
            c.user != "scripted" and "llm" in registration.suite(env_id, benchmark.split or "default").suite.users
        )
        return RunConfig(
            env_id=env_id,
            agent=c.agent,
            agent_kwargs=dict(c.agent_kwargs),
            split=benchmark.split,
            judge=c.judge,
            user=c.user if llm_user else "scripted",
            max_turns=c.max_turns,
            repeats=c.trials,
            limit=c.limit,
            rehearsal_budget=rehearse,
            workers=c.workers,
            resume=c.resume,
            overwrite=c.overwrite,
            out=str(self.out / "records" / id_path(env_id) / f"{kind}.jsonl"),
        )

    def runs(self) -> Iterator[tuple[Benchmark, Run]]:
        """Each env's run, set up (and checked) in turn, plain then under private rehearsal: ``(benchmark,
        run)``; an env that cannot run here is recorded in ``skipped`` with the reason and yields no run."""
        made = False
        for rehearse in (0, self.config.rehearse) if self.config.rehearse else (0,):
            for b in self.benchmarks:
                files = self.played.setdefault((b.name, rehearse), {})
                for env_id in b.env_ids:
                    why = []
                    if b.needs_judge and not self.config.judge:
                        why.append("needs a judge (--judge MODEL@BASE_URL), as run needs one")
                    try:
                        if why:  # the suite alone, so that every other blocker is said with it
                            registration.suite(env_id)
                        else:
                            run = Run(self.run_config(b, env_id, rehearse), self._model())
                    except (ValueError, ImportError, KeyError, gym.error.Error) as e:
                        why.append(" ".join(str(e).split())[:300])
                    if why:
                        self.skipped[b.name][env_id] = "; ".join(why)
                        continue
                    files[env_id] = run.out
                    if not rehearse:
                        self.counts[env_id] = (len({task for task, _ in run.episodes}), run.task_count)
                    made = True
                    yield b, run
        if not made:  # an error that applies to every env: nothing would be measured
            reasons = {why for skipped in self.skipped.values() for why in skipped.values()}
            raise ValueError(
                f"no env could run: {sorted(reasons)[0] if len(reasons) == 1 else '; '.join(sorted(reasons))}"
            )

    def world_rows(self, on_call: Callable[[], None] | None = None) -> list[WorldModelRow]:
        """The world-model table: per benchmark with a world, the agent, the oracle and knn each rehearsing
        the calls of the same shadow episodes (the oracle acts where the tasks have gold, else the agent);
        with ``replays`` more than 1, each row's determinism probe (:func:`~envace_gym.play.compare.determinism`)."""
        c, rows = self.config, []
        (self.out / "world").mkdir(exist_ok=True)
        for b in self.benchmarks:
            envs = [e for e in b.env_ids if b.has_world(e) and e not in self.skipped[b.name]]
            self.left_out.update(
                {e: "no world: its calls are checked, never run" for e in b.env_ids if not b.has_world(e)}
            )
            self.left_out.update({e: "not run" for e in b.env_ids if b.has_world(e) and e in self.skipped[b.name]})
            if not envs:
                continue
            for name in dict.fromkeys((c.agent, "oracle", "knn")):
                replays: list[list[dict]] = [[] for _ in range(c.replays)]
                failures: list[tuple[str, str]] = []
                why = None
                for env_id in envs:
                    try:
                        for played, calls in zip(replays, self._compared(b, env_id, name, failures, on_call)):
                            played += calls
                    except ValueError as e:
                        why = " ".join(str(e).split())[:200]
                row = world_row(b.name, name, replays[0], why if not replays[0] else None)
                row.failed = dict(Counter(" ".join(error.split())[:80] for _, error in failures))
                row.determinism = determinism(replays) if c.replays > 1 else None
                rows.append(row)
        return rows

    def _compared(self, b: Benchmark, env_id: str, rehearser: str, failures: list, on_call) -> list[list[dict]]:
        """``rehearser``'s compared calls in ``env_id``'s shadow episodes, once per replay; the first
        replay's are written to ``OUT/world`` and its failed episodes added to ``failures``."""
        c = self.config
        split: dict[str, Any] = {"split": b.split} if b.split else {}
        env = gym.make(env_id, **split)
        with closing(env):
            inner = unwrap(env)
            tasks = inner.task_ids[: c.limit]
            gold = all(inner.suite.has_gold(inner.suite.task(t)) for t in tasks)
            actor = self._load("oracle" if gold else c.agent, env)
            world = self._load(rehearser, env)
            out = []
            path = self.out / "world" / id_path(env_id) / f"{safe_name(rehearser)}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w") as f:
                for record in compare_calls(env, actor, world, tasks, failures=failures):
                    write_record(f, record)
                    out.append(record)
                    if on_call:
                        on_call()
            again = [list(compare_calls(env, actor, world, tasks, failures=[])) for _ in range(c.replays - 1)]
            return [out, *again]

    def results(self, world: list[WorldModelRow] | None = None) -> EvalResults:
        """Every benchmark scored from the records its runs wrote."""
        c, out, played = self.config, [], {}
        for b in self.benchmarks:
            records = {e: read(f) for e, f in self.played.get((b.name, 0), {}).items()}
            played.update(records)
            rows = [r for rs in records.values() for r in rs]
            result = BenchmarkResult(
                name=b.name,
                score=None,
                parts={},
                episodes=len(rows),
                failed=dict(Counter(f"{r['ended_by']}: {str(r['error'])[:80]}" for r in rows if r.get("error"))),
                skipped=self.skipped[b.name],
                missing=list(b.missing),
                records=[str(f) for f in self.played.get((b.name, 0), {}).values()],
                real_calls=sum(r.get("real_calls", 0) for r in rows),
                in_overall=b.in_overall,
                stand_in={
                    domain_name(e): r["reward_info"]["backend"]
                    for e, rs in records.items()
                    for r in rs[:1]
                    if "stand-in" in str(r["reward_info"].get("backend", ""))
                },
            )
            self._cover(b, result)
            if rows:
                scored = b.score(records)
                result.score, result.parts = scored["score"], scored["parts"]
            rehearsed = {e: read(f) for e, f in self.played.get((b.name, c.rehearse), {}).items()} if c.rehearse else {}
            if any(rehearsed.values()):
                result.rehearsed_score = b.score(rehearsed)["score"]
                result.rehearsed_real_calls = sum(r.get("real_calls", 0) for rs in rehearsed.values() for r in rs)
            out.append(result)
        paper = [r for r in out if r.name in {b.name for b in PAPER}] or [r for r in out if r.in_overall]
        whole = {r.name for r in out if r.score is not None and not r.partial}
        return EvalResults(
            agent=c.agent,
            user=c.user,
            judge=c.judge,
            trials=c.trials,
            limit=c.limit,
            rehearse=c.rehearse,
            benchmarks=out,
            overall=overall(paper),
            overall_of=[b.name for b in paper if b.score is not None],
            comparable=whole >= {b.name for b in PAPER},
            world_model=world or [],
            world_model_left_out=self.left_out if world is not None else {},
            reported=reported(),
            failure_causes=failure_causes(played),
        )

    def _cover(self, b: Benchmark, result: BenchmarkResult) -> None:
        """``result``'s coverage of the whole benchmark: per env of it (the paper's whole set for a paper
        benchmark) the tasks played of its split's, and each category not wrapped; partial where any falls short."""
        whole = next((p for p in KNOWN if p.name == b.name), b)
        counts: dict[str, tuple[int, int | None]] = {}
        for env_id in whole.env_ids:
            played, total = self.counts.get(env_id) or (0, task_count(env_id, whole.split))
            counts[env_id] = played, total
            result.coverage[domain_name(env_id)] = f"{played}/{total if total is not None else '?'} tasks" + (
                "" if env_id in self.counts else " (not run)"
            )
        for category in whole.missing:
            counts[category] = 0, absent_category(category)["total_count"]
            result.coverage[category] = f"0/{counts[category][1]} tasks (not wrapped)"
        result.tasks = sum(played for played, _ in counts.values())
        totals = [total for _, total in counts.values() if total is not None]
        result.full_tasks = sum(totals) if len(totals) == len(counts) else None
        result.partial = any(total is None or played < total for played, total in counts.values())


def task_count(env_id: str, split: str | None) -> int | None:
    """How many tasks an env that was not run has in ``split`` (None where it cannot be made here)."""
    try:
        return len(registration.suite(env_id, split or "default").task_ids)
    except Exception:  # its data or its code may be absent here: the count is unknown, not an error
        return None


def read(path: Path) -> list[dict]:
    """A run's records, each checked against :class:`~envace_gym.play.records.RunRecord`."""
    from envace_gym.play.records import rows

    return [RunRecord.model_validate(r).model_dump() for r in rows(path)] if path.exists() else []


def world_row(benchmark: str, name: str, calls: list[dict], why: str | None) -> WorldModelRow:
    """One world model's row from its compared calls."""
    state = [r for r in calls if r.get("state_dependent")]
    tools: dict[str, list[float]] = {}
    for r in calls:
        tools.setdefault(r["tool"], []).append(r["leaf_match"])
    return WorldModelRow(
        benchmark=benchmark,
        world_model=name,
        calls=len(calls),
        metrics={m: statistics.fmean(float(r[m]) for r in calls) for m in WORLD_METRICS} if calls else {},
        state_dependent_calls=len(state),
        state_dependent_leaf_match=statistics.fmean(r["leaf_match"] for r in state) if state else None,
        by_tool={t: {"calls": len(v), "leaf_match": statistics.fmean(v)} for t, v in sorted(tools.items())},
        skipped=why,
    )
