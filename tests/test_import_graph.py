"""The package's modules import each other without a cycle (issue 26: the env knows no agents), lazy
imports inside functions included, and none is over 500 lines."""

import ast
from pathlib import Path

import envace_gym

ROOT = Path(envace_gym.__file__).parent
MAX_LINES = 500


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks, which are not imported at run time."""
    return {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for statement in block.body
        for node in ast.walk(statement)
    }


def module_imports() -> dict[str, set[str]]:
    """Each module's imports of other envace_gym modules, at module level or inside functions
    (``from PKG import SUBMODULE`` counts as an import of the submodule only: what the statement
    needs of the package is its folder)."""
    files = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        skipped = _type_checking_only(tree)
        deps = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
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
            assert state.get(dep) != 1, "import cycle: " + " -> ".join(path[path.index(dep) :] + [dep])
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_no_module_is_over_500_lines():
    sizes = {
        path.relative_to(ROOT.parent).as_posix(): len(path.read_text().splitlines()) for path in ROOT.rglob("*.py")
    }
    assert not {path: n for path, n in sizes.items() if n > MAX_LINES}
