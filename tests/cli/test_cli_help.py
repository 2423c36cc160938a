"""The command line's help is whole at 80 columns and in a pipe, and its reference page keeps what it says: an
option written in a help text stays ``--split``, never an en dash."""

import re

import pytest
import typer.main
from paths import DOCS
from typer.testing import CliRunner

from envace_gym.cli import build_app

APP = build_app()
COMMANDS = typer.main.get_command(APP).commands


def whole(text: str) -> str:
    """Help text with its wrapping undone (a line broken at a hyphen joined again)."""
    return " ".join(re.sub(r"-\n\s+", "-", text).split())


@pytest.mark.parametrize("columns", ["80", None])  # a narrow terminal, and a pipe (no COLUMNS: click's 80)
@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_whole_at_80_columns_and_in_a_pipe(monkeypatch, command, columns):
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(
        APP, [command, "--help"] if command else ["--help"], env={"COLUMNS": columns} if columns else {}
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in result.output
    text = whole(result.output)
    if command is None:
        for name, sub in COMMANDS.items():  # each summary whole
            assert whole(sub.help.split("\n\n")[0]) in text, name
        return
    for param in COMMANDS[command].params:
        for name in (*param.opts, *param.secondary_opts):
            assert name in result.output, name
        default = param.default
        if param.show_default and isinstance(default, str) and default:
            assert f"[default: {default}]" in text, (param.name, default)
    if command == "run":
        assert "runs/NAMESPACE/ENV/AGENT-DYNAMICS.jsonl" in text
    if command == "train":
        assert "--world-model-coef <float>" in result.output


def test_the_cli_reference_keeps_double_dashes_and_straight_quotes(tmp_path):
    """docutils' smart quotes (Sphinx's default) made "--split" in a help text an en dash; docs/conf.py turns
    them off. One page holding the generated CLI reference, built with the site's own configuration."""
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "import runpy\n"
        f"globals().update({{k: v for k, v in runpy.run_path({str(DOCS / 'conf.py')!r}).items() if k[0] != '_'}})\n"
        "html_theme = 'basic'\n"
    )
    (src / "index.md").write_text("# CLI\n\n```{include} _generated/cli.md\n```\n")
    Sphinx(str(src), str(src), str(tmp_path / "out"), str(tmp_path / "doctrees"), "html", status=None).build()
    page = (tmp_path / "out" / "index.html").read_text()
    assert "default split, or --split; 'all': every task" in page.replace("&#39;", "'")
    assert "\u2013" not in page and "\u2018" not in page and "\u2019" not in page


#: (command, option): a flag of the same name that means another thing there (compare's --agent is the
#: world model it scores, knn by default), or whose default is the command's own on purpose
OWN_FLAGS = {("compare", "--agent")}


def test_the_verbs_share_their_common_flags_text_and_default():
    """A setting that run, compare, eval and serve share has one definition (envace_gym.env_settings):
    the same help and the same default in each command that takes it."""
    from envace_gym.env_settings import shared_names

    names = {f"--{n.replace('_', '-')}" for n in shared_names()}
    seen: dict[str, dict[str, tuple]] = {}
    for command in ("run", "compare", "eval", "serve"):
        for param in COMMANDS[command].params:
            flag = param.opts[0]
            if flag in names and (command, flag) not in OWN_FLAGS:
                seen.setdefault(flag, {})[command] = (param.help, param.default)
    common = {flag: by_command for flag, by_command in seen.items() if len(by_command) > 1}
    assert {"--split", "--task-ids", "--limit", "--seed", "--overwrite", "--user", "--max-turns"} <= set(common)
    assert set(common["--token"]) == {"run", "serve"} and set(common["--judge"]) >= {"run", "eval", "serve"}
    for flag, by_command in common.items():
        assert len(set(by_command.values())) == 1, (flag, by_command)


#: the settings train takes from the env's (envace_gym.env_settings), and a default of its own where it has one
TRAIN_DEFAULTS = {"--dynamics": "rehearsed"}


def test_train_takes_the_env_settings_with_runs_help():
    run = {param.opts[0]: param for param in COMMANDS["run"].params}
    taken = {"--dynamics", "--p-real", "--simulator", "--task-ids", "--user", "--judge"}
    train = {param.opts[0]: param for param in COMMANDS["train"].params if param.opts[0] in taken}
    assert set(train) == taken
    for flag, param in train.items():
        assert param.help == run[flag].help, flag
        assert param.default == TRAIN_DEFAULTS.get(flag, run[flag].default), flag
