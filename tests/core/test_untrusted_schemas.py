"""Tool schemas are untrusted input: no reference leaves the document, regexes run in linear time,
and size and depth are bounded, each refused with an error that names the tool."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema
import pytest

from envace_gym.core.errors import ErrorCode
from envace_gym.core.messages import ToolCall
from envace_gym.core.tools import MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, MAX_TOOLS, SchemaError, ToolSet


def tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": "", "parameters": parameters}}


def one_arg(schema: dict) -> dict:
    return {"type": "object", "properties": {"x": schema}, "required": ["x"]}


@pytest.fixture
def counting_server():
    """A local HTTP server that counts the requests it gets (it answers with a permissive schema)."""
    hits = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/schema.json", hits
    httpd.shutdown()


def test_file_and_http_refs_are_refused_and_never_fetched(tmp_path, counting_server):
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string", "description": "TOP SECRET"}')
    url, hits = counting_server
    for ref in (secret.as_uri(), url, "schema.json", "//127.0.0.1/x"):
        for key in ("$ref", "$dynamicRef"):
            with pytest.raises(SchemaError, match="'leaky'.*outside the schema"):
                ToolSet([tool("leaky", one_arg({key: ref}))])
            nested = one_arg({"type": "array", "items": {"anyOf": [{"type": "null"}, {key: ref}]}})
            with pytest.raises(SchemaError, match="'leaky'"):
                ToolSet([tool("leaky", nested)])
    assert hits == []


def test_in_document_refs_still_resolve():
    params = {
        "type": "object",
        "$defs": {"id": {"type": "string", "minLength": 2}},
        "properties": {"x": {"$ref": "#/$defs/id"}},
        "required": ["x"],
    }
    tools = ToolSet([tool("f", params)])
    assert tools.check(ToolCall("c1", "f", {"x": "ab"})) is None
    assert tools.check(ToolCall("c1", "f", {"x": "a"})).code == ErrorCode.INVALID_ARGUMENTS


def test_a_catastrophic_pattern_is_checked_in_linear_time():
    tools = ToolSet(
        [
            tool("f", one_arg({"type": "string", "pattern": "^([a-z]+)*$"})),
            tool(
                "g",
                {
                    "type": "object",
                    "patternProperties": {"^([a-z]+)*$": {"type": "integer"}},
                    "additionalProperties": False,
                },
            ),
        ]
    )
    start = time.perf_counter()
    error = tools.check(ToolCall("c1", "f", {"x": "a" * 5000 + "!"}))
    keys = tools.check(ToolCall("c1", "g", {"a" * 5000 + "!": 1}))
    assert time.perf_counter() - start < 2.0
    assert error.code == keys.code == ErrorCode.INVALID_ARGUMENTS
    assert tools.check(ToolCall("c1", "f", {"x": "abc"})) is None
    assert tools.check(ToolCall("c1", "g", {"abc": 1})) is None
    assert tools.check(ToolCall("c1", "g", {"abc": "one"})).code == ErrorCode.INVALID_ARGUMENTS


def test_a_pattern_re2_cannot_bound_is_refused():
    for pattern in (r"(a)\1", r"(?=a)a", r"(?<!b)a"):
        with pytest.raises(SchemaError, match="'f'.*RE2"):
            ToolSet([tool("f", one_arg({"type": "string", "pattern": pattern}))])


def test_size_depth_and_tool_count_are_bounded():
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_NODES)}}
    with pytest.raises(SchemaError, match="'wide'.*nodes"):
        ToolSet([tool("wide", wide)])
    deep: dict = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH + 10_000):  # deeper than the interpreter's recursion limit
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaError, match="'deep'.*levels"):
        ToolSet([tool("deep", one_arg(deep))])
    with pytest.raises(SchemaError, match="at most"):
        ToolSet([tool(f"t{i}", {"type": "object"}) for i in range(MAX_TOOLS + 1)])


def test_tool_sets_share_a_schemas_compiled_checks_and_each_keeps_its_own_terms():
    """A schema is checked and compiled once for every tool set that shows it; a closed tool set still
    refuses an argument its schema does not name, and a refused schema is refused every time."""
    params = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    first, again = ToolSet([tool("f", params)]), ToolSet([tool("g", dict(params))])
    closed = ToolSet([tool("f", params)], closed=True)
    assert first._validators["f"] is again._validators["g"] and first._fast["f"] is again._fast["g"]
    extra = {"n": 1, "m": 2}
    assert first.check(ToolCall("c", "f", extra)) is None
    assert closed.check(ToolCall("c", "f", extra)).code == ErrorCode.INVALID_ARGUMENTS
    assert again.check(ToolCall("c", "g", {"n": "one"})).code == ErrorCode.INVALID_ARGUMENTS
    for _ in range(2):
        with pytest.raises(jsonschema.exceptions.SchemaError):
            ToolSet([tool("bad", {"type": "object", "properties": {"n": {"type": 7}}})])
