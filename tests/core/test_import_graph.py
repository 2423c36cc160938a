"""The package's modules import each other without a cycle (issue 26: the env knows no agents), lazy
imports inside functions included, and each layer imports only its own and the layers below it."""

import ast
from pathlib import Path

import envace_gym

ROOT = Path(envace_gym.__file__).parent


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


#: the package's layers, bottom first, by top-level module or package: each may import its own layer and
#: the ones below it, never one above (lazy imports included)
LAYERS = (
    (
        "core",
        {
            "core", "spaces", "fidelity", "config_fields", "chat_template", "cache", "openai_client", "specs",
            "redaction", "rehearse_prompts", "routing", "dynamics", "rewards", "moved",
        },
    ),
    ("suites", {"suites"}),
    ("env", {"env", "wrappers"}),
    ("agents", {"agents"}),
    ("playing", {"registration", "env_settings", "play", "envs", "__init__", "reporting.figures"}),
    ("above", {"training", "evaluation", "integrations", "fixtures", "reporting", "cli"}),
)  # fmt: skip
#: the upward imports allowed, each with its reason
UPWARD = {
    # `run --url` plays the env that `serve` serves, through the OpenEnv client
    ("envace_gym.play.run", "envace_gym.integrations.openenv.client"),
}


def _layer(module: str) -> int:
    """The layer of ``module``: its own entry (``reporting.figures``), else its top-level module's."""
    parts = module.split(".")
    own = ".".join(parts[1:3])
    top = parts[1] if len(parts) > 1 else "__init__"
    found = [i for i, (_, names) in enumerate(LAYERS) if own in names]
    found = found or [i for i, (_, names) in enumerate(LAYERS) if top in names]
    assert found, f"{module} is in no layer: add {top!r} to LAYERS"
    return found[0]


def test_each_layer_imports_only_its_own_and_those_below():
    upward = {
        (module, dep) for module, deps in module_imports().items() for dep in deps if _layer(dep) > _layer(module)
    }
    assert upward <= UPWARD, sorted(upward - UPWARD)


ABOVE_SUITES = ("env", "registration", "agents", "training", "play", "evaluation", "integrations", "cli")


def test_suites_sit_below_the_env():
    """A suite is a world: it knows the core (tasks, tools, worlds, graders), never the env that plays it,
    the ids that register it, the agents or the training (lazy imports included)."""
    graph = module_imports()
    above = {f"envace_gym.{name}" for name in ABOVE_SUITES}
    wrong = {
        module: sorted(d for d in deps if d in above or d.rpartition(".")[0] in above or d.startswith(tuple(above)))
        for module, deps in graph.items()
        if module.startswith("envace_gym.suites")
    }
    assert not {module: deps for module, deps in wrong.items() if deps}


#: where the package makes envs with gym.make: each one plays episodes (or is a user's own factory read
#: once); a suite's tasks and splits come from registration.suite, never from a probe env
GYM_MAKES = {
    "envace_gym/evaluation/evaluate.py": 1,  # the world-model table's episodes
    "envace_gym/integrations/openenv/server.py": 1,  # the served env's catalog (its tools for POST /mcp)
    "envace_gym/integrations/trl/prompts.py": 1,  # the dataset's openings
    "envace_gym/integrations/trl/tool_loop.py": 2,  # the tool loop's envs and the probe of their tools
    "envace_gym/integrations/trl/episodes.py": 2,  # the rollout's envs
    "envace_gym/integrations/verl.py": 2,  # the dataset's openings, the agent loop's envs
    "envace_gym/integrations/verifiers.py": 1,  # the envs that play its tasks' episodes
    "envace_gym/registration.py": 1,  # registration.suite on an id made by a user's own factory
    "envace_gym/play/loop.py": 2,
    "envace_gym/training/sft.py": 1,  # the oracle's demonstrations
    "envace_gym/training/trainer.py": 2,  # the rollout envs and the held-out env
}


def test_gym_make_only_where_episodes_are_played():
    counts = {}
    for path in ROOT.rglob("*.py"):
        calls = [
            node
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "gym.make"
        ]
        if calls:
            counts[path.relative_to(ROOT.parent).as_posix()] = len(calls)
    assert counts == GYM_MAKES


