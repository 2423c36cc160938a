"""The tiny GRPO runs the training tests share (tests/training/: train, checkpoint, distributed, fsdp), and a
CPU config of TRL's GRPOTrainer (tests/integrations/test_trl.py, tests/training/test_learning.py)."""

from pathlib import Path

from envace_gym.training import TrainConfig


def tiny_config(tiny: Path | str, out: Path | str, **overrides) -> TrainConfig:
    """A run of the tiny model in the folder ``tiny`` (the ``tiny`` fixture), writing to ``out``: one step of one
    task's group of two on EnvACE/tau2-mock-office-v0 (train split; test split held out; its prompts a fifth of
    retail's, so a step takes a fraction of the time), at most 8 new tokens a turn
    and 2 turns, no evaluation, a checkpoint every step, seed 0. ``overrides`` replace any of these or set any
    other field (the rest stay TrainConfig's defaults)."""
    settings = dict(
        model=f"hf:{tiny}",
        env_id="EnvACE/tau2-mock-office-v0",
        out=str(out),
        split="train",
        eval_split="test",
        group_size=2,
        tasks_per_step=1,
        steps=1,
        lr=1e-3,
        max_new_tokens=8,
        max_turns=2,
        eval_every=0,
        save_every=1,
        seed=0,
    )
    return TrainConfig(**(settings | overrides))


def grpo_config(out: Path | str, **overrides):
    """TRL's ``GRPOConfig`` for a CPU test writing to ``out``: one step of one group of two, lr 1e-5, no KL,
    no saving or reporting, seed 0; ``overrides`` replace any of these or set any other field."""
    from trl import GRPOConfig

    settings = dict(
        per_device_train_batch_size=2,
        num_generations=2,
        max_steps=1,
        learning_rate=1e-5,
        beta=0.0,
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
    )
    return GRPOConfig(output_dir=str(out), **(settings | overrides))
