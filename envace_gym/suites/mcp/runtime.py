"""MCP servers reached from sync code: where a server is, its live sessions, and their warm pool.

Every server has one :class:`Runtime`: an event loop in a daemon thread, with an anyio
blocking portal through which ``step`` (sync) sends requests. Each session is entered
and exited by one task of that loop, which holds it open until it is released. Stdio
servers are launched through :mod:`~envace_gym.suites.mcp.guard`, so that none outlives the process that
started it, and are kept warm: a pool of started, initialized spares, so that an
episode's reset does not wait for a server to boot.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shlex
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult
from pydantic import ValidationError

from envace_gym.cache import cache_dir

GUARD = str(Path(__file__).with_name("guard.py"))


class ServerError(RuntimeError):
    """An MCP server that cannot be started, refuses an episode, died or stopped answering."""


@dataclass(frozen=True)
class Stdio:
    """A server launched as ``command`` and spoken to over its stdin and stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None  # added to the SDK's safe defaults (PATH, HOME, ...)
    cwd: str | None = None

    def __post_init__(self):
        """A command that is not there is one clear error now, not a closed connection later."""
        if os.sep in self.command:
            found = os.access(Path(self.cwd or ".") / self.command, os.X_OK)
        else:
            found = shutil.which(self.command, path=(self.env or {}).get("PATH", os.environ.get("PATH"))) is not None
        if not found:
            raise ServerError(
                f"cannot start the MCP server {self.name!r}: no executable {self.command!r} "
                + ("at that path" if os.sep in self.command else "on PATH")
            )

    @property
    def name(self) -> str:
        return shlex.join([self.command, *self.args])

    @property
    def log(self) -> Path:
        """Where the server's stderr goes: ``$ENVACE_CACHE/mcp-logs/``, one file (and its rotated
        ``.1``, see :mod:`~envace_gym.suites.mcp.guard`) per command line, named by the command, its first argument that
        is not an option (a script, a module, a package) and a hash of the whole line."""
        words = [self.command, *(a for a in self.args if not a.startswith("-"))][:2]
        stem = "-".join(re.sub(r"[^A-Za-z0-9._-]+", "_", Path(w).name)[:40] for w in words)
        return cache_dir("mcp-logs") / f"{stem}-{hashlib.sha256(self.name.encode()).hexdigest()[:10]}.log"

    def target(self):
        """The transport of one session: the server under its guard. The guard's own stderr is the
        process's real one (``sys.__stderr__``), so a replaced ``sys.stderr`` without a file
        descriptor (a notebook's, a test runner's) does not stop the server from starting."""
        params = StdioServerParameters(
            command=sys.executable,
            args=["-I", "-S", GUARD, str(os.getpid()), str(self.log), self.command, *self.args],
            env=self.env,
            cwd=self.cwd,
        )
        return stdio_client(params, errlog=sys.__stderr__ or open(os.devnull, "w"))


@dataclass(frozen=True)
class Http:
    """A running server at a streamable-HTTP ``url``: one world that every session shares,
    unless ``isolated`` (the user's word that the server gives each session its own state)."""

    url: str
    isolated: bool = False

    @property
    def name(self) -> str:
        return self.url

    def target(self) -> str:
        return self.url


@dataclass(frozen=True)
class InProcess:
    """A server object in this process: ``build(state)`` is an ``MCPServer`` (or low-level
    ``Server``) whose tools act on ``state``; a world holds its own deep copy of ``state``."""

    state: Any
    build: Callable[[Any], Any]
    label: str = "in-process"

    @property
    def name(self) -> str:
        return self.label

    def target(self, state: Any = None) -> Any:
        return self.build(state)


