"""The one error contract for tool calls and tool responses, shared by every dynamics."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum


class ErrorCode(StrEnum):
    UNKNOWN_TOOL = "unknown_tool"
    MALFORMED_CALL = "malformed_call"
    INVALID_ARGUMENTS = "invalid_arguments"
    EXECUTION_ERROR = "execution_error"
    MALFORMED_RESPONSE = "malformed_response"
    NO_RECORDING = "no_recording"
    MALFORMED_JUDGEMENT = "malformed_judgement"
    LIMIT_EXCEEDED = "limit_exceeded"


@dataclass(frozen=True)
class ToolError:
    """A structured error that takes the place of a tool response."""

    code: ErrorCode
    message: str

    def as_value(self) -> dict:
        return {"error": {"code": str(self.code), "message": self.message}}

    def content(self) -> str:
        return json.dumps(self.as_value())


def error_code_of(value) -> str | None:
    """The error code carried by a tool response value, if it is an error response."""
    if isinstance(value, dict) and set(value) == {"error"} and isinstance(value["error"], dict):
        code = value["error"].get("code")
        return code if isinstance(code, str) else "error"
    return None


def error_code_of_text(text: str) -> str | None:
    """:func:`error_code_of` the value of a JSON text, parsed only when it may hold the key ``error``
    (written out, or behind a ``\\u`` escape)."""
    if "error" not in text and "\\u" not in text:
        return None
    return error_code_of(json.loads(text))
