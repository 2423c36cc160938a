"""How envace-gym reaches VitaBench: a checkout named by ``VITABENCH_ROOT``, imported from its ``src``.

VitaBench is not on the package index. Its ``vita`` package is imported from the
checkout as it is; nothing of it is copied here. Importing it prints its model list
and logs a warning about a missing ``.env`` file; both are kept quiet.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from functools import cache
from pathlib import Path

from loguru import logger

ROOT_VARIABLE = "VITABENCH_ROOT"
LANGUAGE = "english"  # the checkout's task files read here are the English ones (tasks_en.json)
DOMAINS = ("delivery", "instore", "ota")  # VitaBench's domains, each a module of tools and an environment
CROSS_DOMAIN = "cross_domain"  # its task set across the three, played in their merged environment
TASK_SETS = (*DOMAINS, CROSS_DOMAIN)


def root() -> Path:
    """The VitaBench checkout that ``VITABENCH_ROOT`` names; ImportError that says what to set."""
    value = os.environ.get(ROOT_VARIABLE)
    if not value:
        raise ImportError(
            f"the VitaBench suites need a VitaBench checkout: set {ROOT_VARIABLE} to its folder "
            "(the one holding src/vita and data/vita)"
        )
    path = Path(value).expanduser().resolve()
    if not (path / "src" / "vita" / "__init__.py").is_file():
        raise ImportError(f"{ROOT_VARIABLE}={value} is not a VitaBench checkout: it has no src/vita/__init__.py")
    return path


@cache
def load() -> None:
    """Import VitaBench's modules that the suites use, from the checkout, and isolate its registries."""
    src = str(root() / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    logger.disable("vita")
    with contextlib.redirect_stdout(io.StringIO()):  # vita.config prints the models it knows on import
        for domain in DOMAINS:
            __import__(f"vita.domains.{domain}.environment")
        import vita.evaluator.evaluator_traj  # noqa: F401
        import vita.orchestrator.orchestrator  # noqa: F401
        import vita.registry  # noqa: F401  (the cross-domain environment builds each domain's through it)

    from envace_gym.envs.vitabench.isolation import install

    install()
