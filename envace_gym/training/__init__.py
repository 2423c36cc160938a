"""Training: token-in/token-out rollouts, role-masked SFT warm start and role-wise GRPO.

The configs import without torch (the command line builds its options from them); the rest is
imported on first use."""

from importlib import import_module

from envace_gym.training.config import SFTConfig, TrainConfig

_MODULES = {
    "CheckpointError": "checkpoint",
    "group_advantages": "grpo",
    "grpo_loss": "grpo",
    "token_advantages": "grpo",
    "token_logprobs": "grpo",
    "Rollout": "rollout",
    "collect": "rollout",
    "Trainer": "trainer",
    "TrainingStalled": "trainer",
    "SFT": "sft",
    "episode_tokens": "sft",
    "gold_episodes": "sft",
    "held_out_loss": "sft",
    "load_episodes": "sft",
}

__all__ = ["SFTConfig", "TrainConfig", *sorted(_MODULES)]


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_MODULES[name]}"), name)
