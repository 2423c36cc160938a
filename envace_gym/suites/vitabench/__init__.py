"""VitaBench's domains: ``EnvACE/vitabench-{delivery,instore}-v0``, and OTA and cross-domain where the
checkout holds their task files, on the VitaBench checkout that ``VITABENCH_ROOT`` names (the suites:
:func:`envace_gym.suites.vitabench.suite.get_suite`, imported on first use)."""

from __future__ import annotations

from envace_gym.rewards import SPEC_REWARDS


def vitabench_reward(spec: str):
    """``vitabench:MODEL@BASE_URL[?options]``: VitaBench's rubric judge on that server."""
    from envace_gym.suites.vitabench.reward import VitaBenchReward

    return VitaBenchReward.from_spec(spec)


SPEC_REWARDS["vitabench"] = vitabench_reward

__all__ = ["vitabench_reward"]
