"""What the command line prints: the console, one-line errors with their exit code, progress bars."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from typing import NoReturn

import gymnasium as gym
import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from envace_gym.openai_client import ModelServerError

# a pipe gets the whole table (rich's default there is 80 columns), a terminal its own width. Markup is
# off: names (env and task ids, paths, errors) print as they are, and colour comes only from styled()
console = Console(width=None if sys.stdout.isatty() else 250, markup=False)


def styled(head: str, rest: str = "", style: str = "red") -> Text:
    """``head`` in ``style`` followed by ``rest``, both printed as they are (never read as markup)."""
    return Text.assemble((head, style), rest)


# what a user's names, paths, files, options and servers can make go wrong
USER_ERRORS = (ValueError, KeyError, TypeError, OSError, ImportError, ModelServerError, gym.error.Error)


# a library error's keyword settings (``reward='replay'``, ``split=None``), as the command line gives them
KEYWORD = re.compile(
    r"\b(reward|dynamics|split|eval_split|simulator|p_real|user|judge|max_turns)=('([^'\s]*)'|None|\w+)"
)


def as_flags(message: str) -> str:
    """``message`` with each :data:`KEYWORD` setting spoken as its flag: ``--reward replay``, ``--split all``."""

    def flag(m: re.Match) -> str:
        value = m[3] if m[3] is not None else m[2]
        if value == "None":
            value = "all" if m[1].endswith("split") else "none"
        return f"--{m[1].replace('_', '-')} {value}"

    return KEYWORD.sub(flag, message)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as one error line, its keyword settings spoken as flags, and exit."""
    console.print(styled("error:", " " + " ".join(as_flags(message).split())), soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors(*more: type[Exception]):
    """A :data:`USER_ERRORS` error (or one of ``more``) inside becomes one line and exit code 2
    (``ENVACE_TRACEBACK=1``: the traceback instead)."""
    try:
        yield
    except USER_ERRORS + more as e:
        if os.environ.get("ENVACE_TRACEBACK"):
            raise
        message = e.args[0] if isinstance(e, KeyError) and e.args else e  # a KeyError's str() is a repr
        fail(str(message) or type(e).__name__)


@contextmanager
def progress(total: int, description: str, unit: str):
    """A progress bar of ``total`` items with their rate; yields ``advance(note="", step=1)``, the note
    (failures, the last reward, the turn being played; rich markup) shown beside it (``step=0``: the note
    only). The description is printed as it is, names and all."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(escape(description), total=total, note="")

        def advance(note: str = "", step: int = 1) -> None:
            done = bar.tasks[task].completed + step
            rate = done / max(bar.tasks[task].elapsed or 0.0, 1e-9)
            bar.update(task, advance=step, note=f"{rate:.2f} {unit}/s{' · ' + note if note else ''}")

        yield advance