def server_spec(server: str | list | Stdio | Http | InProcess) -> Stdio | Http | InProcess:
    """A server from a URL (``http(s)://...``), a command line (a string or a list), or a spec."""
    if isinstance(server, (Stdio, Http, InProcess)):
        return server
    if isinstance(server, str) and server.startswith(("http://", "https://")):
        return Http(server)
    parts = shlex.split(server) if isinstance(server, str) else [str(p) for p in server]
    if not parts:
        raise ValueError("an MCP server needs a command line or a URL")
    if parts[0].endswith(".py"):  # a Python file runs on this interpreter, whatever `python` is on PATH
        parts = [sys.executable, *parts]
    elif re.fullmatch(r"python(3(\.\d+)?)?", Path(parts[0]).name) and len(parts) > 1 and parts[1].endswith(".py"):
        parts[0] = sys.executable
    if parts[0] == sys.executable and parts[1:] and parts[1].endswith(".py") and not Path(parts[1]).is_file():
        raise ServerError(f"cannot start the MCP server {shlex.join(parts[1:])!r}: no file {parts[1]!r} at that path")
    return Stdio(parts[0], tuple(parts[1:]))


def log_tail(log: Path, chars: int = 1500, wait: float = 1.0) -> str:
    """The end of a server's log, as one line; waits up to ``wait`` seconds for the guard to copy
    a server's last words there (empty when there are none)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with log.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - chars))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            lines = []
        if lines or time.monotonic() > deadline:
            return " | ".join(line.strip() for line in lines[-12:] if line.strip())
        time.sleep(0.05)


@dataclass(eq=False)
class Session:
    """One live client session, held open by one task of the runtime's loop."""

    target: Any
    state: Any = None  # an in-process server's state
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    client: Client | None = None
    done: threading.Event = field(default_factory=threading.Event)
    _stop: anyio.Event | None = None

    async def hold(self, startup_timeout: float) -> None:
        self._stop = anyio.Event()
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + startup_timeout) as scope:
                async with Client(self.target) as client:
                    scope.deadline = math.inf  # started: from now on, held until released
                    self.client = client
                    self.ready.set()
                    await self._stop.wait()
            if scope.cancelled_caught:
                self.error = TimeoutError()
        except Exception as e:  # a server that cannot start, or one that died: its takers are told
            self.error = e
        finally:
            self.ready.set()
            self.done.set()


def _describe(error: BaseException | None) -> str:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _describe(error.exceptions[0])
    if isinstance(error, TimeoutError):
        return "it did not start in time"
    return f"{type(error).__name__}: {error}"


