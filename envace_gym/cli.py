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
from envace_gym.compare import METRICS, compare_calls, plot, summarize
from envace_gym.runner import run_episodes

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="LLM tool-use tasks as Gymnasium envs with real or rehearsed dynamics.")
console = Console()
DEFAULT_ENV = "EnvACE/tau2-retail-v0"


def _make(env_id: str, agent_names: list[str], split: str | None, task_ids: list[str] | None,
          **kwargs) -> tuple[gym.Env, list]:
    """The env and agents a command asked for, or a clear error and exit code 2."""
    if split is not None:
        kwargs["split"] = split
    if task_ids:
        kwargs["task_ids"] = [t.strip() for v in task_ids for t in v.split(",") if t.strip()]
    try:
        env = gym.make(env_id, **kwargs)
        return env, [agents.load(name, env=env) for name in agent_names]
    except (ValueError, KeyError, gym.error.Error) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


def _out_path(out: Path | None, env_id: str, agent: str, what: str) -> Path:
    out = out or Path("runs") / f"{env_id.split('/')[-1]}-{agent.split(':')[0]}-{what}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


SPLIT = Annotated[Optional[str], typer.Option(help="Task split (train, test, base).")]
TASK_IDS = Annotated[Optional[list[str]], typer.Option("--task-ids", help="Task ids (repeat or comma-separate).")]
OUT = Annotated[Optional[Path], typer.Option(help="JSONL file for the records.")]


@app.command("list")
def list_envs() -> None:
    """List the registered EnvACE ids."""
    table = Table("id", "suite", "arguments")
    for env_id, (entry, kwargs) in envace_gym.ENV_IDS.items():
        table.add_row(env_id, entry.split(":")[0].rsplit(".", 1)[-1], json.dumps(kwargs))
    console.print(table)


@app.command()
def run(
    env_id: Annotated[str, typer.Argument(help="A registered id (see `envace-gym list`).")] = DEFAULT_ENV,
    agent: Annotated[str, typer.Option(help=f"Agent: {agents.NAMES}.")] = "oracle",
    dynamics: Annotated[str, typer.Option(help=f"One of {', '.join(envace_gym.DYNAMICS)}.")] = "real",
    split: SPLIT = None,
    task_ids: TASK_IDS = None,
    reward: Annotated[Optional[str], typer.Option(help="world, actions or replay (default by dynamics).")] = None,
    max_turns: Annotated[int, typer.Option(help="Agent turns before truncation.")] = 50,
    seed: Annotated[int, typer.Option(help="Seed of the first episode (then +1 each).")] = 0,
    out: OUT = None,
) -> None:
    """Run an agent on every selected task and write one JSONL record per episode."""
    env, (actor,) = _make(env_id, [agent], split, task_ids, dynamics=dynamics, reward=reward,
                          max_turns=max_turns)
    ids = env.unwrapped.task_ids
    out = _out_path(out, env_id, agent, dynamics)
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


@app.command()
def compare(
    env_id: Annotated[str, typer.Argument(help="A registered id (see `envace-gym list`).")] = DEFAULT_ENV,
    agent: Annotated[str, typer.Option(help="The agent whose rehearsals are compared.")] = "knn",
    actor: Annotated[str, typer.Option(help="The agent that takes the actions.")] = "oracle",
    split: SPLIT = None,
    task_ids: TASK_IDS = None,
    seed: Annotated[int, typer.Option(help="Seed of the first episode (then +1 each).")] = 0,
    out: OUT = None,
) -> None:
    """Real against rehearsed responses, call by call, in shadow episodes; table, JSONL and PNG."""
    env, (acting, rehearsing) = _make(env_id, [actor, agent], split, task_ids, dynamics="shadow")
    ids = env.unwrapped.task_ids
    out = _out_path(out, env_id, agent, "compare")
    records = []
    with out.open("w") as f:
        for record in track(compare_calls(env, acting, rehearsing, ids, seed=seed), total=None,
                            description=f"{env_id} {agent} vs real", console=console):
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


