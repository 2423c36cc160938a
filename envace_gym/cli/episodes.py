"""The commands that play episodes and show them: ``run`` (:class:`envace_gym.play.run.Run`),
``compare`` (real against rehearsed calls) and ``view`` (an HTML report)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import track
from rich.table import Table

from envace_gym.cli.options import ENV_ARG, ENV_OPT, config_from, given_env, param
from envace_gym.cli.output import console, fail, progress, styled, user_errors
from envace_gym.fidelity import METRICS
from envace_gym.play.compare import CompareConfig, Comparison
from envace_gym.play.run import Run, RunConfig

RUN_FIELDS = {"env_id": None}  # given as ENV_ID or --env: RUN_PARAMS (run, compare and serve)
RUN_PARAMS = (param("env_id", ENV_ARG, None), param("env", ENV_OPT, None))
MAX_ROWS = 50  # a longer run's table is summarised by how its episodes ended


def run(options: dict, env_id: str | None, env: str | None) -> None:
    """Run an agent on every selected task and write one JSONL record per episode."""
    with user_errors():
        served = options.get("url") and not (env_id or env)  # --url alone: the served env
        config = config_from(RunConfig, {**options, "env_id": None if served else given_env(env_id, env)}, RUN_FIELDS)
        job = Run(config)
    if job.earlier:
        console.print(
            f"{len(job.episodes) - len(job.todo)} of {len(job.episodes)} episodes already in {job.out}; "
            f"playing {len(job.todo)}",
            soft_wrap=True,
        )
    records, failures = list(job.earlier), 0
    with (
        user_errors(),
        progress(len(job.todo), f"{job.env_id} {config.agent} {config.dynamics}", "episodes") as advance,
    ):
        job.on_turn = turn_counter(job, advance)
        with closing(iter(job)) as stream:
            try:
                for record in stream:
                    records.append(record)
                    failures += bool(record.get("error"))
                    advance(f"[red]{failures} failed[/red]" if failures else "")
                    if record["ended_by"] in ("agent_error", "worker_error"):
                        console.print(
                            styled(
                                f"task {record['task_id']} (seed {record['seed']}) failed:",
                                " " + " ".join(record["error"].split()),
                            ),
                            soft_wrap=True,
                        )
            except KeyboardInterrupt:
                console.print(
                    f"interrupted: {len(records)} of {len(job.episodes)} episodes in {job.out}; "
                    "the same command with --resume plays the rest",
                    soft_wrap=True,
                )
                raise typer.Exit(130) from None
    for played in job.envs:  # an MCP env's servers stop with it, not when the process ends
        played.close()
    if not records:
        fail("no episode to run")
    print_run(job, records)


def turn_counter(job: Run, advance) -> Callable[[int, float], None]:
    """``run_batched``'s ``on_turn`` for the progress bar: the turns played so far, the last one's time,
    and, after the first turn, the longest the run may take when that is over a minute."""
    turns = 0

    def on_turn(n: int, seconds: float) -> None:
        nonlocal turns
        if not turns:
            rounds = math.ceil(len(job.todo) / max(1, len(job.envs)))
            longest = seconds * job.max_turns * rounds
            if longest > 60:
                console.print(
                    f"the first turn took {seconds:.1f} s: {len(job.todo)} episodes of up to "
                    f"{job.max_turns} turns may take up to {longest / 60:.0f} min (--limit or --max-turns "
                    "shorten it; a model server, e.g. vllm:PATH@URL, speeds it up)",
                    soft_wrap=True,
                )
        turns += n
        advance(f"{turns} turns · {seconds:.1f} s the last", step=0)

    return on_turn


def legend(agent: str, records: list[dict]) -> list[str]:
    """What a run's table does not say by itself: its columns, what the oracle is, and what answered
    the calls where that was not the real thing (a stand-in backend)."""
    lines = [
        "source: what scored the episode (world: the suite's own check of the world it played; replay: "
        "its calls run again on a fresh world; actions, progress: against the gold calls; see --reward) · "
        "ended by: why it stopped (user_stop, transfer, answered: the task's own end; max_turns, max_steps, "
        "time_limit: a limit; agent_error, error: a failure)"
    ]
    if agent == "oracle":
        lines.append(
            "oracle: the task's gold actions, so a reward of 1.000 is the check that the env scores them right"
        )
    backends = {str(r["reward_info"]["backend"]) for r in records if isinstance(r.get("reward_info"), dict)
                and r["reward_info"].get("backend")}  # fmt: skip
    lines += [f"calls answered by: {b}" for b in sorted(backends) if "stand-in" in b]
    return lines


def print_run(job: Run, records: list[dict]) -> None:
    """A run's table (or, over :data:`MAX_ROWS` episodes, its episodes by how they ended), its mean
    reward, its rehearsal cost; exit code 1 when an episode failed. Rows are in the run's episode order,
    however the episodes finished (``--batch``, ``--workers``)."""
    c = job.config
    order = {episode: i for i, episode in enumerate(job.episodes)}
    records = sorted(records, key=lambda r: order.get((r["task_id"], r["seed"]), len(order)))
    settings = (
        f" · private rehearsal N={c.rehearsal_budget} {c.rehearsal_mode} {c.rehearsal_select}"
        f"{f' world model {c.world_model}' if c.world_model else ''}"
        if c.rehearsal_budget
        else ""
    )
    title = f"{job.env_id} · {c.agent} · {c.dynamics}{settings}"
    if len(records) > MAX_ROWS:
        ended: dict[str, list[float]] = {}
        for r in records:
            ended.setdefault(str(r["ended_by"]), []).append(r["reward"])
        table = Table(
            "ended by",
            "episodes",
            "mean reward",
            title=f"{title} · {len(records)} episodes by how they ended (each in the records)",
        )
        for how, rewards in ended.items():
            table.add_row(how, str(len(rewards)), f"{statistics.fmean(rewards):.3f}")
    else:
        table = Table(title=title)
        table.add_column("task_id", overflow="fold", min_width=min(40, max(len(r["task_id"]) for r in records)))
        for column in ("seed", "reward", "source", "turns", "calls", "ended by", "seconds"):
            table.add_column(column)
        for r in records:
            table.add_row(
                r["task_id"],
                str(r["seed"]),
                f"{r['reward']:.2f}",
                r["reward_source"],
                str(r["turns"]),
                str(r["tool_calls"]),
                str(r["ended_by"]),
                f"{r['seconds']:.3f}",
            )
    console.print(table)
    for line in legend(c.agent, records):
        console.print(line, soft_wrap=True, style="dim")
    rewards = [r["reward"] for r in records]
    error = f" ± {statistics.stdev(rewards) / math.sqrt(len(rewards)):.3f} (standard error)" if len(rewards) > 1 else ""
    console.print(
        f"mean reward {statistics.fmean(rewards):.3f}{error} over {len(records)} episodes · records in {job.out}",
        soft_wrap=True,
    )
    console.print(f"view them: envace-gym view {job.out}", soft_wrap=True)
    if job.reward_note:
        console.print(f"note: {job.reward_note}", soft_wrap=True)
    if c.rehearsal_budget:
        mean = {
            k: statistics.fmean(r[k] for r in records)
            for k in ("real_calls", "rehearsal_attempts", "rehearsal_tokens", "rehearsal_seconds")
        }
        console.print(
            f"per episode: {mean['real_calls']:.1f} real calls · {mean['rehearsal_attempts']:.1f} private "
            f"attempts · {mean['rehearsal_tokens']:.0f} rehearsal tokens · "
            f"{mean['rehearsal_seconds']:.2f} s rehearsing",
            soft_wrap=True,
        )
    failed = [r for r in records if r.get("error")]
    if failed:  # their reward 0 is no score: say so, and exit non-zero
        console.print(
            styled(
                f"{len(failed)} of {len(records)} episodes failed",
                " (scored 0; each record's error says why), the first: "
                + " ".join(str(failed[0]["error"]).split())[:300],
            ),
            soft_wrap=True,
        )
        raise typer.Exit(1)


def compare(options: dict, env_id: str | None, env: str | None) -> None:
    """Real against rehearsed responses, call by call, in shadow episodes; table, JSONL and PNG."""
    with user_errors():
        config = config_from(CompareConfig, {**options, "env_id": given_env(env_id, env)}, RUN_FIELDS)
        job = Comparison(config)
    agent, actor = config.agent, config.actor
    with user_errors(), closing(job):
        for _ in track(job, total=None, description=escape(f"{job.env_id} {agent} vs real"), console=console):
            pass
        for task_id, error in job.failures:
            console.print(styled(f"task {task_id} failed:", f" {error}"), soft_wrap=True)
        if not job.records:
            console.print("no tool call was made: nothing to compare")
            raise typer.Exit(1)
        summary = job.finish()
    probe = summary.pop("determinism", None)
    table = Table("tool", "calls", *METRICS, title=f"{job.env_id} · {agent} rehearsing · {actor} acting")
    for tool, row in summary.items():
        table.add_row(
            tool, str(row["calls"]), *(f"{row[m]:.3f}" for m in METRICS), end_section=tool == list(summary)[-2]
        )
    console.print(table)
    if probe is not None:
        console.print(
            f"determinism over {probe['replays']} replays of {probe['calls']} calls: "
            + ", ".join(f"{k} {'-' if probe[k] is None else format(probe[k], '.3f')}" for k in ("exact", "leaf"))
        )
    console.print(f"{len(job.records)} calls · records in {job.out} · plot in {job.out.with_suffix('.png')}")
    console.print(f"view them: envace-gym view {job.out}", soft_wrap=True)
    if job.failures:
        console.print(
            styled(f"{len(job.failures)} episodes failed", " (their calls before it are kept)"), soft_wrap=True
        )
        raise typer.Exit(1)


def view(
    files: Annotated[list[Path], typer.Argument(help="run or compare JSONL files, and train or sft output folders.")],
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("runs/report.html"),
) -> None:
    """Write one self-contained HTML file (no network) of episodes, real-vs-rehearsed calls and training curves."""
    from envace_gym.reporting.viewer import render

    with user_errors():
        written = render(files, out)
    console.print(f"report in {written} ({written.stat().st_size / 1e6:.1f} MB): open it in a browser", soft_wrap=True)
