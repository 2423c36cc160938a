"""The :class:`CandidateEnv` wrapper: an EnvACE env as a ``Discrete`` choice among candidate actions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from envace_gym.integrations.sb3.candidates import (
    CANDIDATE_FEATURES,
    GLOBAL_FEATURES,
    STOP,
    Candidates,
    Conversation,
    _candidates,
    _leaves,
    _parse,
)
from envace_gym.wrappers import unwrap


class CandidateEnv(gym.Wrapper):
    """An EnvACE env for stable-baselines3: ``Discrete`` candidate actions, a numeric ``Box`` observation.

    Each step is one act turn. The action, an integer in the ``Discrete`` space, picks one
    of the turn's candidates (an index past the last candidate wraps around, ``index %
    len(candidates)``, so that a policy without masks always acts; anything outside the
    space, NaN, floats, lists or None, is a ValueError), which is sent as
    the act text; the following rehearse turns are answered by ``world_model`` inside the
    step (an agent, or a name for :func:`envace_gym.agents.load`: ``"knn"``,
    ``"oracle"``), so the policy only ever acts. Under ``real`` dynamics no rehearse turn
    happens and no world model is needed. ``dynamics`` overrides the inner env's for
    every episode (``reset(options={"dynamics": ...})``).

    Candidates come from the suite: ``suite.candidate_actions(task, obs)`` when the suite
    defines it, else :func:`~envace_gym.integrations.sb3.candidates.default_candidates` over the suite's
    tools; ``candidates=`` (a function of the observation) replaces both.

    The observation is ``max_candidates`` rows of ``len(CANDIDATE_FEATURES) + max_tools``
    numbers in [0, 1], flattened, then ``GLOBAL_FEATURES`` (turn, calls so far, last call
    an error, candidate count). A row describes one candidate: is there one; is it a reply,
    a final reply; was the same call made before, the same tool; its
    :meth:`~envace_gym.integrations.sb3.candidates.Conversation.relevance` (argument values the user wrote,
    ids a tool response
    ties to the user's words, quoted values the user introduced with the argument's name);
    its argument count; same tool as the last call; its slot; a one-hot of its tool.
    ``action_masks()`` marks the real candidates (for sb3-contrib's ``MaskablePPO``).
    Any SB3 policy takes the flat ``Box`` (``"MlpPolicy"``); ``CandidatePolicy``
    scores every row with one shared network and learns far faster.
    ``info`` is the inner env's, with ``action_text``, ``candidates`` (their count) and
    every answered call of the step in ``tool_calls``; the reward is the inner env's
    terminal reward (``info["reward_source"]`` says which).
    """

    def __init__(
        self,
        env: gym.Env,
        world_model: Any = None,
        dynamics: str | None = None,
        max_candidates: int = 32,
        per_tool: int = 12,
        max_tools: int = 16,
        candidates: Candidates | None = None,
        max_rehearsals: int = 32,
    ):
        super().__init__(env)
        from envace_gym.agents import load

        self.world_model = load(world_model, env=env) if isinstance(world_model, str) else world_model
        self.dynamics = dynamics
        self.max_candidates, self.per_tool, self.max_tools = max_candidates, per_tool, max_tools
        self.max_rehearsals = max_rehearsals
        self._candidates_fn = candidates
        # one-hot slots in the suite's tool order (tools past max_tools share the last slot)
        self._tool_index = {name: min(i, max_tools - 1) for i, name in enumerate(unwrap(env).tools.names)}
        self.n_features = len(CANDIDATE_FEATURES) + max_tools
        self.action_space = gym.spaces.Discrete(max_candidates)
        size = max_candidates * self.n_features + len(GLOBAL_FEATURES)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,), np.float32)
        self._obs: dict | None = None
        self.candidates: list[str] = []

    # gym API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        options = dict(options or {})
        if self.dynamics is not None:
            options.setdefault("dynamics", self.dynamics)
        obs, info = self.env.reset(seed=seed, options=options)
        return self._encode(obs), self._with(info, None)

    def step(self, action):
        if self._obs is None:
            raise RuntimeError("call reset() first")
        if isinstance(action, bool) or not self.action_space.contains(action):
            raise ValueError(
                f"action {str(action)[:60]} is not in the action space Discrete({self.max_candidates}): "
                "give one integer index"
            )
        text = self.candidates[int(action) % len(self.candidates)]
        obs, reward, terminated, truncated, info = self.env.step(text)
        calls = list(info.get("tool_calls", []))
        rehearsals = 0
        while obs["role"] == "rehearse" and not (terminated or truncated):
            if self.world_model is None:
                raise ValueError(
                    "a rehearse turn came up and no world_model= answers it: pass "
                    "CandidateEnv(env, world_model='knn' or 'oracle' or an agent)"
                )
            rehearsals += 1
            if rehearsals > self.max_rehearsals:
                raise RuntimeError(f"more than {self.max_rehearsals} rehearse turns in one step")
            obs, reward, terminated, truncated, info = self.env.step(self.world_model.act(obs))
            calls += info.get("tool_calls", [])
        info = self._with({**info, "tool_calls": calls}, text)
        return self._encode(obs), float(reward), terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(self.max_candidates, dtype=bool)
        mask[: len(self.candidates)] = True
        return mask

    # encoding ------------------------------------------------------------------
    def _with(self, info: dict, text: str | None) -> dict:
        return {**info, "action_text": text, "candidates": len(self.candidates)}

    def _candidates(self, obs: dict, conv: Conversation) -> list[str]:
        if self._candidates_fn is not None:
            found = self._candidates_fn(obs)
        else:
            inner = unwrap(self.env)
            assert inner.episode is not None  # asked during an episode
            suite = inner.suite
            if hasattr(suite, "candidate_actions"):
                found = suite.candidate_actions(inner.episode.task, obs)
            else:
                found = _candidates(conv, obs["tools"], self.per_tool, self.max_candidates)
        return list(found)[: self.max_candidates] or ["Please go on."]

    def _encode(self, obs: dict) -> np.ndarray:
        self._obs = obs
        conv = Conversation(obs)
        self.candidates = self._candidates(obs, conv)
        used = {name for name, _ in conv.calls}
        last_tool = conv.calls[-1][0] if conv.calls else None
        rows = np.zeros((self.max_candidates, self.n_features), np.float32)
        base = len(CANDIDATE_FEATURES)
        for i, text in enumerate(self.candidates):
            rows[i, 0], rows[i, 10] = 1.0, i / self.max_candidates
            call = _parse(text)
            if call is None:
                rows[i, 1 if STOP not in text else 2] = 1.0
                continue
            name, args = call
            rows[i, 3] = conv.made(name, args)
            rows[i, 4] = name in used
            rows[i, 5:8] = conv.relevance(args)
            rows[i, 8] = min(len(_leaves(args)), 4) / 4
            rows[i, 9] = name == last_tool
            rows[i, base + self._tool_slot(name)] = 1.0
        turn = sum(m["role"] == "assistant" for m in obs["messages"])
        limit = getattr(self.env.unwrapped, "max_turns", None) or 50
        glob = np.array(
            [
                min(turn / limit, 1.0),
                min(len(conv.calls) / 10, 1.0),
                conv.last_error,
                len(self.candidates) / self.max_candidates,
            ],
            np.float32,
        )
        return np.concatenate([rows.ravel(), glob])

    def _tool_slot(self, name: str) -> int:
        if name not in self._tool_index:  # a tool that appeared later (BFCL's held-out functions)
            self._tool_index[name] = min(len(self._tool_index), self.max_tools - 1)
        return self._tool_index[name]
