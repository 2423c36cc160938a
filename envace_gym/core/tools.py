"""Tool specs (OpenAI function schemas), their JSON Schema validation, and schema sampling.

A schema comes from a suite, a tool server or a task file: untrusted. Before any validator
sees it, :func:`audit_schema` bounds its size and depth, refuses every ``$ref`` that leaves
the document (no file is read and no URL fetched, ever) and compiles every regular
expression with RE2, whose matching time is linear in the input; a tool whose schema holds
a pattern is validated by jsonschema with RE2 patterns, never by Python's backtracking ``re``.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import fastjsonschema
import jsonschema
import numpy as np
import re2
from referencing import Registry

from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.messages import ToolCall

MAX_TOOLS = 1024  # tools in one tool set
MAX_SCHEMA_NODES = 20_000  # objects, arrays and values in one tool's schema
MAX_SCHEMA_DEPTH = 64
REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


class SchemaError(ValueError):
    """A tool schema that is refused when its tool set is built; the message names the tool."""


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str):
    """``pattern`` compiled by RE2 (linear-time matching); ``re2.error`` if RE2 cannot express it."""
    return re2.compile(pattern, _RE2_OPTIONS)


def audit_schema(name: str, schema: Any) -> bool:
    """Refuse (:class:`SchemaError`) a schema that is too large or deep, holds a reference outside
    the document, or a pattern RE2 cannot compile; returns whether it holds any pattern. The walk
    is iterative, so nesting cannot exhaust the stack."""
    stack, nodes, patterns = [(schema, 0)], 0, False
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES or depth > MAX_SCHEMA_DEPTH:
            raise SchemaError(
                f"tool {name!r}: its schema exceeds {MAX_SCHEMA_NODES} nodes or {MAX_SCHEMA_DEPTH} levels"
            )
        if isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        for key in REF_KEYS:  # a key of "properties" maps to a schema (a dict), never to a string
            ref = node.get(key)
            if isinstance(ref, str) and not ref.startswith("#"):
                raise SchemaError(
                    f"tool {name!r}: {key} {ref[:200]!r} points outside the schema; only "
                    "in-document references (#/...) are allowed, and none is ever fetched"
                )
        found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            found += list(node["patternProperties"])
        for pattern in found:
            patterns = True
            try:
                compile_pattern(pattern)
            except re2.error as e:
                raise SchemaError(
                    f"tool {name!r}: pattern {pattern[:200]!r} is refused: RE2, which bounds "
                    f"matching time, cannot compile it ({e})"
                ) from None
        stack.extend((value, depth + 1) for value in node.values())
    return patterns


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not compile_pattern(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance[:100]!r} does not match {pattern[:100]!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if compile_pattern(pattern).search(key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    patterns = [compile_pattern(p) for p in schema.get("patternProperties", {})]
    extra = [k for k in instance if k not in schema.get("properties", {}) and not any(p.search(k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for key in extra:
            yield from validator.descend(instance[key], additional, path=key)
    elif not additional and extra:
        yield jsonschema.ValidationError(f"additional properties are not allowed ({', '.join(map(repr, extra[:5]))})")


def _refuse_remote(uri: str):
    raise SchemaError(f"remote schema {uri[:200]!r} is never fetched")


def _compile(params: dict, patterns: bool) -> tuple[jsonschema.protocols.Validator, Any]:
    """jsonschema's validator for ``params``, resolving in-document references only (with RE2 for
    ``pattern``, ``patternProperties`` and ``additionalProperties`` when it holds patterns), and
    fastjsonschema's compiled function for a schema without patterns (else None)."""
    cls = jsonschema.validators.validator_for(params, default=jsonschema.Draft202012Validator)
    cls.check_schema(params)
    if patterns:
        cls = jsonschema.validators.extend(
            cls,
            {
                "pattern": _pattern,
                "patternProperties": _pattern_properties,
                "additionalProperties": _additional_properties,
            },
        )
        return cls(params, registry=Registry()), None
    # fastjsonschema compiles the audited schema to a Python function, about 20x faster than
    # jsonschema's interpreter; jsonschema words the errors. Its regexes are Python's, so a
    # schema with patterns is left to jsonschema with RE2.
    fast = fastjsonschema.compile(
        params,
        use_default=False,
        use_formats=False,
        handlers=dict.fromkeys(("http", "https", "file", "ftp", "data"), _refuse_remote),
    )
    return cls(params, registry=Registry()), fast


@lru_cache(maxsize=4096)
def _compiled(text: str, patterns: bool) -> tuple[jsonschema.protocols.Validator, Any]:
    """:func:`_compile` of a schema given as its JSON text, shared by every tool set that shows it:
    BFCL's entries combine the same few dozen functions (``benchmarks/tool_sets.py``)."""
    return _compile(json.loads(text), patterns)


def _validators_for(params: dict, patterns: bool) -> tuple[jsonschema.protocols.Validator, Any]:
    """The (cached) validators of an audited schema; one that is not JSON is compiled uncached."""
    try:
        text = json.dumps(params, allow_nan=False)
    except (TypeError, ValueError):
        return _compile(params, patterns)
    return _compiled(text, patterns)


class ToolSet:
    """The tools of one task: their schemas and one compiled validator per tool.

    ``schemas`` are the tools shown to the agent; ``hidden`` ones are not shown
    but may still be called (BFCL's held-out functions, which its backends answer
    before they are announced). ``closed``: the tools are functions with fixed
    keyword parameters, so an argument the schema does not name is rejected
    (``additionalProperties: false`` at the top level, whatever the shown schema says).
    Every schema passes :func:`audit_schema` first; a refused one raises :class:`SchemaError`.
    """

    def __init__(self, schemas: list[dict], hidden: Sequence[dict] = (), closed: bool = False):
        self.schemas, self._hidden, self._closed = schemas, list(hidden), closed
        if len(schemas) + len(self._hidden) > MAX_TOOLS:
            raise SchemaError(f"{len(schemas) + len(self._hidden)} tools: at most {MAX_TOOLS} in one tool set")
        self.functions = {s["function"]["name"]: s for s in [*schemas, *hidden]}
        self.by_name: dict[str, dict] = {}
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._fast: dict[str, Any] = {}
        for schema in self.functions.values():
            fn = schema["function"]
            params = fn.get("parameters") or {"type": "object", "properties": {}}
            patterns = audit_schema(fn["name"], params)
            self.by_name[fn["name"]] = params
            if closed and "additionalProperties" not in params:
                params = {**params, "additionalProperties": False}
            self._validators[fn["name"]], fast = _validators_for(params, patterns)
            if fast is not None:
                self._fast[fn["name"]] = fast

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
        fast, detail = self._fast.get(call.name), ""
        if fast is not None:
            try:
                fast(call.arguments)
                return None
            except fastjsonschema.JsonSchemaValueException as fast_error:
                detail = fast_error.message[:300]
        error = jsonschema.exceptions.best_match(self._validators[call.name].iter_errors(call.arguments))
        if error is None:
            return None if fast is None else ToolError(ErrorCode.INVALID_ARGUMENTS, f"{call.name}: {detail}")
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        return ToolError(ErrorCode.INVALID_ARGUMENTS, f"{call.name}: {where}: {error.message[:300]}")

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
