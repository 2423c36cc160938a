"""envace-gym envs in TRL's ``GRPOTrainer`` (``pip install 'envace-gym[trl]'``), two ways.

- ``environment_factory=environment_factory(ENV_ID)``: TRL runs its own tool loop. The
  class exposes exactly the suite's tools as methods, their schemas rendered from the
  suite's JSON Schemas, and each call is one env step answered by the env (``real``,
  ``replay`` or ``simulated`` dynamics). ``get_reward`` ends the episode and scores it with
  the env's reward; with ``reward_funcs=[final_reply]`` the episode first gets the message
  that ended the rollout, which TRL shows no environment. TRL masks tool responses out of
  the loss and ends a rollout at the first message without a tool call: no user turns, no
  rehearse turns.
- ``rollout_func=EpisodeRollout(ENV_ID)`` with ``reward_funcs=episode_reward``: every
  prompt is a whole episode, played by :func:`envace_gym.training.rollout.collect` with the
  trainer's model: user turns, and rehearse turns under any dynamics. Act and rehearse
  tokens are trainable (``env_mask``), what the env, the user and the template add is not;
  logprobs are the sampler's.

Both take their prompts from :func:`make_dataset`. Example::

    from trl import GRPOConfig, GRPOTrainer
    from envace_gym.integrations.trl import EpisodeRollout, episode_reward, make_dataset

    env_id = "EnvACE/tau2-mock-gen-v0"
    trainer = GRPOTrainer(model=path, args=GRPOConfig(...), train_dataset=make_dataset(env_id, split="train"),
                          rollout_func=EpisodeRollout(env_id, split="train", dynamics="rehearsed"),
                          reward_funcs=episode_reward)
"""

from envace_gym.integrations.trl.episodes import EpisodeRollout, _role_wise_trainer, episode_reward
from envace_gym.integrations.trl.prompts import RESPONSE_TEMPLATE, make_dataset, prepare_tokenizer
from envace_gym.integrations.trl.tool_loop import (
    TOOL_LOOP_DYNAMICS,
    EnvironmentTools,
    environment_factory,
    final_reply,
)


def __getattr__(name: str):
    if name == "RoleWiseGRPOTrainer":  # built on first use, so the module alone needs no TRL
        cls = globals()["RoleWiseGRPOTrainer"] = _role_wise_trainer()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [  # noqa: F822 (RoleWiseGRPOTrainer is defined when TRL imports)
    "RESPONSE_TEMPLATE",
    "TOOL_LOOP_DYNAMICS",
    "EnvironmentTools",
    "EpisodeRollout",
    "RoleWiseGRPOTrainer",
    "environment_factory",
    "episode_reward",
    "final_reply",
    "make_dataset",
    "prepare_tokenizer",
]
