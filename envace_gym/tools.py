"""Tool specs (OpenAI function schemas), their JSON Schema validation, and schema sampling."""

from __future__ import annotations

import string
from typing import Any

import fastjsonschema
import jsonschema
import numpy as np

from envace_gym.errors import ErrorCode, ToolError
from envace_gym.messages import ToolCall


class ToolSet:
    """The tools of one task: their schemas and one compiled validator per tool.

    ``schemas`` are the tools shown to the agent; ``hidden`` ones are not shown
    but may still be called (BFCL's held-out functions, which its backends answer
    before they are announced). ``closed``: the tools are functions with fixed
    keyword parameters, so an argument the schema does not name is rejected
    (``additionalProperties: false`` at the top level, whatever the shown schema says).
    """

    def __init__(self, schemas: list[dict], hidden: list[dict] = (), closed: bool = False):
        self.schemas, self._hidden, self._closed = schemas, list(hidden), closed
        self.functions = {s["function"]["name"]: s for s in [*schemas, *hidden]}
        self.by_name: dict[str, dict] = {}
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._fast: dict[str, Any] = {}
        for schema in self.functions.values():
            fn = schema["function"]
            params = fn.get("parameters") or {"type": "object", "properties": {}}
            self.by_name[fn["name"]] = params
            if closed and "additionalProperties" not in params:
                params = {**params, "additionalProperties": False}
            cls = jsonschema.validators.validator_for(params, default=jsonschema.Draft202012Validator)
            cls.check_schema(params)
            self._validators[fn["name"]] = cls(params)
            # fastjsonschema compiles the (suite-provided, trusted) schema to a Python function,
            # about 20x faster than jsonschema's interpreter; jsonschema words the errors
            self._fast[fn["name"]] = fastjsonschema.compile(params, use_default=False,
                                                            use_formats=False)

    # compiled validators are functions made at run time: a pickle holds the schemas and is
    # compiled again when loaded; a ToolSet is never changed, so copies share it
    def __reduce__(self):
        return ToolSet, (self.schemas, self._hidden, self._closed)

    def __copy__(self) -> ToolSet:
        return self

    def __deepcopy__(self, memo: dict) -> ToolSet:
        return self

    def __contains__(self, name: str) -> bool:
        return name in self._validators

    @property
    def names(self) -> list[str]:
        return list(self.by_name)

    def check(self, call: ToolCall) -> ToolError | None:
        """The structured error that rejects ``call``, or None when it may run."""
        if call.error is not None:
            return call.error
        if call.name not in self._validators:
            return ToolError(ErrorCode.UNKNOWN_TOOL, f"no tool named '{call.name[:100]}' is available")
        try:
            self._fast[call.name](call.arguments)
            return None
        except fastjsonschema.JsonSchemaValueException as fast_error:
            error = jsonschema.exceptions.best_match(self._validators[call.name].iter_errors(call.arguments))
            if error is None:
                return ToolError(ErrorCode.INVALID_ARGUMENTS, f"{call.name}: {fast_error.message[:300]}")
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            return ToolError(ErrorCode.INVALID_ARGUMENTS,
                             f"{call.name}: {where}: {error.message[:300]}")

    def sample_arguments(self, name: str, rng: np.random.Generator) -> dict:
        params = self.by_name[name]
        return sample_from_schema(params, rng, params)


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def sample_from_schema(schema: dict, rng: np.random.Generator, root: dict, depth: int = 0) -> Any:
    """A random value that satisfies the (simple, OpenAI-style) JSON Schema ``schema``."""
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if _resolve(s, root).get("type") != "null"] or schema[key]
            return sample_from_schema(options[int(rng.integers(len(options)))], rng, root, depth + 1)
    if "allOf" in schema:
        merged: dict = {}
        for part in schema["allOf"]:
            merged.update(_resolve(part, root))
        return sample_from_schema(merged, rng, root, depth + 1)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = [k for k in kind if k != "null"][0] if any(k != "null" for k in kind) else "null"
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        out = {}
        for key, sub in props.items():
            if key in required or (depth < 3 and rng.random() < 0.5):
                out[key] = sample_from_schema(sub, rng, root, depth + 1)
        return out
    if kind == "array":
        low = schema.get("minItems", 0)
        high = max(low, min(schema.get("maxItems", low + 3), low + 3)) if depth < 3 else low
        n = int(rng.integers(low, high + 1))
        return [sample_from_schema(schema.get("items", {}), rng, root, depth + 1) for _ in range(n)]
    if kind == "integer":
        low, high = schema.get("minimum", -100), schema.get("maximum", 1000)
        return int(rng.integers(int(low), int(high) + 1))
    if kind == "number":
        low, high = schema.get("minimum", -100.0), schema.get("maximum", 1000.0)
        return float(rng.uniform(low, high))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "null":
        return None
    low = schema.get("minLength", 1)
    high = max(low, schema.get("maxLength", 12))
    n = int(rng.integers(low, min(high, low + 12) + 1))
    return "".join(rng.choice(list(string.ascii_letters + string.digits), n))
