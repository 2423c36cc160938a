"""The ``envace-gym`` command line."""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import gymnasium as gym
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import track
from rich.table import Table

import envace_gym
from envace_gym import agents
from envace_gym.compare import METRICS, compare_calls, plot, summarize
from envace_gym.endpoint import ModelServerError, parse_spec
from envace_gym.registration import resolve_env
from envace_gym.records import resume_records
from envace_gym.rewards import DEFAULT_REWARD
from envace_gym.runner import make_envs, run_batched

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="LLM tool-use tasks as Gymnasium envs with real or rehearsed dynamics.")
# a pipe gets the whole table (rich's default there is 80 columns), a terminal its own width
console = Console(width=None if sys.stdout.isatty() else 250)
DEFAULT_ENV = "EnvACE/tau2-retail-v0"


# what a user's names, paths, files, options and servers can make go wrong
USER_ERRORS = (ValueError, KeyError, TypeError, OSError, ImportError, ModelServerError, gym.error.Error)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as one error line and exit."""
    console.print(f"[red]error:[/red] {escape(' '.join(message.split()))}", soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors(*more: type[Exception]):
    """A :data:`USER_ERRORS` error (or one of ``more``) inside becomes one line and exit code 2
    (``ENVACE_TRACEBACK=1``: the traceback instead)."""
    try:
        yield
    except (*USER_ERRORS, *more) as e:
        if os.environ.get("ENVACE_TRACEBACK"):
            raise
        message = e.args[0] if isinstance(e, KeyError) and e.args else e  # a KeyError's str() is a repr
        fail(str(message) or type(e).__name__)


def parse_pairs(pairs: list[str] | None) -> dict:
    """``KEY=VALUE`` options as a dict; each value is JSON where it parses (``8``, ``0.5``,
    ``true``, ``[1, 2]``), else the text itself."""
    out = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def env_kwargs(env_id: str, split: str | None, task_ids: list[str] | None, **kwargs) -> dict:
    """``gym.make`` arguments with the tasks a command asked for: ``--task-ids`` repeated or
    comma-separated, ``FIRST..LAST`` being every task from FIRST to LAST in the split's order."""
    if split is not None:
        kwargs["split"] = split
    if task_ids:
        ids = [t.strip() for v in task_ids for t in v.split(",") if t.strip()]
        if any(".." in t for t in ids):
            ids = expand_ranges(ids, gym.make(env_id, split=split).unwrapped.task_ids)
        kwargs["task_ids"] = ids
    return kwargs


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
        out += order[a:b + 1]
    return out


def user_option(spec: str) -> dict:
    """``--user``: ``scripted`` (or another suite user name), or ``llm:MODEL@BASE_URL[?timeout=S...]``."""
    if not spec.startswith("llm:"):
        return {"user": spec}
    model, base_url, options = parse_spec(spec, "llm:")
    return {"user": "llm", "user_kwargs": {"model": model, "base_url": base_url, **options}}


def check_split(env_id: str, *splits: str | None) -> None:
    """Refuse, naming the suite's splits, a split that ``env_id``'s suite does not have."""
    suite = gym.make(env_id).unwrapped.suite
    for split in splits:
        if split is not None and split not in suite.splits():
            raise ValueError(f"{env_id} has no split {split!r}; its splits: "
                             f"{', '.join(suite.splits()) or 'none'} (or 'all': every task)")


def _out_path(out: Path | None, env_id: str, agent: str, what: str) -> Path:
    out = out or Path("runs") / f"{env_id.split('/')[-1]}-{agent.split(':')[0]}-{what}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


ENV_ARG = Annotated[Optional[str], typer.Argument(help="A registered id (see `envace-gym list`), or MODULE:ID "
                                                    "or PATH.py:ID (the module registers ID).", show_default=False)]
ENV_OPT = Annotated[Optional[str], typer.Option("--env", help=f"The env, as ENV_ID [default: {DEFAULT_ENV}].")]
SPLIT = Annotated[Optional[str], typer.Option(help="Task split (train, test, base).")]
TASK_IDS = Annotated[Optional[list[str]], typer.Option("--task-ids", help="Task ids (repeat or comma-separate); "
                                                                          "FIRST..LAST: the tasks between, in order.")]
OUT = Annotated[Optional[Path], typer.Option(help="JSONL file for the records.")]
WORKERS = Annotated[Optional[int], typer.Option(help="Ray workers playing the episodes (each its own envs and "
                                                     "agent; --batch envs each). Default: this process alone.")]
