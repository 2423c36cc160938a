"""Pages built from the code at each docs build: the record schemas and the CLI's click command.

The schemas are written under ``_generated/`` (a page includes them) from the record types'
``model_json_schema()``; ``cli`` is the command the CLI reference (sphinx-click) documents.
"""

import json
from pathlib import Path

import typer.main

from envace_gym.cli import build_app
from envace_gym.records import CompareRecord, RunRecord

cli = typer.main.get_command(build_app())
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


def write_records(app) -> None:
    out = Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    for name, model in RECORDS.items():
        (out / f"{name}.schema.json").write_text(json.dumps(model.model_json_schema(), indent=2) + "\n")
        (out / f"{name}.md").write_text(_field_table(model) + "\n")


def setup(app):
    app.connect("builder-inited", write_records)
    return {"parallel_read_safe": True}
