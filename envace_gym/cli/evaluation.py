"""``eval``: the paper's evaluation in one command (:class:`envace_gym.evaluation.Evaluation`)."""

from __future__ import annotations

import os
import statistics

import typer
from rich.markdown import Markdown

from envace_gym.cli.output import console, progress, user_errors
from envace_gym.evaluation import EvalConfig, Evaluation, markdown


def evaluate(options: dict) -> None:
    """Score an agent on the paper's benchmarks (BFCL v4, tau2, VitaBench) or chosen envs, each as its
    leaderboard aggregates; write results.json, results.md, results.png and the runs' records."""
    from envace_gym.cli.options import config_from

    with user_errors():
        config = config_from(EvalConfig, options, {})
        if not config.engine_logs:  # read when vLLM and transformers are first imported (by the engine's process too)
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        evaluation = Evaluation(config)
    failures = 0
    with user_errors():
        try:
            for benchmark, run in evaluation.runs():
                label = f"{benchmark.name} {run.env_id}" + (
                    f" rehearse={run.config.rehearsal_budget}" * bool(run.config.rehearsal_budget)
                )
                rewards, failed = [], 0
                try:
                    with progress(len(run.todo), label, "episodes") as advance:
                        for record in run:
                            rewards.append(record["reward"])
                            failed += bool(record.get("error"))
                            advance(f"[red]{failures + failed} failed[/red]" if failures + failed else "")
                finally:
                    for env in run.envs:
                        env.close()
                failures += failed
                # a line per env run, also where the bar is not drawn (output redirected)
                mean = f", mean reward {statistics.fmean(rewards):.3f}" if rewards else ""
                console.print(f"{label}: {len(rewards)} episodes played{mean}, {failed} failed", soft_wrap=True)
            world = None
            if config.world_model:
                with progress(0, "world model: shadow episodes", "calls") as advance:
                    world = evaluation.world_rows(on_call=advance)
            results = evaluation.results(world)
            paths = evaluation.write(results)
        except KeyboardInterrupt:
            console.print(
                f"interrupted: no results written; the same command with --resume plays the rest ({config.out})",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
        finally:
            evaluation.close()
    table = markdown(results)  # drawn as tables in a terminal, the Markdown itself in a pipe or file
    console.print(Markdown(table) if console.is_terminal else table, soft_wrap=True)
    console.print(f"results in {', '.join(map(str, paths))}", soft_wrap=True)
    if failures:
        raise typer.Exit(1)
