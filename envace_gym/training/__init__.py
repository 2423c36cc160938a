"""Training: token-in/token-out rollouts and role-wise GRPO."""

from envace_gym.training.checkpoint import CheckpointError
from envace_gym.training.grpo import group_advantages, grpo_loss, token_advantages, token_logprobs
from envace_gym.training.rollout import Rollout, collect
from envace_gym.training.trainer import TrainConfig, Trainer

__all__ = ["CheckpointError", "Rollout", "TrainConfig", "Trainer", "collect", "group_advantages",
           "grpo_loss", "token_advantages", "token_logprobs"]
