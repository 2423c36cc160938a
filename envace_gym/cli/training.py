"""The training commands: ``train`` (GRPO) and ``sft``, their options the fields of
:class:`~envace_gym.training.TrainConfig` and :class:`~envace_gym.training.SFTConfig`, and
``tiny-model`` (a model to try them on)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from envace_gym import registration
from envace_gym.cli.options import ALL_IS_NONE, COMMAS, DEFAULT_ENV, Given, config_from, param
from envace_gym.cli.output import console, progress, styled, user_errors
from envace_gym.registration import resolve_env
from envace_gym.spaces import TURN_ROLES
from envace_gym.training.config import SFTConfig, TrainConfig

# the config fields that the command line gives otherwise than as themselves
TRAINING_FIELDS = {
    "env_id": Given(resolve_env, decls=("--env",), default=DEFAULT_ENV),
    "roles": COMMAS,
    "split": ALL_IS_NONE,
    "eval_split": ALL_IS_NONE,
    "source": Given(decls=("--from",)),
}
RESUME = param(
    "resume", Annotated[bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")], False
)


def check_split(env_id: str, splits: dict[str, str | None]) -> None:
    """Refuse, in one error, every split of ``splits`` (option -> split) that ``env_id``'s suite does not
    have, naming the options to change and the suite's splits."""
    have = registration.suite(env_id).suite.splits()
    wrong = [f"{option} {split}" for option, split in splits.items() if split is not None and split not in have]
    if wrong:
        raise ValueError(
            f"{env_id} has no split for {' and '.join(wrong)}; its splits: {', '.join(have) or 'none'}. "
            f"Change {' and '.join(w.split()[0] for w in wrong)} to one of them, or to 'all' (every task)"
        )


def train(options: dict, resume: bool) -> None:
    """Role-wise GRPO: train one model to act and to rehearse, evaluate it in the real env.

    Several processes: ``accelerate launch [--multi_gpu --num_processes N] -m envace_gym.cli train ...``
    (add ``--fsdp`` to shard the model over them).
    """
    from envace_gym.training import Trainer

    trainer, records = fit(
        Trainer,
        TrainConfig,
        options,
        resume,
        "train",
        lambda r: f"reward {_spread(r)} · {r['tokens_per_s']:.0f} tokens/s",
    )
    if records is None:
        return
    config, reward = trainer.cfg, trainer.reward if isinstance(trainer.reward, str) else "a callable"
    for record in records:
        evaluated = f" · eval reward {_value(record['eval/reward'])}" if "eval/reward" in record else ""
        errors = f" · {record['reward_errors']} episodes left out (reward error)" if record["reward_errors"] else ""
        flat = record.get("flat_groups") and record["flat_groups"] == config.tasks_per_step
        console.print(
            f"step {record['step']}: reward ({reward}) {_spread(record)}{evaluated} · "
            f"{record['tokens_per_s']:.0f} tokens/s{errors}",
            styled(" · every group scored alike: nothing learnt", style="yellow") if flat else "",
            sep="",
        )
    say_where(config)


def sft(options: dict, resume: bool) -> None:
    """Role-masked SFT warm start: next-token loss on recorded real episodes, per role.

    Assistant turns train the act role, real tool responses the rehearse role, in the token
    layout of `train`'s rollouts; `--model hf:OUT/step-N` then continues with `train`.
    """
    from envace_gym.training import SFT

    trainer, records = fit(SFT, SFTConfig, options, resume, "sft", lambda r: f"{r['tokens_per_s']:.0f} tokens/s")
    if records is None:
        return
    config = trainer.cfg
    for record in records:
        held_out = _losses(record, "eval/loss")
        console.print(
            f"step {record['step']}: loss {_losses(record, 'loss')}"
            f"{' · held-out loss ' + held_out if held_out else ''} · {record['tokens_per_s']:.0f} tokens/s"
        )
    say_where(config)


def fit(
    trainer_class: type, config_class: type, options: dict, resume: bool, command: str, note: Callable[[dict], str]
) -> tuple[Any, list[dict] | None]:
    """The trainer of a training command's ``options`` and the records of its training (resumed
    first if asked), with a progress bar noting ``note(record)``; None off the main process."""
    from transformers.utils import logging as transformers_logging

    from envace_gym.training import CheckpointError

    transformers_logging.disable_progress_bar()  # its loading bars beside the command's own
    with user_errors(CheckpointError):
        config = config_from(config_class, options, TRAINING_FIELDS)
        held_out = {"--eval-split": config.eval_split} if config.eval_every else {}  # no evaluation, no split
        check_split(config.env_id, {"--split": config.split} | held_out)
        trainer = trainer_class(config)
        if resume:
            trainer.resume()
        with progress(config.steps - trainer.step, f"{command} {config.env_id}", "steps") as advance:
            records = trainer.train(on_step=lambda r: advance(note(r)))
    return trainer, records if trainer.policy.accelerator.is_main_process else None


def _value(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _spread(record: dict) -> str:
    """A step's mean reward and its spread over the step's episodes."""
    std = record.get("reward_std")
    return _value(record["reward"]) + ("" if std is None else f" ± {std:.3f}")


def _losses(record: dict, key: str) -> str:
    """``act L · rehearse L`` of a record's per-role losses under ``key/ROLE`` (a role without tokens left out)."""
    return " · ".join(
        f"{role} {record[f'{key}/{role}']:.3f}" for role in TURN_ROLES if record.get(f"{key}/{role}") is not None
    )


def say_where(config: TrainConfig | SFTConfig) -> None:
    """Where the metrics and the last checkpoint went, and the next command: ``train`` from an SFT
    warm start, ``run`` of a trained policy."""
    from envace_gym.training.checkpoint import latest

    out = Path(config.out)
    console.print(f"metrics in {out / 'metrics.jsonl'} · curves in {out / 'metrics.png'}")
    last = latest(out)
    if last is not None:
        nxt = (
            f"train it with GRPO: envace-gym train --model hf:{last} --env {config.env_id}"
            if isinstance(config, SFTConfig)
            else f"play it: envace-gym run {config.env_id} --agent hf:{last}"
        )
        console.print(f"last checkpoint: {last}\n{nxt}", soft_wrap=True)


def tiny_model_command(
    path: Annotated[Path, typer.Argument(help="Folder to write the model and tokenizer to.")],
    env: Annotated[
        Optional[str],
        typer.Option(
            "--env", help="Train the tokenizer on this env's gold train episodes (short sequences, fast learning)."
        ),
    ] = None,
    hidden_size: Annotated[int, typer.Option(help="Width (head size 64).")] = 128,
    layers: Annotated[int, typer.Option(help="Transformer layers.")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of the random init.")] = 0,
) -> None:
    """Write a tiny random-init Qwen3 model with a tokenizer trained here (no hub needed)."""
    from envace_gym.fixtures import tiny_model

    with user_errors():
        written = tiny_model(
            path, hidden_size=hidden_size, layers=layers, seed=seed, env_id=resolve_env(env) if env else None
        )
    console.print(
        f"tiny model in {written}\nwarm-start it: envace-gym sft --model hf:{written} --env {env or DEFAULT_ENV}",
        soft_wrap=True,
    )