def _calls_of(tree: ast.AST, attribute: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attribute
    ]


#: where the package asks whether tasks have gold: the decision of the default reward is made once
HAS_GOLD = {
    "envace_gym/rewards.py",  # default_reward: the one decision
    "envace_gym/core/grader.py",  # the grader's own scoring
    "envace_gym/core/suite.py",  # Suite.has_gold, its grader's
    "envace_gym/cli/envs.py",  # `envs --tasks` lists each task's gold calls
    "envace_gym/evaluation/evaluate.py",  # the world-model table's actor: the oracle where gold exists
}


def test_one_default_reward():
    """The default reward is decided by rewards.default_reward alone: a second decision would ask whether
    tasks have gold (or name a dynamics' default reward) somewhere else."""
    asking = {
        path.relative_to(ROOT.parent).as_posix()
        for path in ROOT.rglob("*.py")
        if _calls_of(ast.parse(path.read_text()), "has_gold")
    }
    assert asking == HAS_GOLD
    defaults = {
        path.relative_to(ROOT.parent).as_posix()
        for path in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "default_reward" and isinstance(node.ctx, ast.Load)
    }
    assert defaults <= {"envace_gym/rewards.py", "envace_gym/play/run.py"}  # the note naming it


#: functions that both reset and step an env: the one episode loop, and those that step an env for
#: someone else (an adapter answers its caller's requests; a private rehearsal steps its own fork)
STEPPERS = {
    "envace_gym/play/loop.py:play",  # the one episode loop
}


def test_one_episode_loop():
    """Every episode the package plays to its end goes through play.loop.play: no other function resets an
    env and then steps it in a loop."""
    found = set()
    for path in ROOT.rglob("*.py"):
        for func in ast.walk(ast.parse(path.read_text())):
            if not isinstance(func, ast.FunctionDef):
                continue
            loops = [node for node in ast.walk(func) if isinstance(node, (ast.While, ast.For))]
            stepped = any(_calls_of(loop, "step") for loop in loops)
            if stepped and _calls_of(func, "reset"):
                found.add(f"{path.relative_to(ROOT.parent).as_posix()}:{func.name}")
    assert found == STEPPERS


def _literals(node: ast.expr) -> set[str]:
    """The strings of a literal operand: a string, or a tuple, list or set of them."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)}


def dynamics_comparisons(tree: ast.AST) -> list[str]:
    """The comparisons in ``tree`` that decide by a dynamics' name or its ``answers``: a dynamics name (or
    an answerer) as a literal compared with an ``.answers`` attribute or with an operand that names a
    dynamics (``dynamics``, ``.dynamics``, ``DYNAMICS[...]``)."""
    from envace_gym.dynamics import ANSWERERS, DYNAMICS

    names = {*DYNAMICS, *ANSWERERS}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        answers = any(isinstance(o, ast.Attribute) and o.attr == "answers" for o in operands)
        named = any(_literals(o) & names for o in operands)
        about = any("dynamics" in ast.unparse(o).lower() for o in operands if not _literals(o))
        if named and (answers or about):
            found.append(ast.unparse(node))
    return found


def test_no_caller_decides_by_a_dynamics_name():
    """What a dynamics does is its registry entry's to say (envace_gym/dynamics.py): no other module
    compares a dynamics' name (``dynamics == "rehearsed"``) or its ``answers`` string."""
    found = {
        path.relative_to(ROOT.parent).as_posix(): comparisons
        for path in ROOT.rglob("*.py")
        if path.name != "dynamics.py" or path.parent != ROOT
        for comparisons in [dynamics_comparisons(ast.parse(path.read_text()))]
        if comparisons
    }
    assert not found


def test_the_guard_finds_a_dynamics_name_compared():
    code = 'a = config.dynamics == "rehearsed"\nb = get(name).answers in ("world",)\nc = c["source"] == "real"'
    assert dynamics_comparisons(ast.parse(code)) == [
        "config.dynamics == 'rehearsed'",
        "get(name).answers in ('world',)",
    ]
