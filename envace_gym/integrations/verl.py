"""EnvACE in verl: an agent loop that plays envace envs, and role-wise GRPO advantages.

- :class:`EnvACEAgentLoop`, registered as ``envace``, plays one episode per sample through verl's
  server manager, token in and token out. It runs the project's own
  :func:`~envace_gym.training.rollout.collect` on a :class:`ServerAgent`, so its tokens, masks and
  roles are exactly those the project's :class:`~envace_gym.training.trainer.Trainer` trains on:
  act and rehearse tokens are trained (mask 1, the sampler's log-probs), every other token
  (system, user, template, real tool responses) is masked. The roles go to verl in
  ``extra_fields["envace_roles"]``, the env's terminal reward in ``reward_score`` and its parts in
  ``extra_fields["reward_info"]``. The user (scripted, or an LLM endpoint) is the env's own.
- :func:`role_advantages` is the project's role-wise baseline (``episode`` or ``row``) over verl's
  batch, registered with verl as the ``envace_rolewise`` advantage estimator. verl hands an estimator
  no per-sample fields, so :func:`install` wraps verl's ``compute_advantage`` to pass the roles; call
  it in the process that runs the trainer (verl's ``TaskRunner``), and train with verl's
  ``RayPPOTrainer`` (``trainer.use_v1=false``: 0.9.1's v1 trainer fetches only the fields it names).

A sample names its episode in ``extra_info`` (:class:`EpisodeSpec`; :func:`dataset_rows` writes
them). verl is optional: this module imports it, in verl's own environment (``make setup`` builds
``.venv-verl``; verl 0.9.1 needs a transformers below the project's).
"""

from __future__ import annotations

import asyncio
import math
import warnings
from typing import Any
from uuid import uuid4

import gymnasium as gym
import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.trainer.ppo import core_algos

from envace_gym.agents.prompting import Generation, TokenAgent, completion
from envace_gym.training.grpo import ROLE_IDS, token_advantages
from envace_gym.training.rollout import Rollout, collect
from envace_gym.wrappers import unwrap

ESTIMATOR = "envace_rolewise"
GENERATION_SECONDS = 600.0  # one generation's wait on the server manager


class EpisodeSpec(BaseModel):
    """The episode a sample plays: ``extra_info`` of a verl dataset row."""

    model_config = ConfigDict(extra="forbid")
    env_id: str
    task_id: str
    seed: int = Field(0, ge=0)
    env_kwargs: dict[str, Any] = Field(default_factory=dict)  # gym.make's: dynamics, reward, user, max_turns, ...


def dataset_rows(env_id: str, split: str | None = None, limit: int | None = None, **env_kwargs: Any) -> list[dict]:
    """One verl dataset row per task of ``env_id`` (the first ``limit``): the task's opening as
    ``prompt`` (verl tokenizes it for its length filters; the loop renders the env's own observation),
    ``agent_name`` ``envace`` and the :class:`EpisodeSpec` in ``extra_info``."""
    kwargs = {**({"split": split} if split else {}), **env_kwargs}
    env = unwrap(gym.make(env_id, **kwargs))
    rows = []
    for i, task_id in enumerate(env.task_ids[:limit]):
        obs, _ = env.reset(seed=i, options={"task_id": task_id})
        spec = EpisodeSpec(env_id=env_id, task_id=str(task_id), seed=i, env_kwargs=kwargs)
        rows.append(
            {
                "data_source": env_id,
                "prompt": [m for m in obs["messages"] if m["role"] in ("system", "user")][:2],
                "agent_name": "envace",
                "extra_info": spec.model_dump(),
            }
        )
    return rows


class ServerAgent(TokenAgent):
    """A token agent whose generations come from verl's server manager, for
    :func:`~envace_gym.training.rollout.collect` run in a
    worker thread: each call is scheduled on the agent loop's event ``loop``. A reply that is not a
    generation (ids outside the vocabulary, more tokens than asked for, log-probs that are missing,
    of another length or not finite) is a ``ValueError``."""

    name = "verl"

    def __init__(self, server_manager, tokenizer, sampling_params: dict, loop: asyncio.AbstractEventLoop):
        self.server_manager, self.tokenizer, self.loop = server_manager, tokenizer, loop
        self.sampling_params = dict(sampling_params)
        self.eos = {tokenizer.eos_token_id}
        self.max_tokens = int(self.sampling_params.get("max_tokens") or 1 << 16)

    def generate_ids(self, prompts: list[list[int]], stops: list[str | None]) -> list[Generation]:
        return [self._one(prompt, stop) for prompt, stop in zip(prompts, stops)]

    def _one(self, prompt: list[int], stop: str | None) -> Generation:
        params = {**self.sampling_params, **({"stop": [stop]} if stop else {})}
        reply = asyncio.run_coroutine_threadsafe(
            self.server_manager.generate(request_id=uuid4().hex, prompt_ids=list(prompt), sampling_params=params),
            self.loop,
        ).result(GENERATION_SECONDS)
        ids, logprobs = list(getattr(reply, "token_ids", None) or []), getattr(reply, "log_probs", None)
        vocab = len(self.tokenizer)
        if not ids or len(ids) > self.max_tokens:
            raise ValueError(f"the server manager sent {len(ids)} token ids for at most {self.max_tokens}")
        if any(type(t) is not int or not 0 <= t < vocab for t in ids):
            raise ValueError(f"the server manager sent token ids outside the vocabulary [0, {vocab})")
        if logprobs is None or len(logprobs) != len(ids) or not all(math.isfinite(p) for p in logprobs):
            raise ValueError("the server manager sent no finite log-probability per generated token")
        return completion(self.tokenizer, self.eos, prompt, ids, logprobs, stop)


