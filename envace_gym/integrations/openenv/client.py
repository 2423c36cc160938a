"""``RemoteEnv``: a Gymnasium env over an ``envace-gym serve`` (OpenEnv wire protocol) server.

>>> env = RemoteEnv("http://127.0.0.1:8000")                        # doctest: +SKIP
>>> obs, info = env.reset(seed=0, options={"task_id": "5", "dynamics": "rehearsed"})  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import gymnasium as gym
from pydantic import ValidationError

from envace_gym.core.tools import ToolSet
from envace_gym.integrations.openenv.replies import Frame, Reply, ServedError, ServedState, ServedTasks
from envace_gym.spaces import ActionSpace, ObservationSpace

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

# the server refused the request itself (bad options, a step after the end): the in-process errors
REQUEST_ERRORS = {"EXECUTION_ERROR", "VALIDATION_ERROR", "INVALID_JSON", "UNKNOWN_TYPE"}
# websockets logs a handshake's headers (the token among them) at DEBUG: its logger here never logs at that level
WIRE_LOG = logging.getLogger("envace_gym.remote_env.wire")
WIRE_LOG.setLevel(logging.INFO)


class Cutoff:
    """One bound on a whole exchange with a server, however slowly it answers (a socket's timeout bounds each
    read, not their sum): ``seconds`` after it starts, the connection it watches is shut down, so that any read
    or write blocked on it fails. It watches a plain socket (a ``dup`` of one under TLS), which its owner closes."""

    def __init__(self, seconds: float, sock: socket.socket | None = None):
        self.end, self.sock, self.passed = time.monotonic() + seconds, sock, False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def left(self) -> float:
        """The seconds left (never 0, which a socket would take as non-blocking)."""
        return max(self.end - time.monotonic(), 1e-3)

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self.sock = sock
            if self.passed:
                self._shut()

    def _cut(self) -> None:
        with self._lock:
            self.passed = True
            self._shut()

    def _shut(self) -> None:
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed already
                pass

    def __enter__(self) -> Cutoff:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._timer.cancel()
            self.sock = None  # its owner may close it now


def _brief(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"


def dial(url: str, cutoff: Cutoff) -> tuple[socket.socket, socket.socket]:
    """A TCP connection to ``url``'s host, and a ``dup`` of it for ``cutoff`` to watch (TLS, wrapped around
    the first, detaches it)."""
    parts = urlsplit(url)
    secure = parts.scheme in ("https", "wss")
    sock = socket.create_connection((parts.hostname, parts.port or (443 if secure else 80)), timeout=cutoff.left())
    wire = sock.dup()
    cutoff.watch(wire)
    return sock, wire


class RemoteEnv(gym.Env):
    """One session on an env server, as a ``gymnasium.Env`` with the local env's spaces, ``reset``,
    ``step`` and ``close``. Every request waits at most ``timeout`` seconds. ``dynamics``: those of
    every episode that ``reset`` does not choose in its options (default: the server's).

    A server that cannot be reached at ``reset``, or whose reply is not valid (every reply is checked
    against a schema: frames, observations, their ``info``, error frames, ``GET /tasks``), is a
    ``ConnectionError`` naming the URL; either during an episode ends it (``terminated``, reward 0,
    ``ended_by`` ``server_error``, the cause in ``info["error"]``), as does an error frame answering a
    step. No redirect is followed: a 3xx is a ``ConnectionError`` naming where it points. ``token``: the
    server's shared secret (``serve --token``), sent as ``Authorization: Bearer``. The session asks for
    delta observations (what is new since the last one), so a step's reply does not grow with the
    episode; ``reset`` and ``step`` still return whole observations. The env pickles by its URL, so
    vector envs can hold it (each copy opens its own session: reset it).
    """

    metadata = {"render_modes": []}
    observation_space: ObservationSpace
    action_space: ActionSpace

    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        max_message_bytes: int = 1 << 26,
        token: str | None = None,
        dynamics: str | None = None,
    ):
        if not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"a server URL starts with http(s):// or ws(s)://, got {url!r}")
        try:
            urlsplit(url).port  # noqa: B018 (a port that is not a number raises)
        except ValueError as e:
            raise ValueError(f"not a server URL: {url!r} ({e})") from None
        if not urlsplit(url).hostname:
            raise ValueError(f"a server URL names a host, got {url!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.url, self.timeout, self.max_message_bytes = url.rstrip("/"), timeout, max_message_bytes
        self.token, self.dynamics = token, dynamics
        self.observation_space = ObservationSpace()
        self.action_space = ActionSpace(ToolSet([]))
        self._ws: ClientConnection | None = None
        self._obs: dict | None = None
        self._info: dict = {}
        self._schemas: list[dict] | None = None
        self._wire: socket.socket | None = None  # the session's TCP connection, as its requests' Cutoff watches it
        self._messages: list[dict] = []  # the session's last observation's messages
        self._served: ServedTasks | None = None

    @property
    def ws_url(self) -> str:
        return ("ws" + self.url[4:] if self.url.startswith("http") else self.url) + "/ws?observations=delta"

    # the wire ------------------------------------------------------------------
    def _request(self, kind: str, data: dict | None = None) -> dict:
        """Send one message and read its reply frame's data, the whole exchange (a connection's opening
        included) within ``timeout`` seconds. An error frame for the request itself is a ``ValueError``;
        any other failure, and a reply that is not a frame of the kind due, a ``ConnectionError``."""
        from websockets.exceptions import ConnectionClosed, WebSocketException

        with Cutoff(self.timeout, self._wire) as cutoff:
            if self._ws is None:
                self._connect(cutoff)
            assert self._ws is not None
            try:
                try:
                    self._ws.send(json.dumps({"type": kind, "data": data or {}}))
                except ConnectionClosed:  # a refused session sends its error frame, then closes: read it
                    pass
                raw = json.loads(self._ws.recv(timeout=cutoff.left()))
            except (TimeoutError, OSError, WebSocketException, ValueError, RecursionError) as e:
                self._drop()
                if cutoff.passed or isinstance(e, TimeoutError):
                    raise ConnectionError(
                        f"the env server at {self.url} did not answer within {self.timeout} s"
                    ) from None
                why = "a reply nested too deeply" if isinstance(e, RecursionError) else _brief(e)
                raise ConnectionError(f"lost the env server at {self.url}: {why}") from None
        try:
            reply = Frame.model_validate(raw)
        except ValidationError as e:
            self._drop()
            raise ConnectionError(
                f"the env server at {self.url} sent a frame that is not an OpenEnv reply: {_brief(e)}"
            ) from None
        if reply.type == "error":
            try:
                error = ServedError.model_validate(reply.data)
            except ValidationError as e:
                self._drop()
                raise ConnectionError(
                    f"the env server at {self.url} sent an error frame that is not valid: {_brief(e)}"
                ) from None
            message = f"{error.message[:2000]} (server {self.url}, code {error.code[:100]})"
            if error.code in REQUEST_ERRORS:
                raise ValueError(message)
            self._drop()
            raise ConnectionError(message)
        due = "state" if kind == "state" else "observation"
        if reply.type != due:
            self._drop()
            raise ConnectionError(f"the env server at {self.url} sent a {reply.type[:40]!r} frame for a {kind}")
        return reply.data

    def _connect(self, cutoff: Cutoff) -> None:
        """Open the session over a TCP connection of our own (websockets follows no redirect on a socket it
        is given, so the token goes nowhere else); a ``ConnectionError`` if it cannot."""
        from websockets.exceptions import InvalidStatus, WebSocketException
        from websockets.sync.client import connect

        sock = None
        try:
            sock, self._wire = dial(self.ws_url, cutoff)
            sock.settimeout(None)  # the cutoff bounds it, and websockets reads it from a thread of its own
            self._ws = connect(
                self.ws_url,
                sock=sock,
                open_timeout=cutoff.left(),
                close_timeout=1,
                max_size=self.max_message_bytes,
                additional_headers={"Authorization": f"Bearer {self.token}"} if self.token else None,
                compression=None,
                logger=WIRE_LOG,
            )
        except (OSError, WebSocketException, ValueError) as e:
            if sock is not None:
                sock.close()
            self._drop()
            refused = e if isinstance(e, InvalidStatus) else e.__cause__
            if isinstance(refused, InvalidStatus) and 300 <= refused.response.status_code < 400:
                raise ConnectionError(
                    self._redirected(refused.response.status_code, refused.response.headers.get("Location"))
                ) from None
            if isinstance(refused, InvalidStatus) and refused.response.status_code in (401, 403):
                raise ConnectionError(self._refused("a session", refused.response.status_code)) from None
            if cutoff.passed or isinstance(e, TimeoutError):
                raise ConnectionError(f"the env server at {self.url} did not answer within {self.timeout} s") from None
            raise ConnectionError(f"cannot reach the env server at {self.url}: {_brief(e)}") from None
        self._messages, self._schemas = [], None  # a new session: the server has sent nothing yet

    def _redirected(self, status: int, location: str | None) -> str:
        return (
            f"the env server at {self.url} answered HTTP {status}, a redirect to {str(location)[:300]!r}: "
            "RemoteEnv follows no redirect (so that the token goes nowhere else); give the URL it points to "
            "if you trust it"
        )

    def _refused(self, what: str, status: int) -> str:
        if status not in (401, 403):
            hint = ""
        elif self.token:
            hint = " (is the token right? serve --token, RemoteEnv(token=...))"
        else:  # none was sent
            hint = " and no token was sent: give the server's (--token, $ENVACE_SERVE_TOKEN, RemoteEnv(token=...))"
        return f"the env server at {self.url} refused {what}: HTTP {status}{hint}"

    def _drop(self) -> None:
        ws, wire, self._ws, self._wire = self._ws, self._wire, None, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # already gone
                pass
        if wire is not None:
            wire.close()

    def _unpack(self, data: dict) -> tuple[dict, float, bool, bool, dict]:
        """An observation frame as ``step``'s five values, the messages and tools the session already had
        put back; a reply that is not one is a ``ConnectionError``."""
        try:
            reply = Reply.model_validate(data)
            fields = reply.observation
            if fields.messages_from > len(self._messages):
                raise ValueError(
                    f"messages_from {fields.messages_from} is past the {len(self._messages)} messages "
                    "this session holds"
                )
            if fields.tools is None and self._schemas is None:
                raise ValueError("no tools were ever sent")
            if fields.tools is not None and fields.tools != self._schemas:  # validated as any untrusted schema is
                self.action_space.tools, self._schemas = ToolSet(fields.tools), fields.tools
        except (ValidationError, ValueError, TypeError, RecursionError) as e:
            self._drop()
            raise ConnectionError(
                f"the env server at {self.url} sent an observation that is not valid: {' '.join(str(e).split())[:500]}"
            ) from None
        self._messages = self._messages[: fields.messages_from] + fields.messages
        obs = {
            "role": fields.role,
            "messages": list(self._messages),
            "tools": self._schemas,
            "tool_call": fields.tool_call,
        }
        info = data["observation"]["info"]  # as sent: ServedInfo checked the keys it knows
        self.action_space.role = fields.role
        self._obs, self._info = obs, info
        return obs, reply.reward or 0.0, fields.terminated, fields.truncated, info

    @property
    def env_id(self) -> str:
        """The served env's id (:meth:`tasks`)."""
        return self.tasks().env_id

    @property
    def split(self) -> str | None:
        """The served env's split (:meth:`tasks`)."""
        return self.tasks().split

    def tasks(self) -> ServedTasks:
        """What the server plays (``GET /tasks``, asked once); a server that cannot be reached, or
        answers something else, is a ``ConnectionError`` naming the URL."""
        if self._served is None:
            self._served = self._get_tasks()
        return self._served

    def _get_tasks(self) -> ServedTasks:
        from http.client import HTTPConnection, HTTPException, HTTPSConnection

        url = "http" + self.url[2:] if self.url.startswith("ws") else self.url
        parts = urlsplit(url)
        kind = HTTPSConnection if parts.scheme == "https" else HTTPConnection
        connection = kind(parts.hostname or "", parts.port, timeout=self.timeout)
        wire = None
        with Cutoff(self.timeout) as cutoff:  # however slowly the server answers
            try:
                sock, wire = dial(url, cutoff)
                if parts.scheme == "https":
                    sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
                connection.sock = sock  # http.client follows no redirect
                connection.request(
                    "GET",
                    f"{parts.path}/tasks",
                    headers={"Authorization": f"Bearer {self.token}"} if self.token else {},
                )
                reply = connection.getresponse()
                status, location, body = (
                    reply.status,
                    reply.getheader("Location"),
                    reply.read(self.max_message_bytes + 1),
                )
                if cutoff.passed:  # cut short: what was read is not the whole reply
                    raise TimeoutError
            except (OSError, HTTPException, ValueError) as e:
                if cutoff.passed or isinstance(e, TimeoutError):
                    raise ConnectionError(
                        f"the env server at {self.url} did not answer GET /tasks within {self.timeout} s"
                    ) from None
                raise ConnectionError(f"cannot reach the env server at {self.url}: {_brief(e)}") from None
            finally:
                connection.close()
                if wire is not None:
                    wire.close()
        if 300 <= status < 400:
            raise ConnectionError(self._redirected(status, location))
        if status != 200:
            raise ConnectionError(self._refused("GET /tasks", status))
        if len(body) > self.max_message_bytes:
            raise ConnectionError(f"the env server at {self.url} sent a task list over {self.max_message_bytes} bytes")
        try:
            return ServedTasks.model_validate_json(body)
        except ValidationError as e:
            raise ConnectionError(
                f"the env server at {self.url} sent no task list (is it an envace-gym server?): {e.errors()[0]['msg']}"
            ) from None

    # gymnasium -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._obs = None
        options = {"dynamics": self.dynamics, **(options or {})} if self.dynamics else options or {}
        obs, _, _, _, info = self._unpack(self._request("reset", {"seed": seed, "options": options}))
        return obs, info

    def step(self, action: Any):
        if self._obs is None:
            raise RuntimeError("the episode has ended (or never began): call reset()")
        payload = {"text": action} if isinstance(action, str) else {"message": action}
        try:
            out = self._unpack(self._request("step", payload))
        except (ConnectionError, ValueError) as e:  # the server is gone, speaks nonsense or failed: the episode
            obs, self._obs = self._obs, None  # ends here, and says why (whatever a server sends, step raises nothing)
            return obs, 0.0, True, False, {**self._info, "tool_calls": [], "ended_by": "server_error", "error": str(e)}
        if out[2] or out[3]:
            self._obs = None
        return out

    def state(self) -> dict:
        """The server's view of the session: episode id, step count, task, dynamics, role, turn."""
        data = self._request("state")
        try:
            return ServedState.model_validate(data).model_dump()
        except ValidationError as e:
            self._drop()
            raise ConnectionError(f"the env server at {self.url} sent a state that is not valid: {_brief(e)}") from None

    def close(self) -> None:
        if self._ws is not None:
            with Cutoff(self.timeout, self._wire):  # a server that reads nothing holds no send
                try:
                    self._ws.send(json.dumps({"type": "close"}))
                except Exception:  # the server is gone already
                    pass
                self._drop()
        super().close()

    def __getstate__(self) -> dict:
        return {
            "url": self.url,
            "timeout": self.timeout,
            "max_message_bytes": self.max_message_bytes,
            "token": self.token,
            "dynamics": self.dynamics,
        }

    def __setstate__(self, state: dict) -> None:
        RemoteEnv.__init__(self, **state)
