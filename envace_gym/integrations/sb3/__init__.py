"""stable-baselines3 bridge: a tool-use env as a ``Discrete`` choice among candidate actions.

SB3's algorithms need numeric spaces; an EnvACE env's actions are model text. The
:class:`CandidateEnv` wrapper turns each act turn into a choice among at most
``max_candidates`` candidate actions (tool calls with arguments taken from the
conversation, a reply to the user, a final reply that ends the conversation) and
shows the policy a numeric description of every candidate. Rehearse turns never
reach the policy: a world model (``knn``, ``oracle`` or any agent) answers them inside
``step``. So one policy trains under ``rehearsed`` dynamics and is scored under ``real``
ones::

    import gymnasium as gym, envace_gym
    from stable_baselines3 import PPO
    from envace_gym.integrations.sb3 import CandidateEnv, CandidatePolicy

    train = CandidateEnv(gym.make("EnvACE/tau2-mock-gen-v0", split="train", dynamics="rehearsed",
                                  reward="replay", max_turns=8), world_model="oracle")
    model = PPO(CandidatePolicy, train).learn(16_000)
    test = CandidateEnv(gym.make("EnvACE/tau2-mock-gen-v0", split="test", max_turns=8))

The wrapper is a plain Gymnasium env: only ``CandidatePolicy`` needs torch and
stable-baselines3, imported when it is first used.
"""

from envace_gym.integrations.sb3.candidates import (
    CANDIDATE_FEATURES,
    GLOBAL_FEATURES,
    Conversation,
    default_candidates,
)
from envace_gym.integrations.sb3.env import CandidateEnv
from envace_gym.integrations.sb3.policy import _candidate_policy


def __getattr__(name: str):
    if name == "CandidatePolicy":  # built on first use, so the wrapper alone needs no torch
        return _candidate_policy()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [  # noqa: F822 (CandidatePolicy is defined when torch imports)
    "CANDIDATE_FEATURES",
    "GLOBAL_FEATURES",
    "CandidateEnv",
    "CandidatePolicy",
    "Conversation",
    "default_candidates",
]
