"""The ``envace-gym`` command line: :data:`app`, its commands in ``envace_gym.cli.envs``,
``envace_gym.cli.episodes`` and ``envace_gym.cli.training``."""

from __future__ import annotations

import typer

from envace_gym.cli import envs, episodes, evaluation, training
from envace_gym.cli.options import config_command
from envace_gym.evaluation import EvalConfig
from envace_gym.play.run import RunConfig
from envace_gym.training.config import SFTConfig, TrainConfig


def build_app() -> typer.Typer:
    """The command line, with the options of ``run``, ``train`` and ``sft`` built now from their
    config dataclasses' fields."""
    app = typer.Typer(
        add_completion=False,
        no_args_is_help=False,
        # click's help, not rich's panels: it wraps to the terminal (up to 120 columns; a pipe gets 80) and
        # never cuts an option's name or default short
        rich_markup_mode=None,
        context_settings={"max_content_width": 120},
        help="LLM tool-use tasks as Gymnasium envs with real or rehearsed dynamics.",
    )
    app.command("list")(envs.list_envs)
    app.command("tasks")(envs.list_tasks)
    app.command("tiny-model")(training.tiny_model_command)
    app.command("run")(config_command(episodes.run, RunConfig, episodes.RUN_FIELDS, first=episodes.RUN_PARAMS))
    app.command("compare")(episodes.compare)
    app.command("eval")(config_command(evaluation.evaluate, EvalConfig, {}))
    app.command("view")(episodes.view)
    app.command("train")(config_command(training.train, TrainConfig, training.TRAINING_FIELDS, last=(training.RESUME,)))
    app.command("sft")(config_command(training.sft, SFTConfig, training.TRAINING_FIELDS, last=(training.RESUME,)))
    app.command("serve")(envs.serve)
    for command in app.registered_commands:  # the command list wraps each summary whole (click's cuts it short)
        command.short_help = " ".join((command.callback.__doc__ or "").split("\n\n")[0].split())
    return app


#: The ``envace-gym`` command.
app = build_app()

__all__ = ["app", "build_app"]
