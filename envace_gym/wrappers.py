"""Wrappers that change who answers rehearse turns."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class SelfRehearsal(gym.Wrapper):
    """Answers every rehearse turn with ``agent`` inside ``step``, so the caller sees only act turns.

    With the acting agent itself as ``agent``, a plain agent is evaluated in its own
    rehearsed world; ``info["tool_calls"]`` gathers the calls of the inner steps.
    """

    def __init__(self, env: gym.Env, agent: Any):
        super().__init__(env)
        self.agent = agent

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        calls = list(info["tool_calls"])
        while obs["role"] == "rehearse" and not (terminated or truncated):
            obs, reward, terminated, truncated, info = self.env.step(self.agent.act(obs))
            calls += info["tool_calls"]
        info["tool_calls"] = calls
        return obs, reward, terminated, truncated, info
