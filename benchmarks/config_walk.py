"""How far ``run``'s and ``train``'s configs walk (issue 57): per config class, the modules (rooms) of
envace_gym that import it, and the calls into envace_gym/play/run.py from other modules.

Method (AST, no import): a module counts for a config when it imports the class by name
(``from ... import RunConfig``); a call into play/run.py is a call, in another module, of a name that
module imports from ``envace_gym.play.run``. ``python benchmarks/config_walk.py [REV]``: the working
tree, or the package at git revision REV (e.g. HEAD, before a change)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sources(rev: str | None) -> dict[str, str]:
    """Each module's path and text, in the working tree or at ``rev``."""
    if rev is None:
        return {p.relative_to(ROOT).as_posix(): p.read_text() for p in (ROOT / "envace_gym").rglob("*.py")}
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "envace_gym"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    git = ["git", "show"]
    return {n: subprocess.run([*git, f"{rev}:{n}"], cwd=ROOT, capture_output=True, text=True).stdout
            for n in names if n.endswith(".py")}  # fmt: skip


def walk(files: dict[str, str]) -> dict:
    rooms: dict[str, set[str]] = {"RunConfig": set(), "TrainConfig": set()}
    calls = 0
    for path, text in files.items():
        tree = ast.parse(text)
        from_run = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if alias.name in rooms:
                        rooms[alias.name].add(path)
                    if node.module == "envace_gym.play.run" and path != "envace_gym/play/run.py":
                        from_run.add(alias.asname or alias.name)
        calls += sum(isinstance(n, ast.Call) and ast.unparse(n.func) in from_run for n in ast.walk(tree))
    return {"rooms": {k: sorted(v) for k, v in rooms.items()}, "calls_into_play_run": calls}


if __name__ == "__main__":
    found = walk(sources(sys.argv[1] if len(sys.argv) > 1 else None))
    for name, modules in found["rooms"].items():
        print(f"{name}: {len(modules)} modules: {', '.join(modules)}")
    print(f"calls into play/run.py from other modules: {found['calls_into_play_run']}")
