"""The taskset: envace's generic one, its suite fixed to tau2-bench retail (other fields stay
``--env.taskset.*`` options: split, dynamics, task_ids, env_kwargs)."""

import verifiers.v1 as vf

from envace_gym.integrations.verifiers import EnvACEConfig, EnvACETask, EnvACETaskset


class Tau2RetailConfig(EnvACEConfig):
    env_id: str | None = "EnvACE/tau2-retail-v0"


class Tau2RetailTaskset(EnvACETaskset, vf.Taskset[EnvACETask, Tau2RetailConfig]):
    """tau2-bench retail's tasks (the test split by default)."""
