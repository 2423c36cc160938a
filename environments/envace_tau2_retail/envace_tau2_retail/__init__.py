"""verifiers finds an environment's parts through its package's ``__all__``: one Taskset (the tasks), and
here the Env that plays them (the envace env, host-side) and the Harness its agent runs by default (one
chat completion a turn)."""

from envace_gym.integrations.verifiers import EnvACEEnv, EnvACEHarness
from envace_tau2_retail.taskset import Tau2RetailTaskset

__all__ = ["EnvACEEnv", "EnvACEHarness", "Tau2RetailTaskset"]
