"""Serve any envace env over OpenEnv's wire protocol (version 0.10), one env per WebSocket session.

We speak the protocol on FastAPI and uvicorn instead of importing ``openenv``: its package pulls
``fastmcp`` 3.x, which pins ``mcp`` below 2, and the MCP suites need ``mcp`` 2.x (the wire
protocol is the contract; ``tests/integrations/test_openenv.py`` checks it with OpenEnv's own client).

Routes: ``/ws`` (the stateful path: ``reset``, ``step``, ``state``, ``mcp`` and ``close``
messages), ``GET /health``, ``/metadata``, ``/schema``, ``/capacity``, ``POST /mcp``
(JSON-RPC ``tools/list``) and, beyond OpenEnv's routes, ``GET /tasks``
(:class:`~envace_gym.integrations.openenv.replies.ServedTasks`). A client may ``reset`` with the dynamics
the server offers only: its default, and those the operator names (``allow_dynamics``); ``replay``, which
answers calls from the gold recordings, only when named. Every frame is sent with its secrets redacted
(:func:`~envace_gym.redaction.redact`). An observation's fields are ``role``,
``messages``, ``tools`` and ``tool_call`` as in-process, ``terminated`` and ``truncated``, and ``info``
(the step's ``info`` dict, ``reward_info`` and ``reward_source`` included); ``reward`` and ``done`` are OpenEnv's.
A reset may name the episode's ``capture_purpose`` (OpenEnv's capture purpose: ``eval``, the default, or
``train``); each observation's ``metadata`` and the ``state`` carry it.

A session opened as ``/ws?observations=delta`` (``RemoteEnv`` does) gets, in each observation, only the
messages after the first ``messages_from`` of the observation before, and ``tools`` only when they changed
(null otherwise), so that a step's reply does not grow with the episode. Who may connect is
:mod:`envace_gym.integrations.openenv.access`'s to decide (loopback origins, the bound ``Host``, a token).

    envace-gym serve EnvACE/tau2-retail-v0 --port 8000 --max-sessions 16
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import gymnasium as gym
from fastapi import FastAPI, Request, WebSocket
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

from envace_gym import dynamics as dynamics_registry
from envace_gym.integrations.openenv.access import Access, Guard, HeadTimeoutH11
from envace_gym.integrations.openenv.protocol import (
    PROTOCOL,
    EnvACEAction,
    EnvACEObservation,
    EnvACEState,
    error,
    jsonable,
    rpc,
)
from envace_gym.integrations.openenv.replies import ServedTasks
from envace_gym.integrations.openenv.sessions import Session
from envace_gym.redaction import redact
from envace_gym.wrappers import unwrap


class EnvServer:
    """An OpenEnv-compatible server of one env id: ``EnvServer(env_id, **make_kwargs).app`` is the
    FastAPI app. Each WebSocket connection gets its own env, made with ``gym.make(env_id,
    **make_kwargs)``; at most ``max_sessions`` live at once, and one idle for ``session_timeout``
    seconds is closed. A message over ``max_message_bytes`` is refused, the session kept.

    ``token``: a shared secret every request but ``/health`` must carry; ``allow_origins``: browser
    origins allowed besides loopback ones (``*``: any); at most ``max_connections`` requests are in
    progress at once (past it, 503), and as many connections wait for a request (past it, the longest
    waiting is closed), so that connections that send nothing keep no client out. ``allow_dynamics``: the
    dynamics a client may reset with besides the default one (``make_kwargs["dynamics"]``, else ``real``);
    ``replay`` is offered only when named here, even as the default."""

    def __init__(
        self,
        env_id: str,
        max_sessions: int = 8,
        session_timeout: float | None = 300.0,
        max_message_bytes: int = 1 << 20,
        token: str | None = None,
        allow_origins: tuple[str, ...] = (),
        max_connections: int = 64,
        allow_dynamics: tuple[str, ...] = (),
        **make_kwargs: Any,
    ):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        if session_timeout is not None and session_timeout <= 0:
            raise ValueError(f"session_timeout must be positive, got {session_timeout}")
        if max_connections <= max_sessions:
            raise ValueError(f"max_connections ({max_connections}) must exceed max_sessions ({max_sessions})")
        if token is not None and len(token) < 8:
            raise ValueError("a token needs at least 8 characters")
        self.env_id, self.make_kwargs = env_id, make_kwargs
        self.max_sessions, self.session_timeout = max_sessions, session_timeout
        self.max_message_bytes, self.protocol = max_message_bytes, PROTOCOL
        self.token, self.allow_origins = token, tuple(o.rstrip("/") for o in allow_origins)
        self.max_connections = max_connections
        self.dynamics = offered_dynamics(make_kwargs.get("dynamics", "real"), allow_dynamics)
        self.catalog = gym.make(env_id, **make_kwargs)  # fails now on a bad id or option; serves POST /mcp
        self.sessions: dict[str, Session] = {}
        self._reserved = 0  # slots taken by sessions whose env is being made
        self._pool = ThreadPoolExecutor(max_workers=max_sessions + 1, thread_name_prefix="envace-session")
        self.app = self._build()

    # sessions ---------------------------------------------------------------
    async def _run(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    async def _reap(self, timeout: float) -> None:
        while True:
            await asyncio.sleep(min(1.0, timeout / 4))
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if not session.busy and now - session.last_active > timeout:
                    session.task.cancel()  # its handler's finally frees the env

    async def _serve(self, websocket: WebSocket) -> None:
        await websocket.accept()
        if len(self.sessions) + self._reserved >= self.max_sessions:
            await websocket.send_json(
                error(
                    f"the server is at its cap of {self.max_sessions} sessions; retry later",
                    "CAPACITY_REACHED",
                    active_sessions=len(self.sessions),
                    max_sessions=self.max_sessions,
                )
            )
            await websocket.close(code=1013)
            return
        self._reserved += 1
        session_id = uuid.uuid4().hex
        try:
            env = await self._run(gym.make, self.env_id, **self.make_kwargs)
        except Exception as e:
            why = redact(f"{type(e).__name__}: {e}")
            await websocket.send_json(error(why, "FACTORY_ERROR", factory_name=self.env_id))
            await websocket.close()
            return
        finally:
            self._reserved -= 1
        task = asyncio.current_task()
        assert task is not None  # this coroutine's
        session = self.sessions[session_id] = Session(
            env, task, delta=websocket.query_params.get("observations") == "delta"
        )
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                session.busy, session.last_active = True, time.monotonic()
                try:
                    reply = await self._answer(session, message.get("text"))
                except Exception as e:  # the env's own failure: the client hears of it, the session lives on
                    reply = json.dumps(error(f"{type(e).__name__}: {e}", "EXECUTION_ERROR"))
                session.busy, session.last_active = False, time.monotonic()
                if reply is None:
                    break
                await websocket.send_text(redact(reply))  # nothing the env or a tool wrote carries a secret out
        except (WebSocketDisconnect, asyncio.CancelledError, RuntimeError):
            pass  # the client left, or the reaper closed an idle session
        finally:
            self.sessions.pop(session_id, None)
            await asyncio.shield(self._run(env.close))
            try:
                await websocket.close(code=1001)
            except Exception:  # already closed
                pass

    async def _answer(self, session: Session, raw: str | None) -> str | None:
        """The reply frame to one client message, as text (None: the client closed the session)."""
        if raw is None:
            return json.dumps(error("binary frames are not part of the protocol: send JSON text", "INVALID_JSON"))
        size = len(raw.encode())
        if size > self.max_message_bytes:
            return json.dumps(
                error(
                    f"message of {size} bytes is over this server's limit of {self.max_message_bytes}",
                    "VALIDATION_ERROR",
                )
            )
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError) as e:
            return json.dumps(
                error(f"Invalid JSON: {e if isinstance(e, ValueError) else 'nested too deeply'}", "INVALID_JSON")
            )
        reply = await self._reply(session, message)
        return reply if reply is None or isinstance(reply, str) else json.dumps(reply, default=str)

    async def _reply(self, session: Session, message: Any) -> dict | str | None:
        """The reply to one parsed message: a frame, or its text already written off the event loop."""
        if not isinstance(message, dict):
            return error("a message must be a JSON object with a 'type'", "VALIDATION_ERROR")
        kind, data = message.get("type"), message.get("data", {})
        if kind == "close":
            return None
        if kind not in ("reset", "step", "state", "mcp"):
            return error(f"Unknown message type: {kind}", "UNKNOWN_TYPE")
        if not isinstance(data, dict):
            return error("'data' must be a JSON object", "VALIDATION_ERROR")
        try:
            if kind == "reset":
                return self._refused_dynamics(data) or await self._run(session.reset, data)
            if kind == "step":
                return await self._run(session.step, EnvACEAction.model_validate(data))
            if kind == "mcp":
                return {"type": "mcp", "data": rpc(data, session.env)}
            return {"type": "state", "data": session.state().model_dump()}
        except ValidationError as e:
            return error("Invalid message", "VALIDATION_ERROR", errors=jsonable(e.errors()))
        except (ValueError, TypeError, RuntimeError) as e:  # an unknown task or dynamics, a step after the end
            return error(str(e), "EXECUTION_ERROR")

    def _refused_dynamics(self, data: dict) -> dict | None:
        """The error frame of a reset asking for dynamics this server does not offer (None: it may)."""
        options = data.get("options")
        asked = data.get("dynamics", options.get("dynamics") if isinstance(options, dict) else None)
        if asked is None or (isinstance(asked, str) and asked in self.dynamics):
            return None
        return error(
            f"dynamics {str(asked)[:100]!r} is not offered by this server; it offers {', '.join(self.dynamics)} "
            "(its operator allows others with --allow-dynamics)",
            "VALIDATION_ERROR",
            allowed_dynamics=list(self.dynamics),
        )

    # the app -------------------------------------------------------------------
    def _build(self):
        @asynccontextmanager
        async def lifespan(app):
            reaper = asyncio.create_task(self._reap(self.session_timeout)) if self.session_timeout else None
            yield
            if reaper:
                reaper.cancel()
            for session in list(self.sessions.values()):
                session.task.cancel()
            self._pool.shutdown(wait=False, cancel_futures=True)

        app = FastAPI(title=f"envace-gym: {self.env_id}", lifespan=lifespan)

        @app.websocket("/ws")
        async def ws(websocket: WebSocket):
            await self._serve(websocket)

        @app.get("/health")
        def health():
            return {"status": "healthy"}

        @app.get("/metadata")
        def metadata():
            import envace_gym

            return {
                "name": self.env_id,
                "description": f"{self.env_id} (envace-gym): real or rehearsed tool "
                "dynamics, one env per WebSocket session",
                "version": envace_gym.__version__,
                "readme_content": None,
                "author": None,
                "documentation_url": None,
            }

        @app.get("/schema")
        def schema():
            return {
                "action": EnvACEAction.model_json_schema(),
                "observation": EnvACEObservation.model_json_schema(),
                "state": EnvACEState.model_json_schema(),
            }

        @app.get("/tasks")
        def tasks():
            inner = unwrap(self.catalog)
            return ServedTasks(
                env_id=self.env_id,
                split=inner.split,
                task_ids=[str(t) for t in inner.task_ids],
                dynamics=inner.dynamics,
                reward=getattr(inner.reward, "__name__", inner.reward),
                max_turns=inner.max_turns,
            ).model_dump()

        @app.get("/capacity")
        def capacity():
            return {"active_sessions": len(self.sessions), "max_sessions": self.max_sessions}

        @app.post("/mcp")
        async def mcp(request: Request):
            body = await request.body()  # at most max_message_bytes: the Guard refuses larger ones with 413
            try:
                message = json.loads(body)
            except (ValueError, RecursionError):
                return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
            return rpc(message, self.catalog)

        return app


def offered_dynamics(default: str, allow: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The dynamics a server offers: ``default``, then each of ``allow`` (names, or comma-separated lists of
    them), each checked; ``replay`` only when ``allow`` names it, since it answers calls from the gold."""
    named = [n.strip() for item in allow for n in item.split(",") if n.strip()]
    for name in (default, *named):
        dynamics_registry.get(name)
    if dynamics_registry.get(default).replays and default not in named:
        raise ValueError(
            "serving replay dynamics answers any call from the gold recordings: name it in allow_dynamics "
            "(--allow-dynamics replay) to serve it"
        )
    return tuple(dict.fromkeys((default, *named)))


