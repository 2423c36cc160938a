"""``RemoteEnv``: a Gymnasium env over an ``envace-gym serve`` (OpenEnv wire protocol) server.

    >>> env = RemoteEnv("http://127.0.0.1:8000")                        # doctest: +SKIP
    >>> obs, info = env.reset(seed=0, options={"task_id": "5", "dynamics": "rehearsed"})  # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

from envace_gym.spaces import ActionSpace, ObservationSpace
from envace_gym.tools import ToolSet

OBS_KEYS = ("role", "messages", "tools", "tool_call")
# the server refused the request itself (bad options, a step after the end): the in-process errors
REQUEST_ERRORS = {"EXECUTION_ERROR", "VALIDATION_ERROR", "INVALID_JSON", "UNKNOWN_TYPE"}


class RemoteEnv(gym.Env):
    """One session on an env server, as a ``gymnasium.Env`` with the local env's spaces, ``reset``,
    ``step`` and ``close``. Every request waits at most ``timeout`` seconds.

    A server that cannot be reached at ``reset`` is a ``ConnectionError`` naming the URL; one lost
    during an episode ends it (``terminated``, reward 0, the cause in ``info["error"]``). The env
    pickles by its URL, so vector envs can hold it (each copy opens its own session: reset it).
    """

    metadata = {"render_modes": []}

    def __init__(self, url: str, timeout: float = 60.0, max_message_bytes: int = 1 << 26):
        if not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"a server URL starts with http(s):// or ws(s)://, got {url!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.url, self.timeout, self.max_message_bytes = url.rstrip("/"), timeout, max_message_bytes
        self.observation_space = ObservationSpace()
        self.action_space = ActionSpace(ToolSet([]))
        self._ws, self._obs, self._info, self._schemas = None, None, {}, None

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[4:] + "/ws" if self.url.startswith("http") else self.url + "/ws"

    # the wire ------------------------------------------------------------------
    def _request(self, kind: str, data: dict | None = None) -> dict:
        from websockets.exceptions import ConnectionClosed, WebSocketException
        from websockets.sync.client import connect

        try:
            if self._ws is None:
                self._ws = connect(self.ws_url, open_timeout=self.timeout, close_timeout=1,
                                   max_size=self.max_message_bytes)
            try:
                self._ws.send(json.dumps({"type": kind, "data": data or {}}))
            except ConnectionClosed:  # a refused session sends its error frame, then closes: read it
                pass
            reply = json.loads(self._ws.recv(timeout=self.timeout))
        except TimeoutError:
            self._drop()
            raise ConnectionError(f"the env server at {self.url} did not answer within {self.timeout} s") from None
        except (OSError, WebSocketException, ValueError) as e:
            self._drop()
            raise ConnectionError(f"lost the env server at {self.url}: {type(e).__name__}: {e}") from None
        if not isinstance(reply, dict) or not isinstance(reply.get("data"), dict):
            self._drop()
            raise ConnectionError(f"the env server at {self.url} sent a frame that is not an OpenEnv reply")
        if reply.get("type") == "error":
            message = f"{reply['data'].get('message')} (server {self.url}, code {reply['data'].get('code')})"
            if reply["data"].get("code") in REQUEST_ERRORS:
                raise ValueError(message)
            self._drop()
            raise ConnectionError(message)
        return reply["data"]

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # already gone
                pass

    def _unpack(self, data: dict) -> tuple[dict, float, bool, bool, dict]:
        fields = data.get("observation", {})
        obs = {k: fields.get(k) for k in OBS_KEYS}
        if obs["tools"] != self._schemas:  # the task's tools: validated as any untrusted schema is
            self.action_space.tools, self._schemas = ToolSet(obs["tools"]), obs["tools"]
        self.action_space.role = obs["role"]
        self._obs, self._info = obs, fields.get("info", {})
        reward = data.get("reward")
        return obs, 0.0 if reward is None else float(reward), bool(fields.get("terminated")), \
            bool(fields.get("truncated")), fields.get("info", {})

    # gymnasium -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, _, _, _, info = self._unpack(self._request("reset", {"seed": seed, "options": options or {}}))
        return obs, info

    def step(self, action: Any):
        if self._obs is None:
            raise RuntimeError("the episode has ended (or never began): call reset()")
        payload = {"text": action} if isinstance(action, str) else {"message": action}
        try:
            data = self._request("step", payload)
        except ConnectionError as e:  # the server is gone: the episode ends here, and says why
            obs, self._obs = self._obs, None
            return obs, 0.0, True, False, {**self._info, "tool_calls": [], "error": str(e)}
        except ValueError as e:
            raise RuntimeError(str(e)) from None
        out = self._unpack(data)
        if out[2] or out[3]:
            self._obs = None
        return out

    def state(self) -> dict:
        """The server's view of the session: episode id, step count, task, dynamics, role, turn."""
        return self._request("state")

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.send(json.dumps({"type": "close"}))
            except Exception:  # the server is gone already
                pass
            self._drop()
        super().close()

    def __getstate__(self) -> dict:
        return {"url": self.url, "timeout": self.timeout, "max_message_bytes": self.max_message_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