@app.command()
def train(
    model: Annotated[str, typer.Option(help="hf:PATH or smollm2 (transformers), vllm:PATH (an engine in this "
                                            "process) or vllm:PATH@BASE_URL (a `vllm serve` started with "
                                            "VLLM_SERVER_DEV_MODE=1).")],
    env: Annotated[str, typer.Option("--env", help="A registered id.")] = DEFAULT_ENV,
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
    roles: Annotated[str, typer.Option(help="Roles trained: act,rehearse | act | rehearse.")] = "act,rehearse",
    baseline: Annotated[str, typer.Option(help="episode or row.")] = "episode",
    kl_coef: Annotated[float, typer.Option(help="KL penalty to the initial model.")] = 0.0,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens per generation.")] = 64,
    max_turns: Annotated[int, typer.Option(help="Agent turns per episode.")] = 8,
    eval_every: Annotated[int, typer.Option(help="Evaluate every N steps (0: never).")] = 5,
    save_every: Annotated[int, typer.Option(help="Checkpoint every N steps (0: only at the end).")] = 5,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    lora_rank: Annotated[int, typer.Option(help="Train LoRA adapters of this rank (0: all weights).")] = 0,
    rehearsal_format: Annotated[str, typer.Option(help="inline (one row per episode) or prompted "
                                                       "(a row per rehearse generation).")] = "inline",
    resume: Annotated[bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")] = False,
) -> None:
    """Role-wise GRPO: train one model to act and to rehearse, evaluate it in the real env.

    Several processes: ``accelerate launch [--multi_gpu --num_processes N] -m envace_gym.cli train ...``.
    """
    from envace_gym.training import CheckpointError, TrainConfig, Trainer

    try:
        config = TrainConfig(model=model, env_id=env, out=str(out), dynamics=dynamics, eval_dynamics=eval_dynamics,
                             reward=reward, split=None if split == "all" else split,
                             eval_split=None if eval_split == "all" else eval_split, group_size=group_size,
                             tasks_per_step=tasks_per_step, steps=steps,
                             lr=lr, roles=roles.split(","), baseline=baseline, kl_coef=kl_coef,
                             max_new_tokens=max_new_tokens, max_turns=max_turns, eval_every=eval_every,
                             save_every=save_every, seed=seed, lora_rank=lora_rank,
                             rehearsal_format=rehearsal_format)
    except ValueError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    trainer = Trainer(config)
    if resume:
        try:
            trainer.resume()
        except CheckpointError as e:
            console.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2) from None
    records = trainer.train()
    if not trainer.accelerator.is_main_process:
        return
    for record in records:
        reward = "n/a" if record["reward"] is None else f"{record['reward']:.3f}"
        errors = f" · {record['reward_errors']} episodes left out (reward error)" if record["reward_errors"] else ""
        console.print(f"step {record['step']}: reward {reward} · {record['tokens_per_s']:.0f} tokens/s{errors}")
    console.print(f"metrics in {out / 'metrics.jsonl'} · curves in {out / 'metrics.png'}")


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

    try:
        trainer = SFT(SFTConfig(model=model, env_id=env, out=str(out), source=source,
                                split=None if split == "all" else split,
                                eval_split=None if eval_split == "all" else eval_split,
                                roles=roles.split(","), epochs=epochs, steps=steps, lr=lr, batch=batch,
                                minibatch=minibatch, max_episodes=max_episodes, eval_every=eval_every,
                                eval_tasks=eval_tasks, save_every=save_every, seed=seed, lora_rank=lora_rank))
        if resume:
            trainer.resume()
    except (ValueError, OSError, CheckpointError, gym.error.Error) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    records = trainer.train()
    if not trainer.accelerator.is_main_process:
        return
    for record in records:
        losses = " · ".join(f"{role} {record[f'loss/{role}']:.3f}" for role in ("act", "rehearse")
                            if record[f"loss/{role}"] is not None)
        console.print(f"step {record['step']}: loss {losses} · {record['tokens_per_s']:.0f} tokens/s")
    console.print(f"metrics in {out / 'metrics.jsonl'} · curves in {out / 'metrics.png'} · "
                  f"checkpoints in {out}/step-N")


if __name__ == "__main__":
    app()