def loop_output(row: Rollout, response_length: int, error: str | None = None) -> AgentLoopOutput:
    """A played episode (its conversation row) as verl's output: the tokens before the first generation
    are the prompt, the rest the response (at most ``response_length`` tokens), masked to its act and
    rehearse tokens."""
    start = next((i for i, r in enumerate(row.roles) if r != ROLE_IDS["context"]), len(row.ids))
    end = start + response_length
    roles = row.roles[start:end]
    if not roles:  # verl needs a response: one masked token (the episode failed before generating)
        row.ids, roles, row.logprobs = row.ids + row.ids[-1:], [ROLE_IDS["context"]], row.logprobs + [0.0]
    return AgentLoopOutput(
        prompt_ids=row.ids[:start],
        response_ids=row.ids[start : start + len(roles)],
        response_mask=[int(r != ROLE_IDS["context"]) for r in roles],
        response_logprobs=row.logprobs[start : start + len(roles)],
        reward_score=row.reward,
        num_turns=sum(row.generations.values()),
        metrics=AgentLoopMetrics(),
        extra_fields={
            "envace_roles": roles,
            "envace_generations": dict(row.generations),
            "reward_info": row.info.get("reward_info") or {},
            "envace_info": {**row.info, "error": error or row.info.get("error")},
        },
    )


@register("envace")
class EnvACEAgentLoop(AgentLoopBase):
    """verl's agent loop for envace envs (see the module's docstring). Envs are made once per distinct
    :class:`EpisodeSpec` settings and reused by the loop's later episodes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.response_length = self.rollout_config.response_length
        self._idle: dict[str, list[gym.Env]] = {}

    def _env(self, spec: EpisodeSpec) -> tuple[str, gym.Env]:
        key = spec.model_dump_json(include={"env_id", "env_kwargs"})
        if self._idle.get(key):
            return key, self._idle[key].pop()
        env = gym.make(spec.env_id, **spec.env_kwargs)
        if unwrap(env).rehearsal_format == "prompted":
            raise ValueError(
                "the envace loop returns one sequence per episode; prompted rehearsal makes a row per "
                "rehearse generation: give env_kwargs rehearsal_format='inline'"
            )
        return key, env

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        spec = EpisodeSpec.model_validate(kwargs.get("extra_info") or {})
        key, env = self._env(spec)
        agent = ServerAgent(self.server_manager, self.tokenizer, sampling_params, asyncio.get_running_loop())
        try:
            (row,) = await asyncio.to_thread(collect, agent, [env], [spec.task_id], 1, spec.seed)
            error = None
        except Exception as e:  # the server manager's or the model's failure ends this episode, not the batch
            row, error = Rollout(task_id=spec.task_id, group=0), f"{type(e).__name__}: {e}"
            row.extend(self.tokenizer("error", add_special_tokens=False)["input_ids"][:1], "context")
            row.info = {"ended_by": "agent_error", "error": error}
        self._idle.setdefault(key, []).append(env)
        return loop_output(row, self.response_length, error)


def role_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    roles: np.ndarray,
    generations: np.ndarray,
    baseline: str = "episode",
    scale: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` of verl's batch, each ``[B, T]``: the project's role-wise GRPO
    (:func:`~envace_gym.training.grpo.token_advantages`), one baseline per role within each group
    (``index``: verl's group uid), over the episode's reward (the sum of its token-level rewards).
    ``roles[b]`` are the loop's ``envace_roles`` of row b, ``generations[b]`` its
    ``envace_generations``; a token past them (padding) gets advantage 0.

    The batch is checked: a field of another length than the batch, a missing row, a role id that is
    not one or more roles than response tokens is a ``ValueError`` naming it. A row whose reward is not
    finite is left out, as the Trainer leaves out an episode whose reward failed: advantage 0, and in
    no baseline (a ``RuntimeWarning`` counts them)."""
    _check_batch(token_level_rewards, response_mask, index, roles, generations)
    rewards = token_level_rewards.sum(-1)
    _, groups = np.unique(np.asarray(index, dtype=str), return_inverse=True)
    role_ids = torch.zeros(response_mask.shape, dtype=torch.long)
    for b, row in enumerate(roles):
        role_ids[b, : len(row)] = torch.tensor(list(row), dtype=torch.long)
    finite = rewards.isfinite()
    if not finite.all():
        warnings.warn(
            f"{int((~finite).sum())} of {len(finite)} rows have a non-finite reward: left out (advantage 0)",
            RuntimeWarning,
            stacklevel=2,
        )
    rewards = torch.where(finite, rewards, torch.zeros_like(rewards))
    counts = {role: torch.tensor([int(g.get(role, 0)) for g in generations]) * finite for role in ("act", "rehearse")}
    advantages = token_advantages(rewards, torch.as_tensor(groups), role_ids, counts, baseline, scale)
    advantages = advantages * response_mask
    return advantages, advantages


