"""Parsing model text into tool calls and tool responses, and building chat messages.

Model output is data: it is parsed with ``json`` and nothing else, and every
failure becomes a :class:`~envace_gym.core.errors.ToolError` instead of an exception.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from envace_gym.core.errors import ErrorCode, ToolError

OPEN_CALL, CLOSE_CALL = "<tool_call>", "</tool_call>"
LEADING_THINK_RE = re.compile(r"^\s*(?:<think>.*?(?:</think>|\Z)\s*)+", re.DOTALL)
RESPONSE_TAG_RE = re.compile(r"^\s*<(tool_response|execution_result)>(.*?)</\1>\s*$", re.DOTALL)
MAX_JSON_DEPTH = 64
MAX_RESPONSE_CHARS = 256 * 1024
# json.dumps writes a value parsed from N characters of JSON in at most 12 N: an astral character
# becomes two \u escapes; other characters, numbers and separators grow less
MAX_DUMP_GROWTH = 12


@dataclass
class ToolCall:
    """One tool call as the agent wrote it; ``error`` is set when it cannot run."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: ToolError | None = None
    text: str | None = field(default=None, compare=False, repr=False)  # the <tool_call> block's, as written

    @property
    def text_chars(self) -> int | None:
        return None if self.text is None else len(self.text)

    def as_openai(self) -> dict:
        """The call in OpenAI's form; a malformed ``<tool_call>`` block keeps its text as written (``text``)."""
        out = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if self.error is not None and self.text is not None:
            out["text"] = self.text
        return out


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value, computed without recursion."""
    depth, stack = 0, [(value, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, (dict, list)):
            depth = max(depth, d)
            if d > MAX_JSON_DEPTH:
                return d
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, d + 1) for child in children)
    return depth


def _no_constant(name: str):
    raise ValueError(f"{name} is not standard JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: a number that overflows to infinity
        raise ValueError(f"{text} is out of range for a JSON number")
    return value


# one decoder: json.loads with options builds one per call
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def brackets_within_depth(text: str) -> bool:
    """Whether ``text`` opens no more brackets than ``MAX_JSON_DEPTH`` levels, so it cannot nest
    deeper (a count in C, cheaper than walking the parsed value)."""
    return text.count("{") + text.count("[") <= MAX_JSON_DEPTH


def loads_bounded(text: str) -> Any:
    """Standard JSON only (no NaN or Infinity, no number that overflows to either), nested at most
    ``MAX_JSON_DEPTH`` deep."""
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not brackets_within_depth(text) and json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def as_json(value: Any) -> Any:
    """``value`` as plain, standard JSON data (string keys, finite numbers), or ValueError.

    Structured actions come from Python, not text: a set, a NaN or an object inside
    them would break rendering, replay and records later, so they are refused here.
    """
    try:
        plain = loads_bounded(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as e:
        raise ValueError(f"not JSON data: {e}") from None
    if plain != value:  # json.dumps turned non-string keys (or tuples) into something else
        raise ValueError("not JSON data: keys must be strings and sequences lists")
    return plain


def dumps_safe(value: Any) -> str:
    """JSON text of ``value`` with every ``<`` written as ``\\u003c``: the same JSON value,
    but no chat-template tag or control token (``</tool_response>``, ``<|im_start|>``)
    can appear in it, whoever wrote the strings inside."""
    return escape_tags(json.dumps(value))


def escape_tags(json_text: str) -> str:
    """JSON text with every ``<`` written as ``\\u003c`` (the same value; see :func:`dumps_safe`)."""
    return json_text.replace("<", "\\u003c")


def _call_from_obj(obj: Any, call_id: str) -> ToolCall:
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI structured form
    if not isinstance(obj, dict):
        return ToolCall(
            call_id,
            "",
            error=ToolError(ErrorCode.MALFORMED_CALL, "a tool call must be a JSON object with 'name' and 'arguments'"),
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(call_id, "", error=ToolError(ErrorCode.MALFORMED_CALL, "the tool call has no 'name' string"))
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = loads_bounded(args) if args.strip() else {}
        except ValueError as e:
            return ToolCall(
                call_id,
                name,
                error=ToolError(ErrorCode.MALFORMED_CALL, f"the arguments of '{name}' are not valid JSON: {e}"),
            )
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCall(
            call_id, name, error=ToolError(ErrorCode.MALFORMED_CALL, f"the arguments of '{name}' must be a JSON object")
        )
    return ToolCall(call_id, name, args)


def tool_call_blocks(text: str) -> tuple[list[str], str]:
    """The bodies of the ``<tool_call>`` blocks in ``text`` (an unclosed one runs to the end), and
    the text around them. Found with ``str.find``: a regex scanning lazily for the closing tag is
    several times slower."""
    bodies, rest, pos = [], [], 0
    while (start := text.find(OPEN_CALL, pos)) != -1:
        rest.append(text[pos:start])
        start += len(OPEN_CALL)
        end = text.find(CLOSE_CALL, start)
        end = len(text) if end == -1 else end
        bodies.append(text[start:end])
        pos = end + len(CLOSE_CALL)
    rest.append(text[pos:])
    return bodies, "".join(rest)


def parse_act(action: Any, id_prefix: str = "call") -> tuple[str, list[ToolCall]]:
    """Split an act action (raw text, or an OpenAI-style assistant dict) into text and calls."""
    structured: list = []
    if isinstance(action, dict):
        content = action.get("content")
        text = content if isinstance(content, str) else ""
        structured = action.get("tool_calls") or []
        if not isinstance(structured, list):
            structured = [structured]
    elif isinstance(action, str):
        text = action
    else:
        text = ""
        structured = [None]  # becomes one malformed call
    calls: list[ToolCall] = []
    for obj in structured:
        call_id = obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None
        call_id = call_id or f"{id_prefix}_{len(calls)}"
        try:
            obj = as_json(obj)
        except ValueError as e:
            calls.append(ToolCall(call_id, "", error=ToolError(ErrorCode.MALFORMED_CALL, f"the tool call is {e}")))
            continue
        calls.append(_call_from_obj(obj, call_id))
    bodies, text = tool_call_blocks(text)
    for body in bodies:
        call_id = f"{id_prefix}_{len(calls)}"
        try:
            call = _call_from_obj(loads_bounded(body.strip()), call_id)
        except ValueError as e:
            error = ToolError(ErrorCode.MALFORMED_CALL, f"the <tool_call> block is not valid JSON: {e}")
            call = ToolCall(call_id, "", error=error)
        call.text = body
        calls.append(call)
    return text.strip(), calls


def parse_rehearsal(action: Any, max_chars: int = MAX_RESPONSE_CHARS) -> tuple[Any, ToolError | None]:
    """Parse a rehearse action into a JSON object or array, or a structured error.

    Leading ``<think>`` blocks are dropped; one inside a JSON string is data and stays.
    """
    if isinstance(action, (dict, list)):
        try:
            action = json.dumps(as_json(action))
        except ValueError as e:
            return None, ToolError(ErrorCode.MALFORMED_RESPONSE, f"the tool response is {e}")
    if not isinstance(action, str):
        return None, ToolError(ErrorCode.MALFORMED_RESPONSE, "a tool response must be text")
    if len(action) > max_chars:
        return None, ToolError(ErrorCode.MALFORMED_RESPONSE, f"the tool response exceeds {max_chars} characters")
    text = LEADING_THINK_RE.sub("", action)
    m = RESPONSE_TAG_RE.match(text)
    if m:
        text = m.group(2)
    try:
        value = loads_bounded(text.strip())
    except ValueError as e:
        return None, ToolError(ErrorCode.MALFORMED_RESPONSE, f"the tool response is not valid JSON: {e}")
    if not isinstance(value, (dict, list)):
        return None, ToolError(ErrorCode.MALFORMED_RESPONSE, "the tool response must be a JSON object or array")
    return value, None


def rehearsal_content(action: Any, max_chars: int = MAX_RESPONSE_CHARS) -> tuple[str, bool]:
    """The tool message's content for the rehearse action ``action``, and whether it parsed.

    A rehearsal that is a bare JSON object or array with no ``<`` in it is kept as written
    (stripped), so later prompts hold the very text, and tokens, the model generated: prompts
    grow append-only and prefix caches stay valid. Any other is changed once, here, and the
    transcript shows the change: one inside a think block or response tag, or holding a ``<``,
    becomes canonical JSON (``<`` is escaped when it is stored); one that does not parse, the
    structured ``malformed_response`` error.
    """
    value, error = parse_rehearsal(action, max_chars)
    if error is not None:
        return error.content(), False
    if isinstance(action, str) and "<" not in action:
        return action.strip(), True
    return json.dumps(value), True


def format_tool_call(name: str, arguments: dict) -> str:
    """The text form of one tool call, as agents write it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def assistant_message(text: str, calls: list[ToolCall]) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = [c.as_openai() for c in calls]
    return msg


def tool_message(call: ToolCall, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


def transcript(messages: list[dict]) -> str:
    """Messages as plain text, one line each: ``[role] content name(arguments) ...``."""
    lines = []
    for m in messages:
        calls = " ".join(
            f"{c['function']['name']}({json.dumps(c['function']['arguments'])})" for c in m.get("tool_calls", [])
        )
        lines.append(f"[{m['role']}] {m.get('content') or ''} {calls}".rstrip())
    return "\n".join(lines)
