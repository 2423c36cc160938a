"""What an ``envace-gym serve`` server may send, as strict schemas: a reply that does not fit is a bad
reply (:class:`~envace_gym.integrations.openenv.client.RemoteEnv` ends the episode as a server error)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Fidelity(BaseModel):
    """A shadow call's fidelity measures (:func:`~envace_gym.fidelity.fidelity`)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)
    parsed: bool
    shape: float
    leaf_match: float
    error_agree: bool
    exact: bool


class ServedCall(BaseModel):
    """A record of a served ``info["tool_calls"]``."""

    model_config = ConfigDict(strict=True)
    id: str
    name: str
    arguments: dict[str, Any]
    requestor: str
    source: str
    error: str | None = None
    real: str | None = None
    rehearsed: str | None = None
    fidelity: Fidelity | None = None
    route: dict[str, Any] | None = None


class ServedInfo(BaseModel):
    """A served ``info``: the keys every ``reset`` and ``step`` returns, and those an episode's last step adds,
    of the contract's types; other keys pass as they are."""

    model_config = ConfigDict(strict=True)
    role: Literal["act", "rehearse"]
    dynamics: str
    task_id: str
    turn: int = Field(ge=0)
    tool_calls: list[ServedCall]
    rehearsal_errors: int = Field(ge=0)
    ended_by: str | None = None
    reward_source: str | None = None
    reward_info: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


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
    info: ServedInfo

    @model_validator(mode="after")
    def _says_why_it_ended(self) -> Observed:
        if (self.terminated or self.truncated) and self.info.ended_by is None:
            raise ValueError("the last step of an episode has no info['ended_by']")
        return self


class Reply(BaseModel):
    """An ``observation`` frame's data; the reward a finite number (``NaN``, ``1e999``: refused)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)
    observation: Observed
    reward: float | None = None
    done: bool = False


class Frame(BaseModel):
    """Any reply frame: its ``type`` and its ``data`` object."""

    model_config = ConfigDict(strict=True)
    type: str
    data: dict[str, Any]


class ServedError(BaseModel):
    """An ``error`` frame's data (OpenEnv's ``WSErrorResponse``)."""

    model_config = ConfigDict(strict=True)
    message: str
    code: str


class ServedState(BaseModel):
    """A ``state`` frame's data: the server's view of the session."""

    model_config = ConfigDict(strict=True)
    episode_id: str | None
    step_count: int = Field(ge=0)
    task_id: str | None
    dynamics: str | None
    role: Literal["act", "rehearse"] | None
    turn: int = Field(ge=0)


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