def uvicorn_config(server: EnvServer, host: str, port: int):
    """uvicorn's settings for ``server`` bound to ``host``: the :class:`~envace_gym.integrations.openenv.access.Guard`
    in front, head and keep-alive timeouts, and the caps on requests in progress and connections waiting."""
    import uvicorn

    app = Guard(server.app, Access(host, server.allow_origins, server.token), server.max_message_bytes)
    # uvicorn's own frame cap sits above ours, so an oversized message still gets our structured error
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        ws_max_size=4 * server.max_message_bytes,
        log_level="warning",
        http=HeadTimeoutH11,
        timeout_keep_alive=5,
        limit_concurrency=server.max_connections,
    )


def run_server(server: EnvServer, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted (``envace-gym serve``)."""
    import uvicorn

    uvicorn.Server(uvicorn_config(server, host, port)).run()


@contextmanager
def serving(server: EnvServer, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0):
    """Serve in a background thread of this process; yields the server's ``http://HOST:PORT`` URL
    (``port=0``: a free one) and stops it on exit."""
    import uvicorn

    live = uvicorn.Server(uvicorn_config(server, host, port))
    thread = threading.Thread(target=live.run, name="envace-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not live.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the env server did not start on {host}:{port}")
        time.sleep(0.02)
    bound = live.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        live.should_exit = True
        thread.join(timeout)
