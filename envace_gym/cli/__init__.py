"""The ``envace-gym`` command line: :data:`app`, its commands in ``envace_gym.cli.envs``,
``envace_gym.cli.episodes`` and ``envace_gym.cli.training``."""

from __future__ import annotations

import signal
import threading
from typing import Any

import typer

from envace_gym.cli import envs, episodes, evaluation, training
from envace_gym.cli.options import config_command
from envace_gym.evaluation import EvalConfig
from envace_gym.integrations.openenv.config import ServeConfig
from envace_gym.play.compare import CompareConfig
from envace_gym.play.run import RunConfig
from envace_gym.training.config import SFTConfig, TrainConfig


class App(typer.Typer):
    """The ``envace-gym`` command. SIGTERM stops any command as Ctrl-C does (KeyboardInterrupt: the same
    cleanup, the finished records kept, temporary folders and servers removed), with exit code 143
    (128 + SIGTERM) where Ctrl-C's is 130."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():  # only the main thread takes signals
            return super().__call__(*args, **kwargs)
        terminated = False

        def terminate(signum: int, frame: Any) -> None:
            nonlocal terminated
            terminated = True
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, terminate)
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as e:
            if terminated and e.code == 130:
                raise SystemExit(128 + signal.SIGTERM) from None
            raise
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def build_app() -> App:
    """The command line, with the options of ``run``, ``compare``, ``eval``, ``train``, ``sft`` and ``serve``
    built now from their config dataclasses' fields."""
    app = App(
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
    app.command("compare")(
        config_command(episodes.compare, CompareConfig, episodes.RUN_FIELDS, first=episodes.RUN_PARAMS)
    )
    app.command("eval")(config_command(evaluation.evaluate, EvalConfig, {}))
    app.command("view")(episodes.view)
    app.command("train")(config_command(training.train, TrainConfig, training.TRAINING_FIELDS, last=(training.RESUME,)))
    app.command("sft")(config_command(training.sft, SFTConfig, training.TRAINING_FIELDS, last=(training.RESUME,)))
    app.command("serve")(config_command(envs.serve, ServeConfig, episodes.RUN_FIELDS, first=episodes.RUN_PARAMS))
    for command in app.registered_commands:  # the command list wraps each summary whole (click's cuts it short)
        command.short_help = " ".join((command.callback.__doc__ or "").split("\n\n")[0].split())
    return app


#: The ``envace-gym`` command.
app = build_app()

__all__ = ["App", "app", "build_app"]
