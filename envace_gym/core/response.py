"""What a tool call answers (:class:`Response`), and running one within :class:`~envace_gym.core.limits.Limits`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.limits import BudgetExceeded, Limits, run_bounded, run_isolated
from envace_gym.core.messages import brackets_within_depth, loads_bounded
from envace_gym.redaction import redact

if TYPE_CHECKING:
    from envace_gym.core.suite import Suite, World

#: The ``native`` of a limit error whose call ran out of time.
OVER_TIME = "over_time"


@dataclass(frozen=True)
class Response:
    """A tool response: JSON text of an object or array, or a structured error.

    ``native`` is the suite's own rendering of the same result (for example the
    string tau2's environment would have returned), kept for faithful evaluation.
    """

    text: str | None = None
    error: ToolError | None = None
    native: Any = None

    @property
    def content(self) -> str:
        return self.error.content() if self.error else self.text or ""

    @classmethod
    def from_native(cls, native: Any, decode_scalars: bool = False) -> Response:
        """A suite's own result as a JSON object or array: objects and arrays as they are, JSON
        text parsed, the rest wrapped as ``{"result": ...}``: the text of a JSON scalar as it is
        (tau2's ``"4.0"``), or with ``decode_scalars`` its value (VitaBench's ``'"32.0"'``, its
        encoding of the float 32.0, as ``{"result": "32.0"}``, the string its agent reads)."""
        value = native
        if isinstance(native, str):
            try:
                value = json.loads(native)
            except ValueError:
                pass
        if not isinstance(value, (dict, list)):
            value = {"result": value if decode_scalars else native}
        return cls(text=json.dumps(value), native=native)


class DumpedJSON(str):
    """Text that ``json.dumps`` wrote for a dict or list, as a world's own code marks it: JSON of an
    object or array by construction, so :func:`checked` parses it only when it may hold NaN or
    Infinity (``json.dumps`` writes both) or have enough brackets to nest too deep."""


def _error_response(code: ErrorCode, message: str, native: Any = None) -> Response:
    message = redact(message)[:1000]
    return Response(error=ToolError(code, message), native=native or f"Error: {message}")


def redacted(response: Response) -> Response:
    """``response`` with no secret in its text, native text or error message
    (:func:`~envace_gym.redaction.redact`)."""
    text = response.text if response.text is None else redact(response.text)
    native = redact(response.native) if isinstance(response.native, str) else response.native
    error = response.error and ToolError(response.error.code, redact(response.error.message))
    if text is response.text and native is response.native and error == response.error:
        return response
    return Response(text=text, error=error, native=native)


def execute(
    suite: Suite, world: World, name: str, arguments: dict, limits: Limits, requestor: str = "assistant"
) -> Response:
    """One schema-valid call on ``world`` within ``limits``; whatever happens, a Response.

    A call over its time budget answers ``limit_exceeded`` (its ``native`` is
    :data:`OVER_TIME`; the world may hold part of its effects unless the tool is
    stateless); an exception, a result that is not a Response, or one whose content
    is not a JSON object or array answers ``execution_error``; an oversized one
    ``limit_exceeded``. ``suite.isolates`` says which calls run in a child process.
    """

    def run():
        return world.execute(name, arguments, requestor)

    error = _error_response
    try:
        if suite.isolates(name, arguments):
            response = run_isolated(run, limits.call_seconds, limits.call_memory_bytes)
        else:
            response = run_bounded(run, limits.call_seconds)
    except BudgetExceeded:
        return error(ErrorCode.LIMIT_EXCEEDED, f"{name} ran past its time budget of {limits.call_seconds} s", OVER_TIME)
    except MemoryError:
        return error(ErrorCode.LIMIT_EXCEEDED, f"{name} ran past its memory budget")
    except Exception as e:
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: {type(e).__name__}: {e}")
    if not isinstance(response, Response) or (response.text is None) == (response.error is None):
        return error(
            ErrorCode.EXECUTION_ERROR,
            f"{name}: the world answered {type(response).__name__}, not a Response with text or an error",
        )
    if response.error is None:
        return checked(name, response, limits)
    native = response.native if isinstance(response.native, (str, type(None))) else repr(response.native)
    if native is not None and len(native) > limits.response_chars:  # an error keeps at most the limit
        response = Response(error=response.error, native=native[: limits.response_chars])
    return redacted(response)  # a tool's error text may quote what it was given (a URL with its key)


def _plainly_standard(text: str) -> bool:
    return "NaN" not in text and "Infinity" not in text and brackets_within_depth(text)


def checked(name: str, response: Response, limits: Limits, who: str = "the world's") -> Response:
    """``response`` if its text is standard JSON (an object or array) within ``limits.response_chars``,
    else the ``limit_exceeded`` or ``execution_error`` that replaces it (real and replayed alike)."""
    error = _error_response
    if not isinstance(response.text, str):
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: {who} response is not text")
    if len(response.text) > limits.response_chars:
        return error(ErrorCode.LIMIT_EXCEEDED, f"{name}: the response exceeds {limits.response_chars} characters")
    if type(response.text) is DumpedJSON and _plainly_standard(response.text):
        return response
    try:
        value = loads_bounded(response.text)
    except ValueError as e:
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: {who} response is not valid JSON: {e}")
    if not isinstance(value, (dict, list)):
        return error(ErrorCode.EXECUTION_ERROR, f"{name}: {who} response is not a JSON object or array")
    return response
