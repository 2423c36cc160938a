"""Who may use an env server, and how much of it: browser origins, ``Host`` names, a shared token, request
bodies and slow connections.

Any web page open in a browser on the server's machine can reach a port on 127.0.0.1, and a page whose name
was rebound to 127.0.0.1 sends requests whose ``Host`` is its own name. As local development servers do
(Jupyter, the dashboards of vLLM and Ray), :class:`Guard` refuses with 403

- an ``Origin`` that is not a loopback URL and not one the operator allowed (``null`` included): browsers
  send it on every WebSocket handshake and every cross-site ``POST``;
- a ``Host`` that does not name the bound address (a loopback name when bound to loopback);
- when the server has a token, a request that does not carry it: ``Authorization: Bearer TOKEN``,
  ``X-EnvACE-Token: TOKEN`` or ``?token=TOKEN`` (``/health`` excepted, for liveness probes). Each of these
  carriers may hold one value, and every value given must be the token, so that a request is one guess.

It reads a request body as a stream and answers 413 past ``max_body`` bytes, whatever ``Content-Length``
says (408 when it is not all there within ``BODY_TIMEOUT`` seconds). :class:`HeadTimeoutH11` closes a
connection whose request head is not complete ``HEAD_TIMEOUT`` seconds after it started, and caps the requests
in progress, not the connections: one that has sent no request yet cannot take an authorised client's place.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import socket
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.h11_impl import H11Protocol

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
WILDCARDS = {"", "0.0.0.0", "::"}
HEAD_TIMEOUT = 10.0  # seconds from a connection's start (or its last response) to a complete request head
BODY_TIMEOUT = 30.0  # seconds for a whole request body


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None


def is_loopback(name: str | None) -> bool:
    """Whether a host name or address is this machine's loopback (``localhost``, 127.0.0.0/8, ``::1``)."""
    if not name:
        return False
    address = _ip(name)
    return address.is_loopback if address is not None else name.lower().rstrip(".") in LOOPBACK_NAMES


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8000`` -> ``::1``)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


@dataclass(frozen=True)
class Access:
    """The server's exposure: the address it is bound to, the browser origins the operator allows
    (``*``: any), and its shared token (None: none asked)."""

    bound: str = "127.0.0.1"
    allow_origins: tuple[str, ...] = ()
    token: str | None = None

    def _hosts(self) -> set[str]:
        names = {urlsplit(o).hostname or "" for o in self.allow_origins} - {""}
        if self.bound in WILDCARDS:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        return names | {self.bound.lower().strip("[]")}

    def host_allowed(self, host: str | None) -> bool:
        if host is None:  # HTTP/1.0 without Host: not a browser
            return True
        name = host_name(host).lower().rstrip(".")
        if is_loopback(name) or name in self._hosts():
            return True
        # bound to every interface: any address of this machine, which a rebound name is not
        return self.bound in WILDCARDS and _ip(name) is not None

    def origin_allowed(self, origin: str | None) -> bool:
        if origin is None:  # not a browser: browsers send Origin on handshakes and cross-site posts
            return True
        if "*" in self.allow_origins or origin.rstrip("/") in self.allow_origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and is_loopback(parts.hostname)

    def token_given(self, headers: list[tuple[str, str]], query: str) -> bool:
        """Whether a request (its headers, names in lower case, and its query) carries the token: in one
        carrier at least, each carrier given at most once, and every value given the token."""
        if self.token is None:
            return True
        carriers = [
            [v for k, v in headers if k == "x-envace-token"],
            [v for k, v in headers if k == "authorization"],
            parse_qs(query, keep_blank_values=True).get("token", []),
        ]
        if any(len(values) > 1 for values in carriers):
            return False
        x_token, authorization, query_token = (values[0] if values else None for values in carriers)
        if authorization is not None:
            scheme, _, bearer = authorization.partition(" ")
            authorization = bearer if scheme.lower() == "bearer" else None  # another scheme: not ours
        offered = [v for v in (x_token, authorization, query_token) if v is not None]
        right = [hmac.compare_digest(v.encode(), self.token.encode()) for v in offered]
        return bool(right) and all(right)

    def refusal(self, scope: dict) -> str | None:
        """Why a request (an ASGI ``http`` or ``websocket`` scope) is refused, or None."""
        pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        headers = dict(pairs)
        if not self.host_allowed(headers.get("host")):
            return f"Host {headers['host']!r} is not a name of this server (a rebound name?)"
        if not self.origin_allowed(headers.get("origin")):
            return (
                f"Origin {headers['origin']!r} is not allowed: browser pages may use this server only "
                "from loopback origins or those given with --allow-origin"
            )
        if scope.get("path") != "/health" and not self.token_given(pairs, scope.get("query_string", b"").decode()):
            return (
                "this server needs its token, once: Authorization: Bearer TOKEN, X-EnvACE-Token or ?token= "
                "(each at most once)"
            )
        return None


