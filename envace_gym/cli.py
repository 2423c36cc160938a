"""The ``envace-gym`` command line."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Annotated, Optional

import gymnasium as gym
import typer
from rich.console import Console
from rich.progress import track
from rich.table import Table

import envace_gym
from envace_gym import agents
from envace_gym.runner import run_episodes

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="LLM tool-use tasks as Gymnasium envs with real or rehearsed dynamics.")
console = Console()
DEFAULT_ENV = "EnvACE/tau2-retail-v0"


def _task_ids(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [t.strip() for v in values for t in v.split(",") if t.strip()]


@app.command("list")
def list_envs() -> None:
    """List the registered EnvACE ids."""
    table = Table("id", "entry point", "suite")
    for env_id, (entry, kwargs) in envace_gym.ENV_IDS.items():
        table.add_row(env_id, entry, json.dumps(kwargs))
    console.print(table)


@app.command()
def run(
    env_id: Annotated[str, typer.Argument(help="A registered id (see `envace-gym list`).")] = DEFAULT_ENV,
    agent: Annotated[str, typer.Option(help="Agent name: oracle, random.")] = "oracle",
    dynamics: Annotated[str, typer.Option(help=f"One of {', '.join(envace_gym.DYNAMICS)}.")] = "real",
    split: Annotated[Optional[str], typer.Option(help="Task split (train, test, base).")] = None,
    task_ids: Annotated[Optional[list[str]], typer.Option("--task-ids", help="Task ids (repeat or comma-separate).")] = None,
    reward: Annotated[Optional[str], typer.Option(help="world, actions or replay (default by dynamics).")] = None,
    max_turns: Annotated[int, typer.Option(help="Agent turns before truncation.")] = 50,
    seed: Annotated[int, typer.Option(help="Seed of the first episode (then +1 each).")] = 0,
    out: Annotated[Optional[Path], typer.Option(help="JSONL file for the per-episode records.")] = None,
) -> None:
    """Run an agent on every selected task and write one JSONL record per episode."""
    kwargs = {"dynamics": dynamics, "reward": reward, "max_turns": max_turns}
    if split is not None:
        kwargs["split"] = split
    if task_ids:
        kwargs["task_ids"] = _task_ids(task_ids)
    try:
        env = gym.make(env_id, **kwargs)
        actor = agents.load(agent, env=env)
    except (ValueError, KeyError, gym.error.Error) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    ids = env.unwrapped.task_ids
    out = out or Path("runs") / f"{env_id.split('/')[-1]}-{agent.split(':')[0]}-{dynamics}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    with out.open("w") as f:
        for record in track(run_episodes(env, actor, ids, seed=seed), total=len(ids),
                            description=f"{env_id} {agent} {dynamics}", console=console):
            f.write(json.dumps(record) + "\n")
            records.append(record)
    table = Table("task_id", "reward", "source", "turns", "calls", "ended by", "seconds",
                  title=f"{env_id} · {agent} · {dynamics}")
    for r in records:
        table.add_row(str(r["task_id"]), f"{r['reward']:.2f}", r["reward_source"], str(r["turns"]),
                      str(r["tool_calls"]), str(r["ended_by"]), f"{r['seconds']:.3f}")
    console.print(table)
    mean = statistics.fmean(r["reward"] for r in records)
    console.print(f"mean reward {mean:.3f} over {len(records)} episodes · records in {out}")


if __name__ == "__main__":
    app()
