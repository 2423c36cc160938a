"""A policy that scores every candidate with one network (needs torch and stable-baselines3)."""

from __future__ import annotations

import functools

import numpy as np

from envace_gym.integrations.sb3.candidates import GLOBAL_FEATURES


@functools.cache
def _candidate_policy() -> type:
    import torch
    from stable_baselines3.common.policies import ActorCriticPolicy
    from torch import nn

    class CandidateScorer(nn.Module):
        """Rows (one per candidate, with the global features appended) through one shared MLP:
        a score per candidate (the action logits; empty slots masked) and a pooled value latent."""

        def __init__(self, n_candidates: int, n_features: int, n_global: int, hidden: int):
            super().__init__()
            self.k, self.f, self.g = n_candidates, n_features, n_global
            self.rows = nn.Sequential(
                nn.Linear(n_features + n_global, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
            )
            self.score = nn.Linear(hidden, 1)
            self.value = nn.Sequential(nn.Linear(2 * hidden + n_global, hidden), nn.Tanh())
            self.latent_dim_pi, self.latent_dim_vf = n_candidates, hidden

        def _hidden(self, features):
            rows = features[:, : self.k * self.f].reshape(-1, self.k, self.f)
            glob = features[:, self.k * self.f :]
            h = self.rows(torch.cat([rows, glob[:, None, :].expand(-1, self.k, -1)], dim=-1))
            return rows[..., 0] > 0.5, h, glob

        def forward_actor(self, features):
            present, h, _ = self._hidden(features)
            return self.score(h).squeeze(-1).masked_fill(~present, -1e8)

        def forward_critic(self, features):
            present, h, glob = self._hidden(features)
            weights = present.float()[..., None]
            mean = (h * weights).sum(1) / weights.sum(1).clamp(min=1.0)
            peak = h.masked_fill(~present[..., None], -1.0).max(1).values
            return self.value(torch.cat([mean, peak, glob], dim=-1))

        def forward(self, features):
            return self.forward_actor(features), self.forward_critic(features)

    class CandidatePolicy(ActorCriticPolicy):
        """An actor-critic for :class:`CandidateEnv`: one shared network scores each candidate
        row, so what it learns about a candidate holds in every slot (``policy_kwargs``:
        ``n_candidates``, the env's ``max_candidates``, and ``hidden``)."""

        # SB3 declares an MlpExtractor; any module with its latent sizes and forward methods serves
        mlp_extractor: CandidateScorer  # type: ignore[assignment]

        def __init__(self, *args, n_candidates: int = 32, hidden: int = 64, **kwargs):
            self.n_candidates, self.hidden = n_candidates, hidden
            super().__init__(*args, **kwargs)

        def _build_mlp_extractor(self) -> None:
            assert self.observation_space.shape is not None  # CandidateEnv's Box
            size = int(np.prod(self.observation_space.shape)) - len(GLOBAL_FEATURES)
            if size % self.n_candidates:
                raise ValueError(
                    f"the observation does not hold {self.n_candidates} candidate rows: "
                    "pass policy_kwargs={'n_candidates': env.max_candidates}"
                )
            self.mlp_extractor = CandidateScorer(
                self.n_candidates, size // self.n_candidates, len(GLOBAL_FEATURES), self.hidden
            ).to(self.device)

        def _build(self, lr_schedule) -> None:
            super()._build(lr_schedule)
            self.action_net = nn.Identity()  # the scores are the logits
            nn.init.orthogonal_(self.mlp_extractor.score.weight, gain=0.01)
            nn.init.zeros_(self.mlp_extractor.score.bias)
            self.optimizer = self.optimizer_class(  # type: ignore[call-arg]  # SB3 types it as the base Optimizer
                self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
            )

    return CandidatePolicy
