"""The ``EnvACE/*`` Gymnasium ids."""

from __future__ import annotations

import gymnasium as gym

ENV_IDS: dict[str, tuple[str, dict]] = {
    f"EnvACE/tau2-{domain}-v0": ("envace_gym.envs.tau2:make_env", {"domain": domain})
    for domain in ("retail", "airline", "telecom", "mock")
}
ENV_IDS["EnvACE/tau2-mock-gen-v0"] = ("envace_gym.envs.tau2.mock_gen:make_env", {})
BFCL_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                   "multi_turn_long_context", "simple_python", "multiple", "parallel",
                   "parallel_multiple", "irrelevance", "live_simple", "live_multiple", "live_parallel",
                   "live_parallel_multiple", "live_irrelevance", "live_relevance")
ENV_IDS.update({f"EnvACE/bfcl-{c.replace('_', '-')}-v0": ("envace_gym.envs.bfcl:make_env", {"category": c})
                for c in BFCL_CATEGORIES})


def register_all() -> None:
    for env_id, (entry_point, kwargs) in ENV_IDS.items():
        if env_id not in gym.registry:
            # The env enforces its own turn limit and reports it as truncation. Gymnasium's
            # passive checker is off: after a first reset that raised (a bad task id), it fails
            # every later step. tests/test_env.py runs gymnasium's check_env on every suite.
            gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs, disable_env_checker=True)
