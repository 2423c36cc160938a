"""Sphinx configuration of envace-gym's documentation (``make docs``)."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]

import envace_gym  # noqa: E402
import envace_gym.integrations.openenv.server  # noqa: E402, F401

# imported before autodoc imports the rest: imported in its order, pydantic failed to build the MCP
# SDK's models (`__pydantic_extra__` unresolved) in this build; which earlier import causes it is not known
import envace_gym.suites.mcp  # noqa: E402, F401

project = "envace-gym"
author = "envace-gym developers"
copyright = "2026, envace-gym developers"
release = envace_gym.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "generated",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_generated", "studies/data/*.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# text stays as written: docutils' smart quotes would make "--split" an en dash and 'world' curly quotes in
# prose and tables (the CLI reference's help texts), where a reader copies them into a shell
smartquotes = False

html_theme = "furo"
html_title = f"envace-gym {release}"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_inherit_docstrings = False
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
nitpicky = True
# names in signatures that no inventory holds: other packages' internals, pydantic's field
# constraints as autodoc prints them, this package's private bases and its type aliases (RewardFn,
# Candidates: documented as data, printed unqualified in signatures)
nitpick_ignore_regex = [
    (r"py:.*", r"(inspect|anyio|mcp_types|tau2|vita|verl|annotated_types|datetime|_asyncio|re2)\..*"),
    (r"py:.*", r"\w+=.*|Environment|Tau2Task|Config|ServerState|RewardFn|Candidates"),
    (r"py:.*", r"an object providing a view on D's values"),
    (r"py:.*", r"envace_gym(\.\w+)*\._\w+"),
    # the CLI's App is typer's Typer (its signature is typer's, whose annotations no inventory holds): the
    # command-line internals page says what it adds instead of documenting typer's parameters
    (r"py:class", r"envace_gym\.cli\.App"),
]

# Links into other projects' docs need their inventories from the web. Building offline (this
# project's CI has no network), set ENVACE_DOCS_OFFLINE=1: the references into those projects are
# then left as plain text, and only they are exempt from the unresolved-reference check.
EXTERNAL = {
    "python": "https://docs.python.org/3",
    "gymnasium": "https://gymnasium.farama.org",
    "torch": "https://docs.pytorch.org/docs/stable",
    "transformers": "https://huggingface.co/docs/transformers/main/en",
    "numpy": "https://numpy.org/doc/stable",
    "pydantic": "https://docs.pydantic.dev/latest",
}
if os.environ.get("ENVACE_DOCS_OFFLINE"):
    intersphinx_mapping = {}
    nitpick_ignore_regex += [
        (
            r"py:.*",
            r"(gymnasium|gym|torch|transformers|numpy|np|pydantic|pandas|pd|matplotlib|peft|trl|datasets"
            r"|ray|typer|click|mcp|fastapi|starlette|uvicorn|h11|websockets|stable_baselines3|collections|typing"
            r"|pathlib|concurrent|asyncio|json|re|random|threading|subprocess|io|os|abc|enum|dataclasses"
            r"|contextlib|types|socket)\..*",
        ),
        (
            r"py:.*",
            r"(Path|Any|Callable|Iterator|Iterable|Sequence|Mapping|Literal|TypeVar|Self|IO|Enum"
            r"|BaseModel|int|str|float|bool|dict|list|tuple|set|bytes|object|None|Exception|ValueError"
            r"|RuntimeError|TypeError|KeyError|ConnectionError|TimeoutError|OSError|NotImplementedError)",
        ),
    ]
else:
    intersphinx_mapping = {name: (url, None) for name, url in EXTERNAL.items()}

# verl lives in its own venv (.venv-verl); its module is read against a stand-in here
autodoc_mock_imports = ["verl"]

# VitaBench's modules import its checkout (VITABENCH_ROOT) when imported; without one, autodoc reads
# them against a stand-in of its package.
if not os.environ.get("VITABENCH_ROOT"):
    import envace_gym.suites.vitabench.source as vitabench_source

    autodoc_mock_imports += ["vita"]
    vitabench_source.load = lambda: None