class Guard:
    """ASGI middleware: refuses what :class:`Access` refuses (403, before any route runs) and request bodies
    over ``max_body`` bytes (413), read as a stream so that an oversized one is never held whole."""

    def __init__(self, app, access: Access, max_body: int):
        self.app, self.access, self.max_body = app, access, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        why = self.access.refusal(scope)
        if why is not None:
            if scope["type"] == "websocket":  # closing before accepting: the handshake is answered with 403
                return await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})
            return await _answer(send, 403, why)
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            try:
                body = await self._body(scope, receive)
            except TimeoutError:
                return await _answer(send, 408, f"the request body did not arrive within {BODY_TIMEOUT:.0f} s")
            if body is None:
                return await _answer(send, 413, f"a request body may hold at most {self.max_body} bytes")
            receive = _replay(body, receive)
        return await self.app(scope, receive, send)

    async def _body(self, scope, receive) -> bytes | None:
        """The whole body, or None once it passes ``max_body`` (the rest is not read)."""
        for name, value in scope.get("headers", []):
            if name.lower() == b"content-length" and (not value.isdigit() or int(value) > self.max_body):
                return None
        chunks, size, more = [], 0, True
        async with asyncio.timeout(BODY_TIMEOUT):  # a body sent half-way holds no connection for ever
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    break
                chunk, more = message.get("body", b""), message.get("more_body", False)
                size += len(chunk)
                if size > self.max_body:
                    return None
                chunks.append(chunk)
        return b"".join(chunks)


def _replay(body: bytes, receive):
    sent = False

    async def replayed():
        nonlocal sent
        if sent:
            return await receive()  # a disconnect, when it comes
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def _answer(send, status: int, message: str) -> None:
    body = json.dumps({"detail": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HeadTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is incomplete ``HEAD_TIMEOUT`` seconds
    after the connection opened or after its last response (keep-alive idleness is uvicorn's own timeout).

    Its cap (``limit_concurrency``, past which a request is answered 503) counts the requests in progress
    only: uvicorn's counts every open connection, so connections that send no request, or only a refused
    one, could fill it and keep an authorised client out. Connections waiting for a request are capped
    apart, at as many: past that, the one that has waited longest is closed (a client sends its request
    head as soon as it connects)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cap, self.limit_concurrency = self.limit_concurrency, None  # uvicorn's own check: off
        self.waiting: dict[HeadTimeoutH11, None] = vars(self.server_state).setdefault("envace_waiting", {})
        app = self.app

        async def capped(scope, receive, send):
            if self.cap is not None and len(self.tasks) > self.cap:  # this request's task is one of them
                return await service_unavailable(scope, receive, send)
            return await app(scope, receive, send)

        self.app = capped

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(HEAD_TIMEOUT, self._head_timeout)
        self._wait()

    def _waiting_for_head(self) -> bool:
        return self.transport.get_protocol() is self and (self.cycle is None or self.cycle.response_complete)

    def _wait(self) -> None:
        """Count this connection among those waiting for a request, closing the longest waiting past the cap."""
        if self.transport.is_closing() or self in self.waiting:
            return
        self.waiting[self] = None
        while self.cap is not None and len(self.waiting) > self.cap:
            oldest = next(iter(self.waiting))
            self.waiting.pop(oldest)
            oldest.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        waiting = self._waiting_for_head()
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self._head_timeout)
        elif not waiting and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if waiting:
            self._wait()
        else:
            self.waiting.pop(self, None)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._waiting_for_head():  # kept alive for another request (a pipelined one may have started)
            self._wait()

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing() and self._waiting_for_head():
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.waiting.pop(self, None)
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)