RAY_ADDRESS = Annotated[Optional[str], typer.Option(help="With --workers: a Ray cluster to join (auto, "
                                                         "ray://HOST:PORT); default: a local Ray.")]


@contextmanager
def progress(total: int, description: str, unit: str):
    """A progress bar of ``total`` items with their rate; yields ``advance(note="")``, the note (failures,
    the last reward) shown beside it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(description, total=total, note="")

        def advance(note: str = "") -> None:
            done = bar.tasks[task].completed + 1
            rate = done / max(bar.tasks[task].elapsed or 0.0, 1e-9)
            bar.update(task, advance=1, note=f"{rate:.2f} {unit}/s{' · ' + note if note else ''}")

        yield advance


def resolve(argument: str | None, option: str | None) -> str:
    """The Gymnasium id of a command's env, given as ENV_ID or ``--env`` (its module imported)."""
    if argument and option and argument != option:
        raise ValueError(f"two envs given: {argument!r} and --env {option!r}")
    return resolve_env(option or argument or DEFAULT_ENV)


def describe(env_id: str) -> dict:
    """An id's suite, task count, default split and task count per split; for an id whose suite
    cannot load here (VitaBench without ``VITABENCH_ROOT``), why not."""
    try:
        env = gym.make(env_id).unwrapped
    except ImportError as e:
        return {"id": env_id, "suite": None, "tasks": None, "default_split": None, "splits": {},
                "unavailable": str(e)}
    suite = env.suite
    return {"id": env_id, "suite": suite.name, "tasks": len(suite.task_ids(None)), "default_split": env.split,
            "splits": {split: len(suite.task_ids(split)) for split in suite.splits()}}


@app.command("list")
def list_envs(
    contains: Annotated[Optional[str], typer.Argument(help="Only the ids that contain this text.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array instead of a table.")] = False,
) -> None:
    """List the registered EnvACE ids with their task counts and splits."""
    with user_errors():
        rows = [describe(env_id) for env_id in envace_gym.ENV_IDS if not contains or contains in env_id]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table()
    table.add_column("id", no_wrap=True, min_width=max((len(r["id"]) for r in rows), default=2))
    for column in ("suite", "tasks", "splits (tasks; * default)"):
        table.add_column(column)
    for r in rows:
        splits = " · ".join(f"{name} {n}{'*' if name == r['default_split'] else ''}"
                            for name, n in r["splits"].items())
        if "unavailable" in r:
            table.add_row(r["id"], "-", "-", f"unavailable: {r['unavailable']}")
        else:
            table.add_row(r["id"], r["suite"], str(r["tasks"]), splits or "none: all tasks")
    console.print(table)


