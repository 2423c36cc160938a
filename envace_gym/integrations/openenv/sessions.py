"""One client's session on an env server: its env, the episode it plays there, and the replies to its
``reset``, ``step`` and ``state`` messages (each run in the server's thread pool: episodes may be long, and so
their observations)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import get_args

import gymnasium as gym

from envace_gym.core.grader import without_gold
from envace_gym.integrations.openenv.protocol import RESET_OPTIONS, EnvACEAction, EnvACEState
from envace_gym.play.records import CapturePurpose
from envace_gym.wrappers import unwrap


@dataclass
class Session:
    """A WebSocket client's env and where its episode stands (``delta``: the client asked for observations
    holding only what is new)."""

    env: gym.Env
    task: asyncio.Task
    last_active: float = field(default_factory=time.monotonic)
    busy: bool = False
    episode_id: str | None = None
    step_count: int = 0
    turn: int = 0
    delta: bool = False  # observations hold what is new since the last one
    sent: list = field(default_factory=list)  # the messages of the last observation sent
    sent_tools: list | None = None
    capture_purpose: CapturePurpose = "eval"  # what the client captures the episode for (its reset's)

    def observation(self, obs: dict, info: dict, reward, terminated: bool, truncated: bool) -> dict:
        """An observation frame's data (with the messages and tools the client already has left out, in
        a delta session)."""
        if "reward_info" in info:  # never over the wire, whatever the env was made with
            info = {**info, "reward_info": without_gold(info["reward_info"]) or {}}
        metadata = {"capture_purpose": self.capture_purpose}
        fields = {**obs, "terminated": terminated, "truncated": truncated, "info": info, "metadata": metadata}
        if self.delta:
            messages, sent, start = obs["messages"], self.sent, 0
            while start < min(len(messages), len(sent)) and messages[start] is sent[start]:
                start += 1  # an episode's messages are appended, never edited: identity is enough
            fields["messages"], fields["messages_from"] = messages[start:], start
            fields["tools"] = None if obs["tools"] == self.sent_tools else obs["tools"]
            self.sent, self.sent_tools = messages, obs["tools"]
        return {
            "observation": fields,
            "reward": None if reward is None else float(reward),
            "done": bool(terminated or truncated),
        }

    def reset(self, data: dict) -> str:
        """Reset's reply, as text (run in the pool: episodes may be long, and so their observations)."""
        unknown = set(data) - {"seed", "episode_id", "options", "capture_purpose", *RESET_OPTIONS}
        if unknown:
            raise ValueError(
                f"unknown reset parameters {sorted(unknown)}; give seed, episode_id, options, capture_purpose, "
                f"{', '.join(RESET_OPTIONS)}"
            )
        seed, options = data.get("seed"), dict(data.get("options") or {})
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        purpose = data.get("capture_purpose", "eval")
        if purpose not in get_args(CapturePurpose):
            raise ValueError(f"capture_purpose must be one of {get_args(CapturePurpose)}, got {purpose!r:.40}")
        options.update({k: data[k] for k in RESET_OPTIONS if k in data})
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode_id, self.step_count = str(data.get("episode_id") or uuid.uuid4().hex), 0
        self.capture_purpose = purpose
        self.turn = info["turn"]
        return json.dumps({"type": "observation", "data": self.observation(obs, info, None, False, False)}, default=str)

    def step(self, action: EnvACEAction) -> str:
        """Step's reply, as text (run in the pool)."""
        if unwrap(self.env).episode is None:
            raise RuntimeError("no episode yet: send a reset first")
        obs, reward, terminated, truncated, info = self.env.step(action.value)
        self.step_count, self.turn = self.step_count + 1, info.get("turn", self.turn)
        return json.dumps(
            {"type": "observation", "data": self.observation(obs, info, reward, terminated, truncated)}, default=str
        )

    def state(self) -> EnvACEState:
        """The episode's state, as the ``state`` message answers it."""
        inner = unwrap(self.env)
        if inner.episode is None:
            return EnvACEState()
        return EnvACEState(
            episode_id=self.episode_id,
            step_count=self.step_count,
            task_id=inner.episode.task.id,
            dynamics=inner.episode.dynamics,
            role=inner.role,
            turn=self.turn,
            capture_purpose=self.capture_purpose,
        )