class Runtime:
    """The loop, portal, live sessions and (stdio) warm pool of one server.

    ``call_timeout`` bounds every request; ``pool_size`` stdio spares are kept started.
    """

    def __init__(self, spec: Stdio | Http | InProcess, call_timeout: float, startup_timeout: float, pool_size: int):
        self.spec, self.call_timeout, self.startup_timeout = spec, call_timeout, startup_timeout
        self.pool_size = pool_size if isinstance(spec, Stdio) else 0
        self._spares: deque[Session] = deque()
        self.live: set[Session] = set()
        self._lock = threading.Lock()
        self._closed = False
        started = threading.Event()
        self._thread = threading.Thread(
            target=anyio.run, args=(self._serve, started), daemon=True, name=f"envace-mcp {spec.name}"[:60]
        )
        self._thread.start()
        started.wait()

    async def _serve(self, started: threading.Event) -> None:
        async with BlockingPortal() as portal:
            self.portal = portal
            started.set()
            await portal.sleep_until_stopped()

    # sessions ------------------------------------------------------------
    def _session(self, state: Any = None) -> Session:
        return Session(self.spec.target(state) if isinstance(self.spec, InProcess) else self.spec.target(), state)

    def _start(self, session: Session) -> Session:
        self.portal.start_task_soon(session.hold, self.startup_timeout)
        return session

    def _refill(self) -> None:
        with self._lock:  # the sessions are made under the lock, started outside it (the loop may need it)
            missing = 0 if self._closed else self.pool_size - len(self._spares)
            new = [self._session() for _ in range(missing)]
            self._spares.extend(new)
        for session in new:
            self._start(session)

    def open(self, state: Any = None) -> Session:
        """A ready session for a new world (a warm spare where there is one); raises
        :class:`ServerError` when the server cannot start or refuses a second episode."""
        with self._lock:
            if self._closed:
                raise ServerError(f"the MCP server {self.spec.name} is closed")
            if isinstance(self.spec, Http) and not self.spec.isolated and self.live:
                raise ServerError(
                    f"the MCP server {self.spec.name} is one shared world with an episode running on it; "
                    "close that episode's env first, or declare Http(url, isolated=True) if the server "
                    "gives each session its own state"
                )
            session = None
            while self._spares and session is None:
                session = self._spares.popleft()
                if session.done.is_set():  # a spare whose server died while it waited
                    session = None
        if session is None:
            session = self._start(self._session(state))
        self._refill()
        session.ready.wait()
        if session.error is not None or session.done.is_set():
            where = ""
            if isinstance(self.spec, Stdio):
                tail = log_tail(self.spec.log)
                where = (
                    f"; its stderr ends: {tail} (all of it in {self.spec.log})"
                    if tail
                    else f"; its stderr is in {self.spec.log}"
                )
            raise ServerError(
                f"cannot open a session on the MCP server {self.spec.name} (it did not start or "
                f"cannot be reached): {_describe(session.error)}{where}"
            )
        with self._lock:
            self.live.add(session)
        return session

    def release(self, session: Session, wait: bool = False) -> None:
        """End a session (its stdio server stops); ``wait`` for it to be gone."""
        with self._lock:
            self.live.discard(session)
        self._stop(session)
        if wait:
            session.done.wait(self.startup_timeout)

    def give_back(self, session: Session) -> None:
        """Return an unchanged session: a warm spare again (stdio), else released; one already
        released (a request timed out on it) is never a spare again."""
        with self._lock:
            if session not in self.live:
                return
            if not self._closed and session.error is None and self.pool_size:
                self.live.discard(session)
                self._spares.appendleft(session)
                return
        self.release(session)

    def _stop(self, session: Session) -> None:
        if session._stop is None or session.done.is_set():
            return
        try:
            if threading.current_thread() is self._thread:
                session._stop.set()
            else:
                self.portal.call(session._stop.set)
        except RuntimeError:  # the loop is already gone, and with it the session
            pass

    def close(self) -> None:
        """Stop every session and the loop; each stdio server is gone when this returns."""
        if threading.current_thread() is self._thread:  # a finalizer the loop itself runs: close from outside
            threading.Thread(target=self.close, daemon=True).start()
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = [*self._spares, *self.live]
            self._spares.clear()
        for session in sessions:
            session.ready.wait(self.startup_timeout)
            self.release(session)
        for session in sessions:
            session.done.wait(self.startup_timeout)
        try:
            self.portal.call(self.portal.stop)
        except RuntimeError:  # already stopped
            pass
        self._thread.join(self.startup_timeout)

    # requests ------------------------------------------------------------
    def request(self, session: Session, method: str, *args: Any, **kwargs: Any) -> Any:
        """``session.client.<method>(*args, **kwargs)`` within the call timeout. Raises :class:`ServerError`
        when the server is gone or does not answer in time (the session is then ended);
        ``MCPError`` for a protocol error, pydantic's ``ValidationError`` for a malformed result."""

        async def bounded():
            with anyio.fail_after(self.call_timeout):
                return await getattr(session.client, method)(*args, **kwargs)

        try:
            return self.portal.call(bounded)
        except TimeoutError:
            self.release(session)
            raise ServerError(
                f"the MCP server {self.spec.name} did not answer {method} {args[:1]} within {self.call_timeout} s"
            ) from None
        except MCPError as e:
            if e.code != CONNECTION_CLOSED:
                raise
            error: Exception = e
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError, RuntimeError) as e:
            error = e
        except ValidationError:  # a malformed result: the session itself is fine
            raise
        except Exception as e:  # a transport's own failure (an HTTP server gone, say)
            error = e
        self.release(session)
        raise ServerError(
            f"the MCP server {self.spec.name} died or closed the connection ({_describe(error)})"
        ) from None

    def call_tool(self, session: Session, name: str, arguments: dict) -> CallToolResult:
        return self.request(session, "call_tool", name, arguments)
