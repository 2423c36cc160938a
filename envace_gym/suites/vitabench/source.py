"""How envace-gym reaches VitaBench: a checkout named by ``VITABENCH_ROOT``, imported from its ``src``.

VitaBench is not on the package index. Its ``vita`` package is imported from the
checkout as it is; nothing of it is copied here. Importing it prints its model list
and logs a warning about a missing ``.env`` file; both are kept quiet. The options of a
``vitabench:`` judge spec are read here too, where nothing of VitaBench is imported, so a spec can
be checked before any suite loads.
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

#: The options of a ``vitabench:`` judge spec besides a ``MODEL@BASE_URL`` spec's (``timeout`` ...), whole
#: numbers: a cap on each reply's tokens, and ``structured=1``, VitaBench's verdict list sent as a JSON schema
#: for the server to hold the judge to (vLLM's structured outputs).
JUDGE_OPTIONS = ("max_tokens", "structured")


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

    from envace_gym.suites.vitabench.isolation import install

    install()


def judge_options(spec: str) -> tuple[str, dict]:
    """``spec`` without the :data:`JUDGE_OPTIONS` in its query (what is left parses as any spec), and them."""
    head, _, query = spec.partition("?")
    own, rest = {}, []
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        if key not in JUDGE_OPTIONS:
            rest.append(pair)
        elif not value.isdigit():
            raise ValueError(f"option {key} in {spec!r} needs a whole number, got {value!r}")
        else:
            own[key] = int(value)
    return head + (f"?{'&'.join(rest)}" if rest else ""), own
