"""``rollout_func``: whole episodes played by :func:`~envace_gym.training.rollout.collect` with the
trainer's model (user and rehearse turns included), and ``RoleWiseGRPOTrainer``, TRL's GRPO with
a baseline per role over them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from envace_gym.agents.hf import HFAgent
from envace_gym.spaces import TURN_ROLES
from envace_gym.training.grpo import ROLE_IDS, token_advantages
from envace_gym.training.rollout import collect
from envace_gym.wrappers import unwrap


class EpisodeRollout:
    """A ``rollout_func`` for TRL's GRPOTrainer: each prompt (a row of
    :func:`~envace_gym.integrations.trl.prompts.make_dataset`) is one whole
    episode of ``gym.make(env_id, **make_kwargs)``, played by
    :func:`~envace_gym.training.rollout.collect` with the trainer's model at its temperature and top-p.

    It returns ``prompt_ids`` (the tokens before the first generation), ``completion_ids`` (the
    rest of the episode), the sampler's ``logprobs``, ``env_mask`` (1 on the tokens of
    ``roles``: act and rehearse generations; 0 on what the env, the user and the chat template
    add) and ``episode_reward``, which :func:`episode_reward` hands to TRL. Each generation gets
    at most ``max_new_tokens`` (default: the trainer's ``max_completion_length``); the env's
    ``max_turns`` bounds the episode (TRL does not cut what a ``rollout_func`` returns to its
    ``max_completion_length``). Rehearsal must be ``inline`` (one row per episode); env seeds
    are ``seed`` on, one per episode.
    """

    def __init__(
        self,
        env_id: str,
        max_new_tokens: int | None = None,
        roles: tuple[str, ...] = ("act", "rehearse"),
        seed: int = 0,
        **make_kwargs: Any,
    ):
        self.env_id, self.make_kwargs = env_id, make_kwargs
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.trained = {ROLE_IDS[role] for role in roles}
        self._calls = 0
        self._envs = [gym.make(env_id, **make_kwargs)]
        if unwrap(self._envs[0]).rehearsal_format != "inline":
            raise ValueError("EpisodeRollout needs rehearsal_format='inline': TRL trains one row per episode")

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        from trl.models import unwrap_model_for_generation

        task_ids = [_task_id(prompt) for prompt in prompts]
        while len(self._envs) < len(prompts):
            self._envs.append(gym.make(self.env_id, **self.make_kwargs))
        accelerator = trainer.accelerator  # a distinct seed for every episode of every call and process
        seed = self.seed + len(prompts) * (self._calls * accelerator.num_processes + accelerator.process_index)
        self._calls += 1
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model:
            training = model.training
            try:
                agent = HFAgent(
                    getattr(model, "name_or_path", "trl"),
                    model=model,
                    tokenizer=trainer.processing_class,
                    device=str(accelerator.device),
                    max_new_tokens=self.max_new_tokens or trainer.args.max_completion_length,
                    temperature=trainer.temperature,
                    top_p=trainer.top_p,
                    seed=None,
                )
                rollouts = collect(agent, self._envs[: len(prompts)], task_ids, 1, seed)
            finally:
                model.train(training)
        out: dict[str, list] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "env_mask": [],
            "episode_reward": [],
            "envace_roles": [],  # each completion token's role (ROLE_IDS), for RoleWiseGRPOTrainer
            "envace_generations": [],
        }
        for r in rollouts:
            start = next(k for k, role in enumerate(r.roles) if role != ROLE_IDS["context"])
            out["prompt_ids"].append(r.ids[:start])
            out["completion_ids"].append(r.ids[start:])
            out["logprobs"].append(r.logprobs[start:])
            out["env_mask"].append([int(role in self.trained) for role in r.roles[start:]])
            out["episode_reward"].append(r.reward)
            out["envace_roles"].append(r.roles[start:])
            out["envace_generations"].append(dict(r.generations))
        return out


def episode_reward(episode_reward: list[float], **_: Any) -> list[float]:
    """The reward function to pair with :class:`EpisodeRollout`: each episode's terminal reward."""
    return list(episode_reward)


def _task_id(prompt: Any) -> str:
    task_id = prompt[0].get("task_id") if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) else None
    if task_id is None:
        raise ValueError(
            "EpisodeRollout reads the task id from the prompt's first message: "
            "build the dataset with envace_gym.integrations.trl.make_dataset"
        )
    return str(task_id)


def _role_wise_trainer() -> type:
    """``RoleWiseGRPOTrainer``, built on first use so that this module needs no TRL to import."""
    import torch
    from trl import GRPOTrainer

    class RoleWiseGRPOTrainer(GRPOTrainer):
        """TRL's ``GRPOTrainer`` with the project's role-wise advantages: with
        :class:`EpisodeRollout`, an episode's act tokens and its rehearse tokens each get the
        advantage against their own role's baseline in the group
        (:func:`~envace_gym.training.grpo.token_advantages`, ``baseline`` ``episode`` or ``row``,
        scaled unless ``scale_rewards="none"``), as ``(B, T)`` advantages, which TRL's loss takes.
        Groups must not be split across processes: it runs in one process."""

        def __init__(self, *args: Any, baseline: str = "episode", **kwargs: Any):
            super().__init__(*args, **kwargs)
            if self.accelerator.num_processes > 1:
                raise ValueError("RoleWiseGRPOTrainer computes a group's baselines in one process: run one")
            self.role_baseline = baseline

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            if any("envace_roles" not in row for row in inputs):
                raise ValueError("RoleWiseGRPOTrainer needs rollout_func=EpisodeRollout(...): it gives the roles")
            width = output["completion_ids"].shape[1]
            roles = torch.tensor([(row["envace_roles"] + [0] * width)[:width] for row in inputs])
            rewards = torch.tensor([float(row["episode_reward"]) for row in inputs])
            size = self.num_generations if self.model.training else self.num_generations_eval
            groups = torch.arange(len(inputs)) // size
            counts = {role: torch.tensor([row["envace_generations"][role] for row in inputs]) for role in TURN_ROLES}
            scale = self.scale_rewards != "none"
            advantages = token_advantages(rewards, groups, roles, counts, self.role_baseline, scale)
            output["advantages"] = (advantages * output["completion_mask"].cpu()).to(output["advantages"].device)
            return output

    return RoleWiseGRPOTrainer
