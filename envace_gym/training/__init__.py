"""Training: token-in/token-out rollouts, role-masked SFT warm start and role-wise GRPO."""

from envace_gym.training.checkpoint import CheckpointError
from envace_gym.training.grpo import group_advantages, grpo_loss, token_advantages, token_logprobs
from envace_gym.training.rollout import Rollout, collect
from envace_gym.training.trainer import TrainConfig, Trainer
from envace_gym.training.sft import SFT, SFTConfig, episode_tokens, gold_episodes, held_out_loss, load_episodes

__all__ = ["CheckpointError", "Rollout", "SFT", "SFTConfig", "TrainConfig", "Trainer", "collect",
           "episode_tokens", "gold_episodes", "group_advantages", "grpo_loss", "held_out_loss", "load_episodes",
           "token_advantages", "token_logprobs"]
