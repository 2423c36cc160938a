"""The package's modules import each other without a cycle (issue 26: the env knows no agents)."""

import ast
from pathlib import Path

import envace_gym

ROOT = Path(envace_gym.__file__).parent


def module_imports() -> dict[str, set[str]]:
    """Each module's module-level imports of other envace_gym modules (``from PKG import SUBMODULE``
    counts as an import of the submodule only: what the statement needs of the package is its folder)."""
    files = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                deps |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                submodules = {f"{base}.{alias.name}" for alias in node.names} & files.keys()
                deps |= submodules or {base}
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def test_no_import_cycle_and_the_env_knows_no_agents():
    graph = module_imports()
    assert "envace_gym.env" in graph and not any(d.startswith("envace_gym.agents") for d in graph["envace_gym.env"])
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):
            assert state.get(dep) != 1, "import cycle: " + " -> ".join(path[path.index(dep):] + [dep])
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
