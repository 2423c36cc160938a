"""OpenEnv's wire protocol (version 0.10) as :class:`~envace_gym.integrations.openenv.server.EnvServer`
speaks it: the action a client sends, the observation and state it gets back, error frames, and the
JSON-RPC answer of ``POST /mcp`` and of ``mcp`` messages (``tools/list`` only)."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
from pydantic import BaseModel, ConfigDict, Field, model_validator

from envace_gym.play.records import CapturePurpose
from envace_gym.wrappers import unwrap

PROTOCOL = "0.10"
RESET_OPTIONS = ("task_id", "dynamics")  # reset data keys that go into reset(options=...)


class EnvACEAction(BaseModel):
    """One step's action: the model's raw ``text``, or an OpenAI-style assistant ``message``."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    message: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one(self) -> EnvACEAction:
        if (self.text is None) == (self.message is None):
            raise ValueError("give exactly one of 'text' and 'message'")
        return self

    @property
    def value(self) -> str | dict:
        if self.text is not None:
            return self.text
        assert self.message is not None  # _one: exactly one is given
        return self.message


class EnvACEObservation(BaseModel):
    """A chat prompt for the next generation, and how the last step ended."""

    role: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = Field(description="null in a delta session when they did not change")
    tool_call: dict[str, Any] | None = None
    messages_from: int = Field(
        0, description="delta sessions: how many messages of the previous observation come before these"
    )
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict)
    done: bool = False
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class EnvACEState(BaseModel):
    episode_id: str | None = None
    step_count: int = 0
    task_id: str | None = None
    dynamics: str | None = None
    role: str | None = None
    turn: int = 0
    capture_purpose: CapturePurpose | None = None


def jsonable(value: Any) -> Any:
    """``value`` as the wire carries it (what is not JSON becomes its text)."""
    return json.loads(json.dumps(value, default=str))


def error(message: str, code: str, **more: Any) -> dict:
    """An OpenEnv error frame (``WSErrorResponse``)."""
    return {"type": "error", "data": {"message": message, "code": code, **more}}


def tools_list(env: gym.Env) -> dict:
    """The episode's tools as an MCP ``tools/list`` result."""
    return {
        "tools": [
            {
                "name": s["function"]["name"],
                "description": s["function"].get("description", ""),
                "inputSchema": s["function"].get("parameters", {"type": "object"}),
            }
            for s in unwrap(env).tools.schemas
        ]
    }


def rpc(request: Any, env: gym.Env) -> dict:
    """A JSON-RPC 2.0 answer: ``tools/list`` only (calls go through ``step``, where the dynamics decide
    who answers them)."""
    if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}
    if request["method"] != "tools/list":
        return {
            "jsonrpc": "2.0",
            "id": request.get("id"),
            "error": {
                "code": -32601,
                "message": f"method {request['method']!r} not found: this server lists "
                "tools; calls go through step, under the episode's dynamics",
            },
        }
    return {"jsonrpc": "2.0", "id": request.get("id"), "result": tools_list(env)}
