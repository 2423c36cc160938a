"""Pages built from the code at each docs build, written under ``_generated/`` for pages to include:
the record schemas (from the record types' ``model_json_schema()``) and the CLI reference (from the
``envace-gym`` command itself: each command's help, arguments and options)."""

import json
from pathlib import Path

import typer.main

from envace_gym.cli import build_app
from envace_gym.play.records import CompareRecord, RunRecord

RECORDS = {"run-record": RunRecord, "compare-record": CompareRecord}


def _field_table(model) -> str:
    schema = model.model_json_schema()
    rows = ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    for name, prop in schema["properties"].items():
        kind = prop.get("type") or " or ".join(p.get("type", "?") for p in prop.get("anyOf", [])) or "any"
        required = "yes" if name in schema.get("required", ()) else "no"
        meaning = prop.get("description", "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {kind} | {required} | {meaning} |")
    return "\n".join(rows)


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _cli_reference() -> str:
    """A section per command: its help, then a table of its arguments and options."""
    group = typer.main.get_command(build_app())
    out = []
    for name, command in group.commands.items():
        out += [f"## `envace-gym {name}`", "", _cell(command.help or ""), ""]
        out += ["| argument or option | default | meaning |", "| --- | --- | --- |"]
        for param in command.params:
            if param.name == "help":
                continue
            names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
            if param.param_type_name == "argument":
                names = f"`{param.name.upper()}` (argument)"
            default = "required" if param.required else "" if param.default in (None, False, ()) else param.default
            out.append(f"| {names} | {_cell(default)} | {_cell(param.help or '')} |")
        out.append("")
    return "\n".join(out)


def write_generated(app) -> None:
    out = Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    for name, model in RECORDS.items():
        (out / f"{name}.schema.json").write_text(json.dumps(model.model_json_schema(), indent=2) + "\n")
        (out / f"{name}.md").write_text(_field_table(model) + "\n")
    (out / "cli.md").write_text(_cli_reference())


def setup(app):
    app.connect("builder-inited", write_generated)
    return {"parallel_read_safe": True}
