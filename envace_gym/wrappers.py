"""Wrappers: who answers rehearse turns, and scoring episodes that an outer limit cuts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from envace_gym.moved import warn

if TYPE_CHECKING:
    from envace_gym.env import EnvACEEnv


class SelfRehearsal(gym.Wrapper):
    """Deprecated until 0.3.0: ``gym.make(id, dynamics="simulated", simulator=agent)`` is the same world, the agent
    answering every call inside ``step`` (its calls' source is ``simulated``).

    Answers every rehearse turn with ``agent`` inside ``step``, so the caller sees only act turns;
    ``info["tool_calls"]`` gathers the calls of the inner steps.
    """

    def __init__(self, env: gym.Env, agent: Any):
        warn("SelfRehearsal", "gym.make(id, dynamics='simulated', simulator=agent)")
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


class ScoreTruncated(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Scores an episode that a wrapper inside it truncates (Gymnasium's ``TimeLimit``).

    ``gym.make(id, max_episode_steps=N)`` puts a ``TimeLimit`` around the env, which
    counts every step (act and rehearse) and cuts the episode without the env knowing,
    so no terminal reward would be computed. Every ``EnvACE/*`` id is registered with
    this wrapper outside that ``TimeLimit``: on a step that comes back truncated while
    the env's own episode is still running, it ends the episode
    (:meth:`~envace_gym.env.EnvACEEnv.finish`, ``ended_by="time_limit"``) and returns its
    reward with ``info["reward_source"]``, ``info["reward_info"]`` and
    ``info["ended_by"]``. Around a hand-made limit: ``ScoreTruncated(TimeLimit(env, N))``.
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not truncated or terminated:
            return obs, reward, terminated, truncated, info
        inner = self.env.unwrapped
        episode = getattr(inner, "episode", None)
        if episode is not None and episode.ended_by is None:
            reward, final = inner.finish("time_limit")
            info = {**info, **{k: v for k, v in final.items() if k != "tool_calls"}}
            obs = inner.observation()
        return obs, reward, terminated, truncated, info


def unwrap(env: gym.Env) -> EnvACEEnv:
    """``env.unwrapped`` of an env that ``gym.make`` gave for one of our ids: an
    :class:`~envace_gym.env.EnvACEEnv`."""
    return cast("EnvACEEnv", env.unwrapped)