@app.command("tasks")
def list_tasks(
    env_id: ENV_ARG = None,
    env: ENV_OPT = None,
    split: SPLIT = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array instead of a table.")] = False,
) -> None:
    """List an env's task ids (default split, or --split; 'all': every task) with a one-line summary."""
    with user_errors():
        env_id = resolve(env_id, env)
        inner = gym.make(env_id).unwrapped
        suite = inner.suite
        ids = inner.task_ids if split is None else suite.task_ids(None if split == "all" else split)
        rows = []
        for task_id in ids:
            task = suite.task(task_id)
            rows.append({"task_id": task_id, "summary": " ".join(suite.summary(task).split())[:100],
                         "gold_calls": len(suite.gold_calls(task)) if suite.has_gold(task) else None})
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title=f"{env_id} · {split or inner.split or 'all'} · {len(rows)} tasks")
    for column in ("task_id", "gold calls", "summary"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(r["task_id"], "-" if r["gold_calls"] is None else str(r["gold_calls"]), r["summary"])
    console.print(table)


@app.command("tiny-model")
def tiny_model_command(
    path: Annotated[Path, typer.Argument(help="Folder to write the model and tokenizer to.")],
    env: Annotated[Optional[str], typer.Option("--env", help="Train the tokenizer on this env's gold train "
                                                            "episodes (short sequences, fast learning).")] = None,
    hidden_size: Annotated[int, typer.Option(help="Width (head size 64).")] = 128,
    layers: Annotated[int, typer.Option(help="Transformer layers.")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of the random init.")] = 0,
) -> None:
    """Write a tiny random-init Qwen3 model with a tokenizer trained here (no hub needed)."""
    from envace_gym.testing import tiny_model

    with user_errors():
        written = tiny_model(path, hidden_size=hidden_size, layers=layers, seed=seed,
                             env_id=resolve_env(env) if env else None)
    console.print(f"tiny model in {written}\nwarm-start it: envace-gym sft --model hf:{written} "
                  f"--env {env or DEFAULT_ENV} --out runs/sft", soft_wrap=True)


@app.command()
def run(
    env_id: ENV_ARG = None,
    env: ENV_OPT = None,
    agent: Annotated[str, typer.Option(help=f"Agent: {agents.NAMES} (an Agent subclass; PATH.py:CLASS "
                                            "too).")] = "oracle",
    agent_kwargs: Annotated[Optional[list[str]], typer.Option(
        "--agent-kwargs", help="KEY=VALUE for the agent, e.g. max_new_tokens=64 (repeat; values are JSON "
                               "where they parse).")] = None,
    dynamics: Annotated[str, typer.Option(help=f"One of {', '.join(envace_gym.DYNAMICS)}.")] = "real",
    simulator: Annotated[Optional[str], typer.Option(help="The agent that answers tool calls under "
                                                          "--dynamics simulated.")] = None,
    p_real: Annotated[float, typer.Option(help="The chance that the real world answers a call under "
                                               "--dynamics mixed.")] = 0.5,
    user: Annotated[str, typer.Option(help="scripted, or llm:MODEL@BASE_URL (tau2's LLM user on an "
                                           "OpenAI-compatible server).")] = "scripted",
    split: SPLIT = None,
    task_ids: TASK_IDS = None,
    reward: Annotated[Optional[str], typer.Option(help="world, actions, actions_share, replay or "
                                                       "judge:MODEL@BASE_URL (default by dynamics).")] = None,
    max_turns: Annotated[int, typer.Option(help="Agent turns before truncation.")] = 50,
    repeats: Annotated[int, typer.Option(help="Episodes per task.")] = 1,
    batch: Annotated[int, typer.Option(help="Episodes stepped together, their turns generated in one "
                                            "act_batch.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the first episode (then +1 each).")] = 0,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N of the selected tasks.")] = None,
    rehearsal_budget: Annotated[int, typer.Option(help="Private rehearsal: attempts imagined in forks of the "
                                                       "episode before each act turn (0: none).")] = 0,
    rehearsal_mode: Annotated[str, typer.Option(help="parallel or sequential (each attempt sees the earlier "
                                                     "ones).")] = "parallel",
    rehearsal_select: Annotated[str, typer.Option(help="memory (generate with a digest of the attempts), best "
                                                       "(the best-scored attempt's first turn) or vote.")] = "best",
    rehearsal_scorer: Annotated[str, typer.Option(help="best's scorer: errors (fewest error responses) or judge "
                                                       "(the agent rates its attempts).")] = "errors",
    rehearsal_horizon: Annotated[Optional[int], typer.Option(help="Act turns per attempt (default: until its "
                                                                  "next message to the user).")] = None,
    world_model: Annotated[Optional[str], typer.Option(help="The agent that answers the attempts' tool calls "
                                                            "(default: --agent).")] = None,
    workers: WORKERS = None,
    ray_address: RAY_ADDRESS = None,
    resume: Annotated[bool, typer.Option(help="Keep the records already in --out and play only the episodes "
                                              "they lack.")] = False,
    out: OUT = None,
) -> None:
    """Run an agent on every selected task and write one JSONL record per episode."""
    with user_errors():
        if repeats < 1 or batch < 1:
            raise ValueError(f"--repeats and --batch must be at least 1, got {repeats} and {batch}")
        spec_id, env_id = env_id, resolve(env_id, env)
        make_kwargs = env_kwargs(env_id, split, task_ids, dynamics=dynamics, reward=reward, max_turns=max_turns,
                                 simulator=simulator, p_real=p_real, **user_option(user))
        rehearsal = {"budget": rehearsal_budget, "mode": rehearsal_mode, "select": rehearsal_select,
                     "world_model": world_model, "horizon": rehearsal_horizon, "scorer": rehearsal_scorer}
        if workers is None:
            envs = make_envs(env_id, batch, **make_kwargs)
            actor = agents.load(agent, env=envs[0], **parse_pairs(agent_kwargs))
            if not actor.acts:
                raise ValueError(f"{actor.name} is a world model and cannot act: it answers rehearse turns only; "
                                 "give it as --simulator, --world-model or compare's --agent, and act with another agent")
            actor = agents.with_rehearsal(actor, envs[0], **rehearsal)
        elif workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        else:
            envs = make_envs(env_id, 1, **make_kwargs)
        check_reward_available(envs[0])
        inner = envs[0].unwrapped
        # reward_source may differ by episode: --reward's, else the dynamics' default or, for a task without
        # gold, the suite's judge (and None where the episode ended unscored): a record may have any of them
        rewards = [inner.reward] if inner.reward else [DEFAULT_REWARD[dynamics], inner.suite.judge_reward()]
        settings = {"env_id": envs[0].spec.id, "split": inner.split, "dynamics": inner.dynamics,
                    "reward_source": tuple(getattr(r, "__name__", r) for r in rewards if r is not None)}
        if workers is None:  # under --workers the agent's name comes with the records it plays
            settings["agent"] = actor.name
    if limit is not None and limit < 1:
        fail(f"--limit must be at least 1, got {limit}")
    ids = envs[0].unwrapped.task_ids[:limit]
    out = _out_path(out, env_id, agent, dynamics)
    episodes = [(task_id, seed + i) for i, task_id in enumerate(t for t in ids for _ in range(repeats))]
    with user_errors():
        earlier = resume_records(out, settings) if resume and out.exists() else []
    done = {(r["task_id"], r["seed"]) for r in earlier}
    todo = [e for e in episodes if e not in done]
    if earlier:
        console.print(f"{len(episodes) - len(todo)} of {len(episodes)} episodes already in {out}; "
                      f"playing {len(todo)}", soft_wrap=True)
    if workers is None:
        stream = run_batched(envs, actor, todo)
    else:
        from envace_gym.distributed import WorkerSpec, run_distributed

        # the id as given (MODULE:ID or PATH.py:ID too): each worker imports the module that registers it
        spec = WorkerSpec(env or spec_id or DEFAULT_ENV, agent, make_kwargs, parse_pairs(agent_kwargs), batch,
                          rehearsal=rehearsal)
        stream = run_distributed(spec, todo, workers, ray_address)
    records = list(earlier)
    failures = 0
    with user_errors(), closing(stream), out.open("a" if resume else "w") as f, \
            progress(len(todo), f"{env_id} {agent} {dynamics}", "episodes") as advance:
        try:
            for record in stream:
                if earlier and record["agent"] != earlier[0]["agent"]:
                    fail(f"{out} holds the records of another run: its agent is {earlier[0]['agent']!r}, "
                         f"this run's {record['agent']!r}; resume with the same settings, or give another --out")
                f.write(json.dumps(record) + "\n")
                f.flush()
                records.append(record)
                failures += bool(record.get("error"))
                advance(f"[red]{failures} failed[/red]" if failures else "")
                if record["ended_by"] in ("agent_error", "worker_error"):
                    console.print(f"[red]task {escape(record['task_id'])} (seed {record['seed']}) failed:[/red] "
                                  f"{escape(' '.join(record['error'].split()))}", soft_wrap=True)
        except KeyboardInterrupt:
            console.print(f"interrupted: {len(records)} of {len(episodes)} episodes in {out}; "
                          "the same command with --resume plays the rest", soft_wrap=True)
            raise typer.Exit(130)
    if not records:
        fail("no episode to run")
    settings = (f" · private rehearsal N={rehearsal_budget} {rehearsal_mode} {rehearsal_select}"
                f"{f' world model {world_model}' if world_model else ''}" if rehearsal_budget else "")
    table = Table(title=f"{env_id} · {agent} · {dynamics}{settings}")
    table.add_column("task_id", overflow="fold", min_width=min(40, max(len(r["task_id"]) for r in records)))
    for column in ("seed", "reward", "source", "turns", "calls", "ended by", "seconds"):
        table.add_column(column)
    for r in records:
        table.add_row(r["task_id"], str(r["seed"]), f"{r['reward']:.2f}", r["reward_source"], str(r["turns"]),
                      str(r["tool_calls"]), str(r["ended_by"]), f"{r['seconds']:.3f}")
    console.print(table)
    rewards = [r["reward"] for r in records]
    error = (f" ± {statistics.stdev(rewards) / math.sqrt(len(rewards)):.3f} (standard error)"
             if len(rewards) > 1 else "")
    console.print(f"mean reward {statistics.fmean(rewards):.3f}{error} over {len(records)} episodes · "
                  f"records in {out}", soft_wrap=True)
    console.print(f"view them: envace-gym view {out}", soft_wrap=True)
    if rehearsal_budget:
        mean = {k: statistics.fmean(r[k] for r in records) for k in
                ("real_calls", "rehearsal_attempts", "rehearsal_tokens", "rehearsal_seconds")}
        console.print(f"per episode: {mean['real_calls']:.1f} real calls · {mean['rehearsal_attempts']:.1f} private "
                      f"attempts · {mean['rehearsal_tokens']:.0f} rehearsal tokens · "
                      f"{mean['rehearsal_seconds']:.2f} s rehearsing", soft_wrap=True)
    failed = [r for r in records if r.get("error")]
    if failed:  # their reward 0 is no score: say so, and exit non-zero
        console.print(f"[red]{len(failed)} of {len(records)} episodes failed[/red] (scored 0; each record's "
                      f"error says why), the first: {escape(' '.join(str(failed[0]['error']).split())[:300])}",
                      soft_wrap=True)
        raise typer.Exit(1)


def check_reward_available(env: gym.Env) -> None:
    """Refuse to start a run whose reward cannot be computed (a judge that is not configured)."""
    inner = env.unwrapped
    task = inner.suite.task(inner.task_ids[0]) if inner.task_ids else None
    reward = inner.reward
    if reward is None and task is not None and not inner.suite.has_gold(task):
        reward = inner.suite.judge_reward()
    if getattr(reward, "unavailable", None):
        raise ValueError(f"the {getattr(reward, '__name__', 'reward')} reward cannot be computed here: "
                         f"{reward.unavailable}")


@app.command()
def compare(
    env_id: ENV_ARG = None,
    env: ENV_OPT = None,
    agent: Annotated[str, typer.Option(help="The agent whose rehearsals are compared.")] = "knn",
    actor: Annotated[str, typer.Option(help="The agent that takes the actions.")] = "oracle",
    split: SPLIT = None,
    task_ids: TASK_IDS = None,
    seed: Annotated[int, typer.Option(help="Seed of the first episode (then +1 each).")] = 0,
    workers: WORKERS = None,
    ray_address: RAY_ADDRESS = None,
    out: OUT = None,
) -> None:
    """Real against rehearsed responses, call by call, in shadow episodes; table, JSONL and PNG."""
    with user_errors():
        spec_id, env_id = env_id, resolve(env_id, env)
        make_kwargs = env_kwargs(env_id, split, task_ids, dynamics="shadow")
        (shadow,) = make_envs(env_id, 1, **make_kwargs)
        if workers is None:
            acting, rehearsing = (agents.load(name, env=shadow) for name in (actor, agent))
            stream = compare_calls(shadow, acting, rehearsing, shadow.unwrapped.task_ids, seed=seed)
        else:
            from envace_gym.distributed import WorkerSpec, run_distributed

            episodes = [(task_id, seed + i) for i, task_id in enumerate(shadow.unwrapped.task_ids)]
            stream = run_distributed(WorkerSpec(env or spec_id or DEFAULT_ENV, actor, make_kwargs, rehearser=agent),
                                     episodes, workers, ray_address)
    out = _out_path(out, env_id, agent, "compare")
    records, failed = [], []
    with user_errors(), out.open("w") as f:
        for record in track(stream, total=None, description=f"{env_id} {agent} vs real", console=console):
            if record.get("tool") is None:  # an episode whose worker kept failing
                failed.append(record)
                console.print(f"[red]task {escape(record['task_id'])} failed:[/red] {escape(record['error'])}",
                              soft_wrap=True)
                continue
            f.write(json.dumps(record) + "\n")
            records.append(record)
    if not records:
        console.print("no tool call was made: nothing to compare")
        raise typer.Exit(1)
    summary = summarize(records)
    table = Table("tool", "calls", *METRICS, title=f"{env_id} · {agent} rehearsing · {actor} acting")
    for tool, row in summary.items():
        table.add_row(tool, str(row["calls"]), *(f"{row[m]:.3f}" for m in METRICS),
                      end_section=tool == list(summary)[-2])
    console.print(table)
    png = out.with_suffix(".png")
    plot(summary, png, f"{env_id}: {agent} rehearsing against the real world")
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1))
    console.print(f"{len(records)} calls · records in {out} · plot in {png}")
    console.print(f"view them: envace-gym view {out}", soft_wrap=True)
    if failed:
        console.print(f"[red]{len(failed)} episodes failed[/red] and left no calls", soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def view(
    files: Annotated[list[Path], typer.Argument(help="run or compare JSONL files, and train or sft output folders.")],
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("report.html"),
) -> None:
    """Write one self-contained HTML file (no network) of episodes, real-vs-rehearsed calls and training curves."""
    from envace_gym.viewer import render

    with user_errors():
        written = render(files, out)
    console.print(f"report in {written} ({written.stat().st_size / 1e6:.1f} MB): open it in a browser", soft_wrap=True)


@app.command()
def train(
    model: Annotated[str, typer.Option(help="hf:PATH or smollm2 (transformers), vllm:PATH (an engine in this "
                                            "process) or vllm:PATH@BASE_URL (a `vllm serve` started with "
                                            "VLLM_SERVER_DEV_MODE=1).")],
    env: Annotated[str, typer.Option("--env", help="A registered id, or MODULE:ID or PATH.py:ID.")] = DEFAULT_ENV,
    out: Annotated[Path, typer.Option(help="Output folder: metrics.jsonl, metrics.png, step-N checkpoints.")] = Path("runs/train"),
    dynamics: Annotated[str, typer.Option(help="Training dynamics.")] = "rehearsed",
    eval_dynamics: Annotated[str, typer.Option(help="Evaluation dynamics.")] = "real",
    reward: Annotated[Optional[str], typer.Option(help="Training reward (default: the dynamics' default).")] = None,
    split: Annotated[str, typer.Option(help="Training tasks' split; 'all' for suites without splits (BFCL).")] = "train",
    eval_split: Annotated[str, typer.Option(help="Evaluation tasks' split, or 'all'.")] = "test",
    group_size: Annotated[int, typer.Option(help="Episodes per task (GRPO group).")] = 4,
    tasks_per_step: Annotated[int, typer.Option(help="Tasks per step.")] = 2,
    steps: Annotated[int, typer.Option(help="Training steps.")] = 10,
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 1e-5,
    warmup_steps: Annotated[int, typer.Option(help="Steps of linear learning-rate warmup.")] = 0,
    roles: Annotated[str, typer.Option(help="Roles trained: act,rehearse | act | rehearse.")] = "act,rehearse",
    baseline: Annotated[str, typer.Option(help="episode or row.")] = "episode",
    kl_coef: Annotated[float, typer.Option(help="KL penalty to the initial model.")] = 0.0,
    clip_eps: Annotated[float, typer.Option(help="PPO clip range of the ratio.")] = 0.2,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (the ratios' too).")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens per generation.")] = 64,
    max_turns: Annotated[int, typer.Option(help="Agent turns per episode.")] = 8,
    eval_every: Annotated[int, typer.Option(help="Evaluate every N steps (0: never).")] = 5,
    save_every: Annotated[int, typer.Option(help="Checkpoint every N steps (0: only at the end).")] = 5,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    lora_rank: Annotated[int, typer.Option(help="Train LoRA adapters of this rank (0: all weights).")] = 0,
    rehearsal_format: Annotated[str, typer.Option(help="inline (one row per episode) or prompted "
                                                       "(a row per rehearse generation).")] = "inline",
    bf16: Annotated[bool, typer.Option(help="Forward passes under bf16 autocast (fp32 weights and optimizer).")] = False,
    gradient_checkpointing: Annotated[bool, typer.Option(help="Recompute activations in backward.")] = False,
    minibatch_tokens: Annotated[int, typer.Option(help="Pack minibatches up to this many padded tokens "
                                                       "(0: minibatches of 4 rows).")] = 0,
    fsdp: Annotated[bool, typer.Option(help="Shard weights, gradients and Adam states over the launched "
                                            "processes (torch FSDP2) instead of DDP.")] = False,
    rollout_workers: Annotated[Optional[int], typer.Option(help="Step the rollout envs in this many Ray actors "
                                                                "(users, judges, slow tools in parallel); "
                                                                "generation stays here.")] = None,
    ray_address: RAY_ADDRESS = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")] = False,
) -> None:
    """Role-wise GRPO: train one model to act and to rehearse, evaluate it in the real env.

    Several processes: ``accelerate launch [--multi_gpu --num_processes N] -m envace_gym.cli train ...``
    (add ``--fsdp`` to shard the model over them).
    """
    from envace_gym.training import CheckpointError, TrainConfig, Trainer

    with user_errors(CheckpointError):
        env = resolve_env(env)
        split, eval_split = (None if s == "all" else s for s in (split, eval_split))
        check_split(env, split, eval_split)
        config = TrainConfig(model=model, env_id=env, out=str(out), dynamics=dynamics, eval_dynamics=eval_dynamics,
                             reward=reward, split=split, eval_split=eval_split, group_size=group_size,
                             tasks_per_step=tasks_per_step, steps=steps,
                             lr=lr, warmup_steps=warmup_steps, roles=roles.split(","), baseline=baseline, kl_coef=kl_coef,
                             clip_eps=clip_eps, temperature=temperature,
                             max_new_tokens=max_new_tokens, max_turns=max_turns, eval_every=eval_every,
                             save_every=save_every, seed=seed, lora_rank=lora_rank,
                             rehearsal_format=rehearsal_format, bf16=bf16,
                             gradient_checkpointing=gradient_checkpointing, minibatch_tokens=minibatch_tokens,
                             fsdp=fsdp, rollout_workers=rollout_workers or 0, ray_address=ray_address)
        trainer = Trainer(config)
        if resume:
            trainer.resume()
        with progress(steps - trainer.step, f"train {env}", "steps") as advance:
            records = trainer.train(on_step=lambda r: advance(
                f"reward {'n/a' if r['reward'] is None else format(r['reward'], '.3f')} · {r['tokens_per_s']:.0f} tokens/s"))
    if not trainer.accelerator.is_main_process:
        return
    for record in records:
        reward = "n/a" if record["reward"] is None else f"{record['reward']:.3f}"
        errors = f" · {record['reward_errors']} episodes left out (reward error)" if record["reward_errors"] else ""
        console.print(f"step {record['step']}: reward {reward} · {record['tokens_per_s']:.0f} tokens/s{errors}")
    console.print(f"metrics in {out / 'metrics.jsonl'} · curves in {out / 'metrics.png'}")
    say_checkpoint(out, env)


@app.command()
def sft(
    model: Annotated[str, typer.Option(help="hf:PATH or smollm2: the model to warm-start.")],
    env: Annotated[str, typer.Option("--env", help="A registered id: its oracle plays the gold and held-out "
                                                   "episodes.")] = DEFAULT_ENV,
    source: Annotated[str, typer.Option("--from", help="gold (the oracle's episodes of --split, real dynamics) "
                                                       "or a RUNS.jsonl written by `envace-gym run`.")] = "gold",
    out: Annotated[Path, typer.Option(help="Output folder: metrics.jsonl, metrics.png, step-N checkpoints.")] = Path("runs/sft"),
    roles: Annotated[str, typer.Option(help="Roles trained: act,rehearse | act | rehearse.")] = "act,rehearse",
    split: Annotated[str, typer.Option(help="Gold episodes' split, or 'all'.")] = "train",
    eval_split: Annotated[str, typer.Option(help="Held-out gold episodes' split, or 'all'.")] = "test",
    epochs: Annotated[int, typer.Option(help="Passes over the episodes (when --steps is not given).")] = 1,
    steps: Annotated[Optional[int], typer.Option(help="Updates (default: epochs × episodes / batch).")] = None,
    lr: Annotated[float, typer.Option(help="Learning rate (decays linearly to 0).")] = 1e-5,
    batch: Annotated[int, typer.Option(help="Episodes per update.")] = 8,
    minibatch: Annotated[int, typer.Option(help="Episodes per forward pass.")] = 2,
    max_episodes: Annotated[Optional[int], typer.Option(help="Train on the first N episodes only.")] = None,
    eval_every: Annotated[int, typer.Option(help="Held-out loss every N steps (0: never).")] = 0,
    eval_tasks: Annotated[int, typer.Option(help="Held-out episodes.")] = 4,
    save_every: Annotated[int, typer.Option(help="Checkpoint every N steps (0: only at the end).")] = 50,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    lora_rank: Annotated[int, typer.Option(help="Train LoRA adapters of this rank (0: all weights).")] = 0,
    resume: Annotated[bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")] = False,
) -> None:
    """Role-masked SFT warm start: next-token loss on recorded real episodes, per role.

    Assistant turns train the act role, real tool responses the rehearse role, in the token
    layout of `train`'s rollouts; `--model hf:OUT/step-N` then continues with `train`.
    """
    from envace_gym.training import SFT, CheckpointError, SFTConfig

    with user_errors(CheckpointError):
        env = resolve_env(env)
        split, eval_split = (None if s == "all" else s for s in (split, eval_split))
        check_split(env, split, eval_split)
        trainer = SFT(SFTConfig(model=model, env_id=env, out=str(out), source=source, split=split,
                                eval_split=eval_split, roles=roles.split(","), epochs=epochs, steps=steps, lr=lr,
                                batch=batch, minibatch=minibatch, max_episodes=max_episodes, eval_every=eval_every,
                                eval_tasks=eval_tasks, save_every=save_every, seed=seed, lora_rank=lora_rank))
        if resume:
            trainer.resume()
        with progress(trainer.cfg.steps - trainer.step, f"sft {env}", "steps") as advance:
            records = trainer.train(on_step=lambda r: advance(f"{r['tokens_per_s']:.0f} tokens/s"))
    if not trainer.accelerator.is_main_process:
        return
    for record in records:
        losses = " · ".join(f"{role} {record[f'loss/{role}']:.3f}" for role in ("act", "rehearse")
                            if record[f"loss/{role}"] is not None)
        console.print(f"step {record['step']}: loss {losses} · {record['tokens_per_s']:.0f} tokens/s")
    console.print(f"metrics in {out / 'metrics.jsonl'} · curves in {out / 'metrics.png'}")
    say_checkpoint(out, env)


@app.command()
def serve(
    env_id: ENV_ARG = None,
    env: ENV_OPT = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    max_sessions: Annotated[int, typer.Option(help="Concurrent sessions (one env each); more are refused with "
                                                   "CAPACITY_REACHED.")] = 8,
    session_timeout: Annotated[float, typer.Option(help="Seconds a session may stay idle before it is closed "
                                                        "(0: never).")] = 300.0,
    dynamics: Annotated[str, typer.Option(help=f"Default dynamics ({', '.join(envace_gym.DYNAMICS)}); a client "
                                               "may choose per episode in reset's options.")] = "real",
    split: SPLIT = None,
    task_ids: TASK_IDS = None,
    user: Annotated[str, typer.Option(help="scripted, or llm:MODEL@BASE_URL.")] = "scripted",
    reward: Annotated[Optional[str], typer.Option(help="Reward source (default by dynamics).")] = None,
    max_turns: Annotated[int, typer.Option(help="Agent turns before truncation.")] = 50,
    token: Annotated[Optional[str], typer.Option(envvar="ENVACE_SERVE_TOKEN", show_envvar=True, help=(
        "A shared secret every request must carry (Authorization: Bearer TOKEN, X-EnvACE-Token or ?token=); "
        "set it whenever --host is not a loopback address."))] = None,
    allow_origin: Annotated[Optional[list[str]], typer.Option(help=(
        "A browser origin allowed to use the server besides loopback ones, e.g. https://lab.example (repeat; "
        "'*': any page)."))] = None,
    max_connections: Annotated[int, typer.Option(help="Open connections at once; more are answered 503.")] = 64,
) -> None:
    """Serve an env over OpenEnv's wire protocol: one env per WebSocket session (/ws)."""
    with user_errors():
        from envace_gym.integrations.access import is_loopback
        from envace_gym.integrations.openenv import EnvServer, run_server

        env_id = resolve(env_id, env)
        kwargs = env_kwargs(env_id, split, task_ids, dynamics=dynamics, reward=reward, max_turns=max_turns, **user_option(user))
        server = EnvServer(env_id, max_sessions, session_timeout or None, token=token,
                           allow_origins=tuple(allow_origin or ()), max_connections=max_connections, **kwargs)
    console.print(f"serving {env_id} on ws://{host}:{port}/ws (OpenEnv {server.protocol}); "
                  f"at most {max_sessions} sessions · Ctrl-C stops", soft_wrap=True)
    if not is_loopback(host) and token is None:
        console.print(f"[yellow]warning:[/yellow] {host} is reachable from other machines and no --token is set: "
                      "anyone who can reach the port can play episodes and make the env's real tool calls",
                      soft_wrap=True)
    run_server(server, host, port)


def say_checkpoint(out: Path, env_id: str) -> None:
    """Where the last checkpoint went, and the command that plays it."""
    from envace_gym.training.checkpoint import latest

    last = latest(out)
    if last is not None:
        console.print(f"last checkpoint: {last}\nplay it: envace-gym run {env_id} --agent hf:{last}", soft_wrap=True)


if __name__ == "__main__":
    app()
