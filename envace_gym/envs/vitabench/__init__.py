"""VitaBench's domains: ``EnvACE/vitabench-{delivery,instore}-v0``, and OTA and cross-domain where the
checkout holds their task files, on the VitaBench checkout that ``VITABENCH_ROOT`` names."""

from __future__ import annotations

from envace_gym.env import EnvACEEnv
from envace_gym.rewards import SPEC_REWARDS


def make_env(domain: str, **kwargs) -> EnvACEEnv:
    """The env of one VitaBench task set, ``delivery``, ``instore``, ``ota`` or ``cross_domain`` (its
    English tasks; VitaBench has no splits)."""
    from envace_gym.envs.vitabench.suite import get_suite

    return EnvACEEnv(get_suite(domain), **kwargs)


def vitabench_reward(spec: str):
    """``vitabench:MODEL@BASE_URL[?options]``: VitaBench's rubric judge on that server."""
    from envace_gym.envs.vitabench.reward import VitaBenchReward

    return VitaBenchReward.from_spec(spec)


SPEC_REWARDS["vitabench"] = vitabench_reward

__all__ = ["make_env", "vitabench_reward"]
