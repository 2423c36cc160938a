"""BFCL function docs as OpenAI function schemas with plain JSON Schema parameters."""

from __future__ import annotations

import re

# BFCL's Python-flavoured type names and their JSON Schema counterparts; "any" has no constraint
JSON_TYPES = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
    "tuple": "array",
    "any": None,
    "integer_or_string": ["integer", "string"],
}  # not BFCL's: see multi_turn.corrected
KEPT = ("description", "default", "enum", "required", "format", "maximum", "minimum", "minItems", "maxItems")


def json_schema(node: dict) -> dict:
    """One BFCL parameter node (or a whole ``parameters`` block) as JSON Schema."""
    out: dict = {}
    kind = node.get("type")
    if kind is not None:
        if kind not in JSON_TYPES:
            raise ValueError(f"BFCL type {kind!r} has no JSON Schema counterpart")
        if JSON_TYPES[kind] is not None:
            out["type"] = JSON_TYPES[kind]
    for key in KEPT:
        if key in node:
            out[key] = node[key]
    if "properties" in node:
        out["properties"] = {name: json_schema(sub) for name, sub in node["properties"].items()}
    if "items" in node:
        out["items"] = json_schema(node["items"])
    return out


def tool_name(bfcl_name: str) -> str:
    """The name a chat API accepts (``[a-zA-Z0-9_-]``): BFCL's dotted names get underscores."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", bfcl_name)[:64]


def openai_schema(doc: dict) -> dict:
    """A BFCL function doc as an OpenAI tool schema (its ``response`` part is not kept)."""
    params = json_schema(doc.get("parameters") or {"type": "dict", "properties": {}})
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    return {
        "type": "function",
        "function": {"name": tool_name(doc["name"]), "description": doc.get("description", ""), "parameters": params},
    }
