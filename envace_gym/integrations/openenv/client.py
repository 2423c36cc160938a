"""``RemoteEnv``: a Gymnasium env over an ``envace-gym serve`` (OpenEnv wire protocol) server.

>>> env = RemoteEnv("http://127.0.0.1:8000")                        # doctest: +SKIP
>>> obs, info = env.reset(seed=0, options={"task_id": "5", "dynamics": "rehearsed"})  # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import Any, Literal

import gymnasium as gym
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envace_gym.spaces import ActionSpace, ObservationSpace
from envace_gym.tools import ToolSet

# the server refused the request itself (bad options, a step after the end): the in-process errors
REQUEST_ERRORS = {"EXECUTION_ERROR", "VALIDATION_ERROR", "INVALID_JSON", "UNKNOWN_TYPE"}


class Observed(BaseModel):
    """An observation as a server sends it to a delta session (strict: ``"false"`` is no bool)."""

    model_config = ConfigDict(strict=True)
    role: Literal["act", "rehearse"]
    messages: list[dict[str, Any]]
    messages_from: int = Field(0, ge=0)
    tools: list[dict[str, Any]] | None
    tool_call: dict[str, Any] | None = None
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


class Reply(BaseModel):
    """An ``observation`` frame's data; the reward a finite number (``NaN``, ``1e999``: refused)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)
    observation: Observed
    reward: float | None = None
    done: bool = False


class ServedTasks(BaseModel):
    """A server's ``GET /tasks`` reply: its env, split, task ids, default dynamics, reward (None: each
    dynamics' default) and turn limit."""

    model_config = ConfigDict(strict=True)
    env_id: str
    split: str | None
    task_ids: list[str]
    dynamics: str
    reward: str | None
    max_turns: int | None


class RemoteEnv(gym.Env):
    """One session on an env server, as a ``gymnasium.Env`` with the local env's spaces, ``reset``,
    ``step`` and ``close``. Every request waits at most ``timeout`` seconds. ``dynamics``: those of
    every episode that ``reset`` does not choose in its options (default: the server's).

    A server that cannot be reached at ``reset``, or whose reply is not a valid observation, is a
    ``ConnectionError`` naming the URL; either during an episode ends it (``terminated``, reward 0,
    the cause in ``info["error"]``). ``token``: the server's shared secret (``serve --token``), sent
    as ``Authorization: Bearer``. The session asks for delta observations (what is new since the
    last one), so a step's reply does not grow with the episode; ``reset`` and ``step`` still
    return whole observations. The env pickles by its URL, so vector envs can hold it (each copy
    opens its own session: reset it).
    """

    metadata = {"render_modes": []}

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
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.url, self.timeout, self.max_message_bytes = url.rstrip("/"), timeout, max_message_bytes
        self.token, self.dynamics = token, dynamics
        self.observation_space = ObservationSpace()
        self.action_space = ActionSpace(ToolSet([]))
        self._ws, self._obs, self._info, self._schemas = None, None, {}, None
        self._messages: list[dict] = []  # the session's last observation's messages
        self._served: ServedTasks | None = None

    @property
    def ws_url(self) -> str:
        return ("ws" + self.url[4:] if self.url.startswith("http") else self.url) + "/ws?observations=delta"

    # the wire ------------------------------------------------------------------
    def _request(self, kind: str, data: dict | None = None) -> dict:
        from websockets.exceptions import ConnectionClosed, WebSocketException
        from websockets.sync.client import connect

        if self._ws is None:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
            try:
                self._ws = connect(
                    self.ws_url,
                    open_timeout=self.timeout,
                    close_timeout=1,
                    max_size=self.max_message_bytes,
                    additional_headers=headers,
                    compression=None,
                )
            except (OSError, WebSocketException, TimeoutError) as e:
                raise ConnectionError(f"cannot reach the env server at {self.url}: {type(e).__name__}: {e}") from None
            self._messages, self._schemas = [], None  # a new session: the server has sent nothing yet
        try:
            try:
                self._ws.send(json.dumps({"type": kind, "data": data or {}}))
            except ConnectionClosed:  # a refused session sends its error frame, then closes: read it
                pass
            reply = json.loads(self._ws.recv(timeout=self.timeout))
        except TimeoutError:
            self._drop()
            raise ConnectionError(f"the env server at {self.url} did not answer within {self.timeout} s") from None
        except (OSError, WebSocketException, ValueError, RecursionError) as e:
            self._drop()
            raise ConnectionError(
                f"lost the env server at {self.url}: {type(e).__name__}: "
                f"{e if not isinstance(e, RecursionError) else 'a reply nested too deeply'}"
            ) from None
        if not isinstance(reply, dict) or not isinstance(reply.get("data"), dict):
            self._drop()
            raise ConnectionError(f"the env server at {self.url} sent a frame that is not an OpenEnv reply")
        if reply.get("type") == "error":
            message = (
                f"{str(reply['data'].get('message'))[:2000]} (server {self.url}, code {reply['data'].get('code')})"
            )
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
        self.action_space.role = obs["role"]
        self._obs, self._info = obs, fields.info
        return obs, reply.reward or 0.0, fields.terminated, fields.truncated, fields.info

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
        from urllib.error import HTTPError, URLError
        from urllib.request import Request, urlopen

        url = ("http" + self.url[2:] if self.url.startswith("ws") else self.url) + "/tasks"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with urlopen(Request(url, headers=headers), timeout=self.timeout) as reply:
                return ServedTasks.model_validate_json(reply.read(self.max_message_bytes + 1))
        except HTTPError as e:
            hint = " (is the token right? serve --token, RemoteEnv(token=...))" if e.code in (401, 403) else ""
            raise ConnectionError(f"the env server at {self.url} refused GET /tasks: HTTP {e.code}{hint}") from None
        except (URLError, OSError) as e:
            raise ConnectionError(f"cannot reach the env server at {self.url}: {e}") from None
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
        except ConnectionError as e:  # the server is gone, or speaks nonsense: the episode ends here, and says why
            obs, self._obs = self._obs, None
            return obs, 0.0, True, False, {**self._info, "tool_calls": [], "ended_by": "server_error", "error": str(e)}
        except ValueError as e:
            raise RuntimeError(str(e)) from None
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
        return {
            "url": self.url,
            "timeout": self.timeout,
            "max_message_bytes": self.max_message_bytes,
            "token": self.token,
            "dynamics": self.dynamics,
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
