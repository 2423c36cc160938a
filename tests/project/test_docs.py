"""What the README and the documentation show runs: each Python block as a script, each console
block's commands in a shell, from a scratch folder that sees the repository's examples. A block shown
only is captioned ``Not run by the tests: REASON`` in its page, visibly. ``make``, ``pip`` and ``git``
lines (setting up, not using) are shown only."""

from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from paths import DOCS, ROOT

PAGES = [ROOT / "README.md"] + sorted(
    p for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0].startswith("_") and "data" not in p.parts
)
SHOWN_ONLY = re.compile(r"Not run by the tests( as shown)?: \S")
SETUP = ("make ", "pip ", "git ", "sudo ", "apt-get ", "python3 -m venv", "cd ")
VITABENCH = os.path.isfile(os.path.join(os.environ.get("VITABENCH_ROOT", ""), "src", "vita", "__init__.py"))


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    caption: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """A shell block's commands: ``$ `` lines in a console block (``\\`` continues one), every
        line in a bash block; comments and setup lines left out."""
        text = re.sub(r"\\\n\s*", " ", self.code)
        lines = [ln.strip() for ln in text.splitlines()]
        if self.lang == "console":
            lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
        return [ln for ln in lines if ln and not ln.startswith("#") and not ln.startswith(SETUP)]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page: plain fences and MyST ``{code-block}`` directives (their
    ``:caption:`` read)."""
    out = []
    for token in MarkdownIt("commonmark").parse(page.read_text()):
        if token.type != "fence":
            continue
        info, code, caption = token.info.split(), token.content, ""
        if info and info[0] in ("{code-block}", "{code}"):
            info = info[1:]
            options = re.findall(r"^:(\w+):\s*(.*)$", code, flags=re.M)
            caption = dict(options).get("caption", "")
            code = re.sub(r"^:\w+:.*\n", "", code, flags=re.M)
        if info and not info[0].startswith("{"):
            out.append(Block(page, token.map[0] + 1, info[0], code, caption))
    return out


ALL = [b for page in PAGES for b in blocks(page)]
RUN = [b for b in ALL if b.lang in ("python", "console", "bash") and not SHOWN_ONLY.search(b.caption)]


def test_the_pages_hold_blocks_and_every_shown_only_block_says_why():
    assert len(PAGES) > 20 and len(RUN) > 30
    for b in ALL:
        if "not run" in b.caption.lower():
            assert SHOWN_ONLY.search(b.caption), f"{b.name}: say why it is not run: {b.caption!r}"


def test_the_readme_is_short_begins_with_the_two_commands_and_no_page_points_outside():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 160
    first = blocks(ROOT / "README.md")[0]
    assert first.line <= 4 and [ln.split()[:2] for ln in first.code.splitlines()] == [["make", "run"], ["make", "test"]]
    for page in PAGES:
        text = page.read_text()
        assert "../shared" not in text and "DESIGN.md" not in text, f"{page}: the contract is in docs/"


def test_docstring_examples_run():
    """Every ``>>>`` example of the package runs (``# doctest: +SKIP`` marks one that needs a server)."""
    package = ROOT / "envace_gym"
    names = [
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted(package.rglob("*.py"))
        if ">>>" in p.read_text()
    ]
    attempted = 0
    for name in names:
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, name
        attempted += result.attempted
    assert attempted >= 4


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=[b.name for b in RUN])
def test_block_runs(block: Block, tmp_path):
    if "VITABENCH_ROOT" in block.code and not VITABENCH:
        pytest.skip(f"no VitaBench checkout at VITABENCH_ROOT={os.environ.get('VITABENCH_ROOT')}")
    for folder in ("examples", "benchmarks", "docs"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    if block.lang == "python":
        script = tmp_path / "block.py"
        script.write_text(block.code)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", "\n".join(block.commands())]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"{block.name} failed:\n{block.code}\n--- output:\n{output}"
