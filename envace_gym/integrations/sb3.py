"""stable-baselines3 bridge: a tool-use env as a ``Discrete`` choice among candidate actions.

SB3's algorithms need numeric spaces; an EnvACE env's actions are model text. The
:class:`CandidateEnv` wrapper turns each act turn into a choice among at most
``max_candidates`` candidate actions (tool calls with arguments taken from the
conversation, a reply to the user, a final reply that ends the conversation) and
shows the policy a numeric description of every candidate. Rehearse turns never
reach the policy: a world model (``knn``, ``oracle`` or any agent) answers them inside
``step``. So one policy trains under ``rehearsed`` dynamics and is scored under ``real``
ones::

    import gymnasium as gym, envace_gym
    from stable_baselines3 import PPO
    from envace_gym.integrations.sb3 import CandidateEnv, CandidatePolicy

    train = CandidateEnv(gym.make("EnvACE/tau2-mock-gen-v0", split="train", dynamics="rehearsed",
                                  reward="replay", max_turns=8), world_model="oracle")
    model = PPO(CandidatePolicy, train).learn(16_000)
    test = CandidateEnv(gym.make("EnvACE/tau2-mock-gen-v0", split="test", max_turns=8))

The wrapper is a plain Gymnasium env: only ``CandidatePolicy`` needs torch and
stable-baselines3, imported when it is first used.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from envace_gym.messages import format_tool_call, parse_act
from envace_gym.wrappers import unwrap

STOP = "###STOP###"  # tau2's end-of-conversation token; other suites read it as plain text
ID_RE = re.compile(r"#\w*\d\w*|\b[A-Za-z][A-Za-z0-9]*[_-][A-Za-z0-9_-]*\d[A-Za-z0-9_-]*\b")
QUOTED_RE = re.compile(r"'([^'\n]{2,80})'|\"([^\"\n]{2,80})\"")
NUMBER_RE = re.compile(r"(?<![\w.#-])\d+(?:\.\d+)?(?![\w.-])")
OMIT = object()
CANDIDATE_FEATURES = (
    "present",
    "reply",
    "finish",
    "repeated",
    "tool_used",
    "args_in_user_text",
    "args_linked",
    "args_named",
    "n_args",
    "same_tool_as_last",
    "slot",
)
GLOBAL_FEATURES = ("turn", "calls", "last_call_error", "candidates")

#: The candidate actions of an observation.
Candidates = Callable[[dict], list[str]]


# candidates ----------------------------------------------------------------
class Conversation:
    """What the candidates and features are drawn from: the values the conversation shows."""

    def __init__(self, obs: dict):
        messages = obs["messages"]
        self.user_text = "\n".join(m["content"] or "" for m in messages[1:] if m["role"] == "user")
        self.calls = [
            (c["function"]["name"], c["function"]["arguments"])
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls", [])
        ]
        self.responses = [m["content"] or "" for m in messages if m["role"] == "tool"]
        texts = [self.user_text, *self.responses]
        self.ids = list(dict.fromkeys(i for t in texts for i in ID_RE.findall(t)))
        self.quoted = list(dict.fromkeys(a or b for a, b in QUOTED_RE.findall(self.user_text)))
        self.numbers = list(dict.fromkeys(NUMBER_RE.findall(ID_RE.sub(" ", self.user_text))))
        self.linked = self._linked()
        self.last_error = bool(self.responses) and '"error"' in self.responses[-1][:20]
        self._made = {(name, json.dumps(args, sort_keys=True)) for name, args in self.calls}
        self._relevance: dict[str, tuple[float, float, float]] = {}

    def _linked(self) -> set[str]:
        """Ids that a tool response puts in one JSON object with something the user said."""
        said = self.user_text.lower()
        linked: set[str] = set()

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                leaves = [v for v in node.values() if isinstance(v, str)]
                leaves += [x for v in node.values() if isinstance(v, list) for x in v if isinstance(x, str)]
                if any(len(v) >= 3 and v.lower() in said and not ID_RE.fullmatch(v) for v in leaves):
                    linked.update(v for v in leaves if ID_RE.fullmatch(v))
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        for text in self.responses:
            try:
                walk(json.loads(text))
            except ValueError:
                pass
        return linked

    def values(self, name: str, schema: dict) -> list:
        """Candidate values for one argument: its enum, ids for ``*_id``, quoted text, numbers."""
        for key in ("anyOf", "oneOf"):
            options = [s for s in schema.get(key, []) if s.get("type") != "null"]
            if options:
                schema = options[0]
        if "enum" in schema:
            return list(schema["enum"])
        kind = schema.get("type")
        if kind == "boolean":
            return [True, False]
        if kind in ("integer", "number"):
            cast = int if kind == "integer" else float
            return [cast(float(n)) for n in self.numbers if kind == "number" or float(n).is_integer()]
        if kind == "array" and name.endswith("ids"):
            return [[i] for i in self._ids_for(name[:-4])]
        if kind not in (None, "string"):
            return []
        if name == "id" or name.endswith("_id"):
            return self._ids_for(name[:-3])
        return list(self.quoted)

    def _ids_for(self, prefix: str) -> list[str]:
        """Ids that may fill an argument named ``{prefix}_id``: those named like it (``user_3``
        for ``user_id``) and those with no word prefix (``#W2378156``), never ``task_3``; the
        ids a tool response ties to the user's words first, then those the user wrote."""
        prefix = prefix.lower()
        fits = [
            i
            for i in self.ids
            if not re.match(r"[A-Za-z]+[_-]", i.lstrip("#")) or not prefix or i.lower().startswith(prefix)
        ]
        return sorted(fits, key=lambda i: (i not in self.linked, i not in self.user_text))

    def made(self, name: str, arguments: dict) -> bool:
        """Whether the agent already made exactly this call."""
        return (name, json.dumps(arguments, sort_keys=True)) in self._made

    def relevance(self, arguments: dict) -> tuple[float, float, float]:
        """Shares of a call's argument values that the user wrote, of its ids that a tool
        response ties to the user's words, and of its quoted values that the user introduced
        with the argument's name (``titled 'Book venue'`` for ``title``). A call without
        arguments: 0.5, 0 and 0."""
        key = json.dumps(arguments, sort_keys=True)
        if key not in self._relevance:
            self._relevance[key] = self._score(arguments)
        return self._relevance[key]

    def _score(self, arguments: dict) -> tuple[float, float, float]:
        values = _leaves(arguments)
        if not values:
            return 0.5, 0.0, 0.0
        said = self.user_text.lower()
        ids = [v for v in values if isinstance(v, str) and ID_RE.fullmatch(v)]
        quoted = [(k, v) for k, v in arguments.items() if isinstance(v, str) and v in self.quoted]
        return (
            sum(str(v).lower() in said for v in values) / len(values),
            sum(v in self.linked for v in ids) / len(ids) if ids else 0.0,
            sum(self._named(k, v) for k, v in quoted) / len(quoted) if quoted else 0.0,
        )

    def _named(self, name: str, value: str) -> bool:
        said, stem = self.user_text.lower(), re.split(r"[_\W]", name.lower())[0][:5]
        return any(
            stem and stem in said[max(0, m.start() - 40) : m.start()]
            for m in re.finditer(re.escape(value.lower()), said)
        )

    def summary(self) -> str:
        """A reply that states the ids the tool responses tied to the user's request."""
        ids = [i for i in self.ids if i in self.linked] or [i for i in self.ids if i not in self.user_text]
        return f"Done. For reference: {', '.join(ids)}." if ids else "Done, your request is complete."


def default_candidates(obs: dict, tools: list[dict] | None = None, per_tool: int = 12, limit: int = 32) -> list[str]:
    """Candidate act actions for ``obs``: a reply, a final reply, then tool calls, best first.

    A tool's calls fill each argument from the conversation (:meth:`Conversation.values`)
    and are the product of those choices, an optional argument also left out; at most
    ``per_tool`` per tool, ``limit`` in all. A tool with a required argument that nothing
    in the conversation can fill is left out. The calls are ranked by
    :meth:`Conversation.relevance` (ties in the tools' order), calls already made last, so
    that a slot tends to mean the same thing from one turn to the next.
    """
    return _candidates(Conversation(obs), tools if tools is not None else obs["tools"], per_tool, limit)


def _candidates(conv: Conversation, tools: list[dict], per_tool: int, limit: int) -> list[str]:
    summary = conv.summary()
    calls: list[tuple[str, dict]] = []

    def rank(call: tuple[str, dict]) -> tuple:
        return conv.made(*call), -sum(conv.relevance(call[1]))

    for tool in tools:
        fn = tool["function"]
        params = fn.get("parameters") or {}
        required = set(params.get("required", []))
        choices = []
        for arg, schema in (params.get("properties") or {}).items():
            values = conv.values(arg, schema)
            if arg in required:
                if not values:
                    break
                choices.append([(arg, v) for v in values])
            elif values:
                choices.append([(arg, OMIT), *((arg, v) for v in values)])
        else:
            combos = (c for c in itertools.product(*choices) if _distinct_text(c))
            tool_calls = [(fn["name"], {k: v for k, v in c if v is not OMIT}) for c in itertools.islice(combos, 512)]
            calls += sorted(tool_calls, key=rank)[:per_tool]
    ranked = sorted(calls, key=rank)
    out = [summary, f"{summary} {STOP}", *(format_tool_call(*c) for c in ranked)]
    return list(dict.fromkeys(out))[:limit]


# the wrapper -----------------------------------------------------------------
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
    defines it, else :func:`default_candidates` over the suite's tools; ``candidates=``
    (a function of the observation) replaces both.

    The observation is ``max_candidates`` rows of ``len(CANDIDATE_FEATURES) + max_tools``
    numbers in [0, 1], flattened, then ``GLOBAL_FEATURES`` (turn, calls so far, last call
    an error, candidate count). A row describes one candidate: is there one; is it a reply,
    a final reply; was the same call made before, the same tool; its
    :meth:`Conversation.relevance` (argument values the user wrote, ids a tool response
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


def _distinct_text(combo: tuple) -> bool:
    """No quoted text fills two arguments of one call."""
    texts = [v for _, v in combo if isinstance(v, str)]
    return len(texts) == len(set(texts))


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[str, dict] | None:
    """``(name, arguments)`` of a candidate's first well-formed tool call, else None (a reply)."""
    calls = [c for c in parse_act(text)[1] if c.error is None]
    return (calls[0].name, calls[0].arguments) if calls else None


def _leaves(value: Any) -> list:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


# a policy that scores every candidate with the same network (needs torch and stable-baselines3) --
@functools.cache
def _candidate_policy() -> type:
    import torch
    from stable_baselines3.common.policies import ActorCriticPolicy
    from torch import nn

    class CandidateScorer(nn.Module):
        """Rows (one per candidate, with the global features appended) through one shared MLP:
        a score per candidate (the action logits; empty slots masked) and a pooled value latent."""

        def __init__(self, n_candidates: int, n_features: int, n_global: int, hidden: int):
            super().__init__()
            self.k, self.f, self.g = n_candidates, n_features, n_global
            self.rows = nn.Sequential(
                nn.Linear(n_features + n_global, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
            )
            self.score = nn.Linear(hidden, 1)
            self.value = nn.Sequential(nn.Linear(2 * hidden + n_global, hidden), nn.Tanh())
            self.latent_dim_pi, self.latent_dim_vf = n_candidates, hidden

        def _hidden(self, features):
            rows = features[:, : self.k * self.f].reshape(-1, self.k, self.f)
            glob = features[:, self.k * self.f :]
            h = self.rows(torch.cat([rows, glob[:, None, :].expand(-1, self.k, -1)], dim=-1))
            return rows[..., 0] > 0.5, h, glob

        def forward_actor(self, features):
            present, h, _ = self._hidden(features)
            return self.score(h).squeeze(-1).masked_fill(~present, -1e8)

        def forward_critic(self, features):
            present, h, glob = self._hidden(features)
            weights = present.float()[..., None]
            mean = (h * weights).sum(1) / weights.sum(1).clamp(min=1.0)
            peak = h.masked_fill(~present[..., None], -1.0).max(1).values
            return self.value(torch.cat([mean, peak, glob], dim=-1))

        def forward(self, features):
            return self.forward_actor(features), self.forward_critic(features)

    class CandidatePolicy(ActorCriticPolicy):
        """An actor-critic for :class:`CandidateEnv`: one shared network scores each candidate
        row, so what it learns about a candidate holds in every slot (``policy_kwargs``:
        ``n_candidates``, the env's ``max_candidates``, and ``hidden``)."""

        # SB3 declares an MlpExtractor; any module with its latent sizes and forward methods serves
        mlp_extractor: CandidateScorer  # type: ignore[assignment]

        def __init__(self, *args, n_candidates: int = 32, hidden: int = 64, **kwargs):
            self.n_candidates, self.hidden = n_candidates, hidden
            super().__init__(*args, **kwargs)

        def _build_mlp_extractor(self) -> None:
            assert self.observation_space.shape is not None  # CandidateEnv's Box
            size = int(np.prod(self.observation_space.shape)) - len(GLOBAL_FEATURES)
            if size % self.n_candidates:
                raise ValueError(
                    f"the observation does not hold {self.n_candidates} candidate rows: "
                    "pass policy_kwargs={'n_candidates': env.max_candidates}"
                )
            self.mlp_extractor = CandidateScorer(
                self.n_candidates, size // self.n_candidates, len(GLOBAL_FEATURES), self.hidden
            ).to(self.device)

        def _build(self, lr_schedule) -> None:
            super()._build(lr_schedule)
            self.action_net = nn.Identity()  # the scores are the logits
            nn.init.orthogonal_(self.mlp_extractor.score.weight, gain=0.01)
            nn.init.zeros_(self.mlp_extractor.score.bias)
            self.optimizer = self.optimizer_class(  # type: ignore[call-arg]  # SB3 types it as the base Optimizer
                self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
            )

    return CandidatePolicy


def __getattr__(name: str):
    if name == "CandidatePolicy":  # built on first use, so the wrapper alone needs no torch
        return _candidate_policy()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [  # noqa: F822 (CandidatePolicy is defined when torch imports)
    "CANDIDATE_FEATURES",
    "GLOBAL_FEATURES",
    "CandidateEnv",
    "CandidatePolicy",
    "Conversation",
    "default_candidates",
]
