"""Role-wise GRPO: one set of weights, one advantage baseline per role (``act``, ``rehearse``).

For role r, an episode's advantage is its reward minus the baseline of the
episodes in its group that contain tokens of role r (``baseline="episode"``), or
of the group's role-r generations, each counted once (``baseline="row"``, the
EnvACE paper's code); optionally divided by the same subset's standard
deviation. It is broadcast to that episode's role-r tokens. The loss is a
PPO-clip term on the ratio against the sampler's log-probs, plus an optional
KL penalty to a frozen reference, averaged over tokens within each role and
summed over roles with ``role_weights`` (weight 0 switches a role off). With a
``world_coef``, the cross-entropy of the ``world`` tokens (real tool responses written
as rehearsals: the world-model loss) is added, times the coefficient.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from envace_gym.spaces import TURN_ROLES
from envace_gym.training.tokens import ROLE_IDS


def group_advantages(
    rewards: torch.Tensor, counts: torch.Tensor, baseline: str = "episode", scale: bool = False, eps: float = 1e-6
) -> torch.Tensor:
    """Advantages of one group for one role.

    ``rewards[e]`` is episode e's reward, ``counts[e]`` its number of role-r
    generations. Episodes with none get advantage 0, and so does every episode of a group whose
    episodes with some scored alike: a mean's rounding (0.9 thrice in float32) is no signal, and
    divided by a standard deviation as small it would be a large one.
    """
    present = counts > 0
    if not present.any() or (rewards[present] == rewards[present][0]).all():
        return torch.zeros_like(rewards)
    if baseline == "episode":
        weights = present.to(rewards.dtype)
    elif baseline == "row":
        weights = counts.to(rewards.dtype)
    else:
        raise ValueError(f"baseline must be 'episode' or 'row', got {baseline!r}")
    mean = (weights * rewards).sum() / weights.sum()
    advantages = rewards - mean
    if scale:
        var = (weights * advantages**2).sum() / weights.sum()
        advantages = advantages / (var.sqrt() + eps)
    return torch.where(present, advantages, torch.zeros_like(advantages))


def token_advantages(
    rewards: torch.Tensor,
    groups: torch.Tensor,
    role_ids: torch.Tensor,
    generations: dict[str, torch.Tensor],
    baseline: str = "episode",
    scale: bool = False,
    episodes: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token advantages ``[B, T]`` for a batch of training rows.

    ``groups[b]`` is the group of row b, ``role_ids[b, t]`` the role of each token
    (:data:`~envace_gym.training.tokens.ROLE_IDS`), ``generations[r][b]`` the number of role-r generations in b.
    A row is one episode unless ``episodes[b]`` says which episode it belongs to
    (``prompted`` rehearsal: an episode's conversation row and one row per rehearse
    generation); the baselines are then taken over episodes, the rows summed into them.
    """
    if episodes is None:
        episodes = torch.arange(len(rewards))
    ids, row_episode = episodes.unique(return_inverse=True)
    first = torch.zeros(len(ids), dtype=torch.long).scatter_(0, row_episode.flip(0), torch.arange(len(rewards)).flip(0))
    episode_rewards, episode_groups = rewards[first], groups[first]
    out = torch.zeros(role_ids.shape, dtype=rewards.dtype)
    for role in TURN_ROLES:
        counts = torch.zeros(len(ids), dtype=generations[role].dtype).index_add_(0, row_episode, generations[role])
        per_episode = torch.zeros_like(episode_rewards)
        for g in episode_groups.unique():
            members = episode_groups == g
            per_episode[members] = group_advantages(episode_rewards[members], counts[members], baseline, scale)
        out = torch.where(role_ids == ROLE_IDS[role], per_episode[row_episode][:, None], out)
    return out


def token_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0, chunk: int = 256
) -> torch.Tensor:
    """``[B, T]`` log-probability of each token given the ones before (0 at position 0), at the
    sampler's ``temperature`` so that ratios compare like with like.

    The model runs once for its final hidden states; the output head and the log-softmax
    then run over ``chunk`` positions at a time, each chunk recomputed in the backward pass
    (activation checkpointing), so that no ``[B, T, V]`` tensor ever exists: the peak is
    one chunk's logits, whatever the sequence length.
    """
    out = model(
        input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, logits_to_keep=1, use_cache=False
    )
    hidden = out.hidden_states[-1][:, :-1]  # the last layer's output, after the final norm
    head = getattr(model, "module", model).get_output_embeddings()
    targets = input_ids[:, 1:]
    pieces = []
    for start in range(0, hidden.shape[1], chunk):
        h, t = hidden[:, start : start + chunk], targets[:, start : start + chunk]
        if torch.is_grad_enabled() and h.requires_grad:
            pieces.append(checkpoint(_picked_logprobs, head, h, t, temperature, use_reentrant=False))
        else:
            pieces.append(_picked_logprobs(head, h, t, temperature))
    picked = torch.cat(pieces, dim=1) if pieces else hidden.new_zeros(hidden.shape[:2])
    return torch.nn.functional.pad(picked, (1, 0))


def _picked_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(hidden).float() / temperature
    return torch.gather(logits, 2, targets[..., None]).squeeze(-1) - logits.logsumexp(-1)


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    role_ids: torch.Tensor,
    clip_eps: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    role_weights: dict[str, float] | None = None,
    role_tokens: dict[str, int] | None = None,
    world_coef: float = 0.0,
) -> tuple[torch.Tensor, dict]:
    """The role-wise clipped objective and its statistics (all tensors ``[B, T]``).

    Each role's loss is a token mean; ``role_tokens`` gives its denominator when these
    rows are one process's share of a larger minibatch (the minibatch's token count).
    ``world_coef`` weighs the mean negative log-likelihood of the ``world`` tokens.
    """
    role_weights = role_weights or {"act": 1.0, "rehearse": 1.0}
    ratio = torch.exp(logprobs - old_logprobs)
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)
    kl = None
    if ref_logprobs is not None and kl_coef:
        delta = ref_logprobs - logprobs
        kl = torch.exp(delta) - delta - 1  # the k3 estimator, >= 0
        per_token = per_token + kl_coef * kl
    total = logprobs.new_zeros(())
    stats: dict[str, float] = {}
    for role in TURN_ROLES:
        mask = role_ids == ROLE_IDS[role]
        weight = role_weights.get(role, 0.0)
        if not mask.any() or weight == 0:
            continue
        role_loss = per_token[mask].sum() / (role_tokens[role] if role_tokens else mask.sum())
        total = total + weight * role_loss
        stats[f"loss/{role}"] = role_loss.item()
        stats[f"clip_fraction/{role}"] = ((ratio[mask] - clipped[mask]).abs() > 0).float().mean().item()
        stats[f"tokens/{role}"] = int(mask.sum())
        if kl is not None:
            stats[f"kl/{role}"] = kl[mask].mean().item()
    world = role_ids == ROLE_IDS["world"]
    if world_coef and world.any():
        nll = -logprobs[world].sum() / (role_tokens["world"] if role_tokens else world.sum())
        total = total + world_coef * nll
        stats["loss/world"], stats["tokens/world"] = nll.item(), int(world.sum())
    return total, stats