def _check_batch(token_level_rewards, response_mask, index, roles, generations) -> None:
    """A ``ValueError`` naming the first field of the batch that is not what :func:`role_advantages`
    takes."""
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.dim() != 2:
        raise ValueError(f"token_level_rewards must be a [B, T] tensor, got {_shape(token_level_rewards)}")
    size, width = token_level_rewards.shape
    if not isinstance(response_mask, torch.Tensor) or response_mask.shape != token_level_rewards.shape:
        raise ValueError(f"response_mask is {_shape(response_mask)}, token_level_rewards [{size}, {width}]")
    for name, field in (("index", index), ("envace_roles", roles), ("envace_generations", generations)):
        if field is None or isinstance(field, (str, bytes, dict)) or not hasattr(field, "__len__"):
            raise ValueError(f"{name} must hold one entry per row of the batch ({size}), got {_shape(field)}")
        if len(field) != size:
            raise ValueError(f"{name} has {len(field)} entries for a batch of {size} rows")
    for b in range(size):
        if index[b] is None:
            raise ValueError(f"index[{b}] is missing")
        row = roles[b]
        ids = np.asarray(list(row)) if isinstance(row, (list, tuple, np.ndarray)) else None
        if ids is None or ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"envace_roles[{b}] must be a list of role ids, got {_shape(row)}")
        if len(ids) > width:
            raise ValueError(f"envace_roles[{b}] has {len(ids)} roles for {width} response tokens")
        if not np.isin(ids, list(ROLE_IDS.values())).all():
            raise ValueError(f"envace_roles[{b}] holds ids that are no role's: {sorted(set(ids.tolist()))}")
        counts = generations[b]
        values = [counts.get(role, 0) for role in ("act", "rehearse")] if isinstance(counts, dict) else [None]
        if not all(isinstance(v, (int, np.integer)) and v >= 0 for v in values):
            raise ValueError(f"envace_generations[{b}] must map act and rehearse to counts, got {counts!r:.80}")


def _shape(value) -> str:
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__} {list(shape)}" if shape is not None else type(value).__name__


@core_algos.register_adv_est(ESTIMATOR)
def _estimator(token_level_rewards, response_mask, index=None, config=None, non_tensor_batch=None, **_):
    missing = [k for k in ("envace_roles", "envace_generations") if k not in (non_tensor_batch or {})]
    if missing:
        raise ValueError(
            f"the {ESTIMATOR} estimator needs the envace loop's {' and '.join(missing)}: call "
            "envace_gym.integrations.verl.install() in the trainer's process, play with the envace loop and "
            "train with verl's RayPPOTrainer (trainer.use_v1=false: the v1 trainer passes no per-sample fields)"
        )
    if index is None:
        raise ValueError(f"the {ESTIMATOR} estimator needs the batch's group index (verl's uid)")
    scale = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    baseline = "episode" if config is None else config.get("envace_baseline", "episode")
    return role_advantages(
        token_level_rewards,
        response_mask,
        index,
        non_tensor_batch["envace_roles"],
        non_tensor_batch["envace_generations"],
        baseline,
        scale,
    )


def install() -> None:
    """Let the ``envace_rolewise`` estimator see the batch's roles: wrap verl's
    ``ray_trainer.compute_advantage`` (the smallest hook verl 0.9.1 allows) so that, for this estimator
    only, it is called with the batch's per-sample fields. Idempotent."""
    from verl.trainer.ppo import ray_trainer

    original = ray_trainer.compute_advantage
    if getattr(original, "envace", False):
        return

    def compute_advantage(data, adv_estimator, *args, config=None, **kwargs):
        if str(getattr(adv_estimator, "value", adv_estimator)) != ESTIMATOR:
            return original(data, adv_estimator, *args, config=config, **kwargs)
        if "response_mask" not in data.batch.keys():
            data.batch["response_mask"] = ray_trainer.compute_response_mask(data)
        advantages, returns = _estimator(
            data.batch["token_level_rewards"],
            data.batch["response_mask"],
            index=data.non_tensor_batch.get("uid"),
            config=config,
            non_tensor_batch=data.non_tensor_batch,
        )
        data.batch["advantages"], data.batch["returns"] = advantages, returns
        return data

    setattr(compute_advantage, "envace", True)  # noqa: B010 (an attribute functions are not typed to have)
    ray_trainer.compute_advantage = compute_advantage
