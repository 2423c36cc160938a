"""The training loop that GRPO (:class:`~envace_gym.training.trainer.Trainer`) and SFT
(:class:`~envace_gym.training.sft.SFT`) share: steps to ``cfg.steps``, held-out evaluation, the
metrics log, and checkpoints that resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from envace_gym.play.records import rows, write_record
from envace_gym.reporting.figures import plot_training
from envace_gym.training import checkpoint
from envace_gym.training.policy import Policy


class TrainingLoop:
    """What a trainer is around its :class:`~envace_gym.training.policy.Policy`: a subclass sets
    ``cfg`` (``steps``, ``eval_every``, ``save_every``, ``tensorboard``, a class-level ``RESUMABLE``),
    ``out``, ``policy`` and ``play_settings`` (what a checkpoint's player takes), and defines
    :meth:`train_step` (one update: ``step`` and the data position ``cursor`` advance) and
    :meth:`evaluate` (held-out metrics). :meth:`checkpoint_state` and :meth:`restore` carry a
    subclass's own state across a resume."""

    cfg: Any
    out: Path
    policy: Policy
    play_settings: dict
    step = 0
    cursor = 0

    # the policy's parts, read as the trainer's own
    agent = property(lambda self: self.policy.agent)
    model = property(lambda self: self.policy.model)
    tokenizer = property(lambda self: self.policy.tokenizer)
    accelerator = property(lambda self: self.policy.accelerator)

    def train_step(self) -> dict:
        """One update; returns the step's metrics record."""
        raise NotImplementedError

    def evaluate(self) -> dict:
        """Held-out metrics, merged into the step's record."""
        raise NotImplementedError

    def checkpoint_state(self) -> dict:
        """A subclass's own state to keep in a checkpoint (JSON)."""
        return {}

    def restore(self, state: dict) -> None:
        """Take back what :meth:`checkpoint_state` kept, from a checkpoint's state."""

    def train(self, on_step: Callable[[dict], None] | None = None) -> list[dict]:
        """Train to ``cfg.steps``; returns each step's metrics record, also given to ``on_step`` as it is
        made. The main process evaluates every ``eval_every`` steps and at the last, and writes each
        record to ``OUT/metrics.jsonl`` (and TensorBoard), ``OUT/metrics.png`` at the end; a checkpoint
        every ``save_every`` steps and at the last."""
        cfg, records, board = self.cfg, [], None
        main = self.accelerator.is_main_process
        if cfg.tensorboard and main:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step drops what a killed run logged after the checkpoint it resumed from
            board = SummaryWriter(str(self.out / "tensorboard"), purge_step=self.step + 1)
        while self.step < cfg.steps:
            record = self.train_step()
            if cfg.eval_every and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
                with self.policy.unsharded():
                    if main:
                        record.update(self.evaluate())
            records.append(record)
            if on_step is not None:
                on_step(record)
            if main:
                with (self.out / "metrics.jsonl").open("a") as f:
                    write_record(f, record)
            if board is not None:
                for key, value in record.items():
                    if isinstance(value, (int, float)) and key != "step":
                        board.add_scalar(key, value, self.step)
                board.flush()
            if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == cfg.steps:
                self.save()
                self.accelerator.wait_for_everyone()
        if board is not None:
            board.close()
        if main:
            plot_training(self.out / "metrics.jsonl", self.out / "metrics.png")
        return records

    def save(self) -> Path | None:
        """Write ``OUT/step-N`` (loadable as ``hf:OUT/step-N``) and ``OUT/config.json`` from the main
        process (None elsewhere); sharded, every process calls this
        (:meth:`~envace_gym.training.policy.Policy.save`)."""
        state = {"step": self.step, "cursor": self.cursor, "config": _config_json(self.cfg), **self.checkpoint_state()}
        if self.accelerator.is_main_process:
            (self.out / "config.json").write_text(_config_json(self.cfg, indent=1))
        return self.policy.save(self.out / f"step-{self.step}", state, self.play_settings)

    def resume(self) -> None:
        """Continue from the latest checkpoint in ``out`` (refused whole if it is damaged, or a setting
        differs from its run's besides ``cfg.RESUMABLE``): the policy's weights and optimizer
        (:meth:`~envace_gym.training.policy.Policy.load`), ``step``, ``cursor`` and :meth:`restore`;
        the metrics logged after it are dropped. Every process calls this."""
        folder = checkpoint.latest(self.out)
        if folder is None:
            raise checkpoint.CheckpointError(f"no checkpoint to resume in {self.out}")
        state = checkpoint.load_state(folder)
        given = json.loads(_config_json(self.cfg))
        checkpoint.check_same_run(folder, state.get("config"), given, type(self.cfg).RESUMABLE)
        self.policy.load(folder, state)
        self.step, self.cursor = state["step"], state["cursor"]
        self.restore(state)
        metrics = self.out / "metrics.jsonl"
        if metrics.exists() and self.accelerator.is_main_process:
            data = metrics.read_bytes()  # a last line without its newline was cut short by a kill
            metrics.write_bytes(data[: data.rfind(b"\n") + 1])
            kept = [r for r in rows(metrics) if isinstance(r.get("step"), int) and r["step"] <= self.step]
            with metrics.open("w") as f:  # the metrics logged after the checkpoint are dropped
                for record in kept:
                    write_record(f, record)


def _config_json(config, indent: int | None = None) -> str:
    """A config as JSON; a callable (a reward) is written by its name."""
    return json.dumps(asdict(config), indent=indent, default=lambda o: getattr(o, "__name__", repr(o)))
