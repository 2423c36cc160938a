"""The tau2-bench suites: ``EnvACE/tau2-{retail,airline,telecom,mock}-v0`` and the generated
``EnvACE/tau2-mock-gen-v0`` (:mod:`envace_gym.suites.tau2.mock_gen`)."""

from __future__ import annotations

import os

from loguru import logger

# before any tau2 module loads: tau2 logs every tool response at DEBUG level and warns about a
# missing .env file when imported
logger.disable("tau2")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from envace_gym.suites.tau2.mock_gen import MockGenSuite, get_gen_suite  # noqa: E402
from envace_gym.suites.tau2.suite import DOMAINS, Tau2Suite, Tau2World, get_suite  # noqa: E402

__all__ = ["DOMAINS", "MockGenSuite", "Tau2Suite", "Tau2World", "get_gen_suite", "get_suite"]
