"""The worlds of MCP suites: a live server session, a recorded trajectory, and none at all."""

from __future__ import annotations

import copy
import hashlib
import json
import weakref

from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from pydantic import ValidationError

from envace_gym.core.episode import recorded, recording_key
from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.response import Response
from envace_gym.core.suite import World
from envace_gym.suites.mcp.runtime import InProcess, Runtime, ServerError


class ForkError(RuntimeError):
    """A world that cannot be forked: an opaque server, or one whose replay disagreed."""


def response_of(result: CallToolResult) -> Response:
    """A ``tools/call`` result as a response: its structured content, else its text as JSON
    (or ``{"result": text}``); ``is_error`` is an ``execution_error`` with the server's message."""
    texts = [block.text for block in result.content if block.type == "text"]
    if result.is_error:
        message = "\n".join(texts) or "the tool reported an error"
        return Response(error=ToolError(ErrorCode.EXECUTION_ERROR, message[:1000]), native=message)
    if result.structured_content is not None:
        return Response(text=json.dumps(result.structured_content), native=result.structured_content)
    if len(texts) == len(result.content) and texts:
        return Response.from_native("\n".join(texts))
    return Response.from_native([block.model_dump(mode="json", exclude_none=True) for block in result.content])


def _digest(content: str) -> tuple[str, str]:
    """What the log keeps of a response, whatever its size: its SHA-256 and its first 300 characters."""
    return hashlib.sha256(content.encode()).hexdigest(), content[:300]


class MCPWorld(World):
    """One episode's session on an MCP server. A call is a ``tools/call``; the calls that ran
    are kept (``log``: name, arguments and a digest of the response, so memory does not grow
    with response sizes), so that a deterministic server's world forks by replaying them on a
    fresh session. ``failure`` says why the server is gone, once it is."""

    def __init__(self, runtime: Runtime, deterministic: bool = False, state=None):
        self.runtime, self.deterministic = runtime, deterministic
        self.session = runtime.open(state)
        self.log: list[tuple[str, dict, tuple[str, str]]] = []
        self.failure: str | None = None
        self._release = weakref.finalize(self, runtime.release, self.session)

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        if self.failure is not None:
            return Response(error=ToolError(ErrorCode.EXECUTION_ERROR, self.failure))
        try:
            response = response_of(self.runtime.call_tool(self.session, name, arguments))
        except ServerError as e:
            self.failure = str(e)
            return Response(error=ToolError(ErrorCode.EXECUTION_ERROR, self.failure))
        except MCPError as e:
            response = Response(
                error=ToolError(ErrorCode.EXECUTION_ERROR, f"MCP error {e.code} from {name}: {e.message}"[:1000])
            )
        except ValidationError as e:
            response = Response(
                error=ToolError(ErrorCode.EXECUTION_ERROR, f"{name}: the server's result is malformed: {e}"[:1000])
            )
        self.log.append((name, arguments, _digest(response.content)))
        return response

    def fork(self) -> MCPWorld:
        """An in-process server's world forks as a copy of its state; a stdio or isolated HTTP
        server's only when declared deterministic: its calls are replayed on a fresh session,
        and every response must equal the recorded one."""
        spec = self.runtime.spec
        if isinstance(spec, InProcess):
            twin = MCPWorld(self.runtime, self.deterministic, copy.deepcopy(self.session.state))
            twin.log = list(self.log)
            return twin
        if not self.deterministic:
            raise ForkError(
                f"the MCP server {spec.name} is opaque: its state cannot be copied. Fork with "
                "dynamics='rehearsed' or 'simulated' (no world needed), or declare the server "
                "deterministic (MCPSuite(..., deterministic=True)) to fork by replaying its calls"
            )
        twin = MCPWorld(self.runtime, True)
        for i, (name, arguments, (digest, head)) in enumerate(self.log):
            again = twin.execute(name, arguments).content
            if _digest(again)[0] != digest:
                twin.close()
                raise ForkError(
                    f"the MCP server {spec.name} was declared deterministic, but replaying call "
                    f"{i} ({name} {json.dumps(arguments)[:300]}) on a fresh server answered "
                    f"{again[:300]} where the episode got {head}"
                )
        return twin

    def detached(self) -> World:
        """A server session is not copied for a fork that asks no world."""
        return DetachedWorld()

    def close(self, wait: bool = True) -> None:
        """End the session (``wait``: until its server is gone); one that never ran a call is
        still pristine and goes back to the warm pool."""
        if self._release.detach():
            if self.log or self.failure is not None:
                self.runtime.release(self.session, wait=wait)
            else:
                self.runtime.give_back(self.session)


class RecordedWorld(World):
    """A world that answers from a recorded trajectory: a call with a recorded (name,
    arguments) gets the recorded responses in order, the last one again after that; any
    other call gets the ``no_recording`` error. Forks by deep copy."""

    def __init__(self, recording: list[dict]):
        self.table: dict[tuple[str, str], list[str]] = {}
        for r in recording:
            self.table.setdefault(recording_key(r["name"], r.get("arguments", {})), []).append(r["response"])

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        answer = recorded(self.table, name, arguments)
        return Response(error=answer) if isinstance(answer, ToolError) else Response.from_native(answer)


class DetachedWorld(World):
    """The world of a fork that needs none (rehearsed, simulated or replay dynamics): it answers
    nothing, and a fork that needs a world cannot be made from it."""

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        return Response(
            error=ToolError(
                ErrorCode.EXECUTION_ERROR, "this fork was made without a world; fork the real episode instead"
            )
        )

    def fork(self) -> World:
        raise ForkError(
            "this branch was forked without a world, so it has none to fork under dynamics that ask "
            "one: fork the real episode instead"
        )

    def detached(self) -> World:
        return DetachedWorld()
