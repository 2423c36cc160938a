"""Test-time private rehearsal: imagine attempts in forks of the episode, then commit one turn."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from envace_gym.agents.base import Agent
from envace_gym.agents.prompting import TokenAgent
from envace_gym.core.episode import Episode
from envace_gym.core.messages import assistant_message, parse_act, transcript
from envace_gym.wrappers import unwrap

MODES = ("parallel", "sequential")
SELECTS = ("memory", "best", "vote")
SCORERS = ("errors", "judge")
PRIVATE_KEY = "private_rehearsal"  # the attempts, as data, in the agent's private observation
TOKEN_RE = re.compile(r"\w+|[^\w\s]")  # a token count for agents without a tokenizer
SHOWN_CHARS = 300  # of each response in the digest the agent reads
KEPT_CHARS = 500  # of each response in the record's private context
JUDGE_PROMPT = (
    "You rate an imagined continuation of your own conversation with a user and tools; its tool "
    "responses were imagined, not real. Reply with one number from 0 (it fails the user's request) "
    "to 10 (it completes the request correctly) and nothing else."
)
MAX_BUDGET = 64  # attempts per committed turn
MAX_TURNS = 32  # generations (act and rehearse turns) per attempt
MAX_SECONDS = 120.0  # of rehearsal per committed turn
ZERO = {"rehearsal_attempts": 0, "rehearsal_turns": 0, "rehearsal_tokens": 0, "rehearsal_seconds": 0.0}


def is_error(content: str) -> bool:
    """Whether a tool message's content is an error response (the env's, or a suite's own
    ``{"error": ...}``, as BFCL's backends answer)."""
    try:
        value = json.loads(content)
    except ValueError:
        return True
    return isinstance(value, dict) and bool(value.get("error"))


def call_key(name: str, arguments: dict) -> tuple[str, str]:
    return name, json.dumps(arguments, sort_keys=True)


def turn_key(action) -> tuple:
    """What two first turns share when they are the same turn: text and canonical calls."""
    text, calls = parse_act(action)
    return text, tuple((*call_key(c.name, c.arguments), c.error and str(c.error.code)) for c in calls)


@dataclass
class Attempt:
    """One imagined continuation as the agent and the scorer may see it: its turns and messages.

    Nothing of the branch's reward, info or gold is kept. ``turns`` holds
    ``{"action", "text", "calls": [{"name", "arguments", "response", "error"}]}``;
    ``messages`` the branch's messages after the committed prefix.
    """

    turns: list[dict]
    messages: list[dict]
    cut: str | None = None  # why it stopped early: a bound or a failing world model (None: it ended)

    @property
    def first(self):
        return self.turns[0]["action"]

    @property
    def errors(self) -> int:
        return sum(self.turn_errors)

    @property
    def turn_errors(self) -> list[int]:
        """Error responses per turn."""
        return [sum(c["error"] is not None for c in t["calls"]) for t in self.turns]

    @property
    def calls_tools(self) -> bool:
        return any(t["calls"] for t in self.turns)

    def view(self, chars: int | None = None) -> dict:
        """The attempt as data, responses cut to ``chars``."""
        return {
            "errors": self.errors,
            "cut": self.cut,
            "turns": [
                {"text": t["text"], "calls": [{**c, "response": c["response"][:chars]} for c in t["calls"]]}
                for t in self.turns
            ],
        }


def digest(attempts: list[Attempt]) -> str:
    """The attempts in words, for the agent's private context."""
    lines = [
        f"Private rehearsal: you imagined {len(attempts)} attempt(s) of your next steps. Their tool "
        "responses were imagined, not real, and the user saw none of this."
    ]
    for k, attempt in enumerate(attempts, 1):
        lines.append(f"Attempt {k} ({attempt.errors} error response(s)):")
        for turn in attempt.turns:
            if turn["text"]:
                lines.append(f"  said: {turn['text'][:SHOWN_CHARS]}")
            lines += [
                f"  called {c['name']}({json.dumps(c['arguments'])}) -> {c['response'][:SHOWN_CHARS]}"
                for c in turn["calls"]
            ]
    lines.append("Now take your next step in the real conversation.")
    return "\n".join(lines)


def private_observation(obs: dict, attempts: list[Attempt]) -> dict:
    """``obs`` with the attempts in the agent's private context: a closing system message (the
    digest) and, as data, ``obs["private_rehearsal"]``. The episode never sees either."""
    return {
        **obs,
        "messages": [*obs["messages"], {"role": "system", "content": digest(attempts)}],
        PRIVATE_KEY: [a.view() for a in attempts],
    }


class _Branch:
    """One private fork of the episode, played ahead by ``actor`` and answered by ``rehearser``."""

    def __init__(self, env, actor: Agent, rehearser: Agent, seen: list[Attempt]):
        self.env, self.actor, self.rehearser, self.seen = env, actor, rehearser, seen
        self.obs = env.observation()
        self.start, self.calls_start = len(env.episode.messages), len(env.episode.calls)
        self.actions: list = []
        self.unsent = None  # the closing message to the user, never stepped (no user reply is needed)
        self.done = env.episode.ended_by is not None
        self.turns = 0  # generations answered in this branch
        self.cut: str | None = None  # why the attempt was stopped early (a bound, a failing world model)

    def responder(self) -> Agent:
        return self.actor if self.obs["role"] == "act" else self.rehearser

    def prompt(self) -> dict:
        return private_observation(self.obs, self.seen) if self.seen and self.obs["role"] == "act" else self.obs

    def stop(self, why: str) -> None:
        self.cut, self.done = why, True

    def advance(self, action, horizon: int | None) -> None:
        self.turns += 1
        if self.obs["role"] == "act":
            if horizon is None and not parse_act(action)[1]:
                self.unsent, self.done = action, True
                return
            self.actions.append(action)
        # the branch's reward and info (gold-derived at its end) stay here
        self.obs, _, terminated, truncated, _ = self.env.step(action)
        self.done = (
            terminated
            or truncated
            or (horizon is not None and len(self.actions) >= horizon and self.obs["role"] == "act")
        )

    def attempt(self) -> Attempt:
        ep = self.env.episode
        records = {c.id: c for c in ep.calls[self.calls_start :]}
        messages = list(ep.messages[self.start :])
        turns, actions = [], iter(self.actions)
        for m in messages:
            if m["role"] == "assistant":
                turns.append({"action": next(actions), "text": m.get("content") or "", "calls": []})
            elif m["role"] == "tool" and turns and m.get("tool_call_id") in records:
                c = records[m["tool_call_id"]]
                error = c.error or ("error" if is_error(m["content"]) else None)
                turns[-1]["calls"].append(
                    {"name": c.name, "arguments": c.arguments, "response": m["content"], "error": error}
                )
        if self.unsent is not None:
            text, _ = parse_act(self.unsent)
            turns.append({"action": self.unsent, "text": text, "calls": []})
            messages.append(assistant_message(text, []))
        return Attempt(turns, messages, self.cut)


class PrivateRehearsal(Agent):
    """``agent``, imagining ``budget`` attempts of its next steps before each committed act turn.

    Each attempt is a fork of the live episode (``env.unwrapped.fork(dynamics="rehearsed")``,
    no state shared with its world), whose tool calls are answered by ``world_model``
    (default: ``agent`` itself) and which ``agent`` plays ahead for ``horizon`` act turns
    (None: until its next message to the user, which is not sent, or the branch's end; an
    attempt whose first turn calls no tool is that one turn, and ``memory`` then commits the
    first attempt's turn: nothing was rehearsed).
    ``mode``: ``parallel`` (independent attempts, their generations batched with
    ``act_batch`` per turn) or ``sequential`` (attempt k sees a digest of attempts 1..k-1
    in its private context). ``select``: ``memory`` (the committed turn is generated with a
    digest of every attempt in the agent's private context), ``best`` (the first turn of the
    attempt ``scorer`` rates highest: ``errors``, fewest error responses, compared turn by turn
    from the first (what follows a first turn also depends on later draws); ``judge``, the
    agent's own 0-10 rating of the imagined transcript; or a callable ``(obs, attempts) ->
    scores``; ties go to the most frequent first turn among them), ``vote`` (the most frequent
    first turn). Remaining ties go to the earliest attempt.

    Branches never execute a real call (a world model that runs worlds, the oracle, is refused on
    suites whose worlds are servers: :attr:`~envace_gym.core.suite.Suite.private_worlds`), and nothing
    of their rewards, info or the task's gold reaches the agent or the scorer: they see the
    committed conversation and the attempts' turns and responses. The private context stays out of the episode; it is
    kept in ``private_context``. :attr:`info` holds the current episode's accounting
    (``rehearsal_attempts``, ``rehearsal_turns``, ``rehearsal_tokens``: generated tokens,
    exact for token agents and counted as words and symbols for others,
    ``rehearsal_seconds``, and ``real_calls``: the committed calls the world answered).
    Each committed turn is bounded: at most ``max_turns`` generations per attempt and
    ``max_seconds`` of rehearsal in all; an attempt cut by a bound, or by an actor or world
    model that raises, is kept with its ``cut`` reason, and never ends the episode.
    One wrapper plays in one env; budget 0 is ``agent`` unchanged.
    """

    def __init__(
        self,
        agent: Agent,
        env: gym.Env,
        budget: int = 4,
        mode: str = "parallel",
        select: str = "best",
        world_model: Agent | None = None,
        horizon: int | None = None,
        scorer: str | Callable = "errors",
        max_turns: int = MAX_TURNS,
        max_seconds: float = MAX_SECONDS,
    ):
        if env is None:
            raise ValueError("private rehearsal forks the episode of the env it plays in: pass env=")
        if not isinstance(budget, int) or budget < 0:
            raise ValueError(f"budget must be an integer >= 0, got {budget!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if select not in SELECTS:
            raise ValueError(f"select must be one of {SELECTS}, got {select!r}")
        if not callable(scorer) and scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {SCORERS} or a callable, got {scorer!r}")
        if horizon is not None and (not isinstance(horizon, int) or horizon < 1):
            raise ValueError(f"horizon must be None or an integer >= 1, got {horizon!r}")
        rehearser = world_model or agent
        if budget and rehearser.runs_worlds and not unwrap(env).suite.private_worlds:
            raise ValueError(
                f"the {rehearser.name} world model answers by running the calls on a world, and "
                f"{unwrap(env).suite.name}'s worlds are server sessions whose effects leave this "
                "process; private rehearsal runs no real call: use world_model='knn' or a model"
            )
        self.agent, self.env, self.budget, self.mode, self.select = agent, env, budget, mode, select
        if budget > MAX_BUDGET or max_turns < 1 or not max_seconds > 0:
            raise ValueError(f"budget must be at most {MAX_BUDGET}, max_turns >= 1 and max_seconds > 0")
        self.world_model, self.horizon, self.scorer = world_model, horizon, scorer
        self.max_turns, self.max_seconds = max_turns, max_seconds
        self.name = (
            agent.name
            if budget == 0
            else (f"{agent.name}+rehearsal(N={budget},{mode},{select},{(world_model or agent).name})")
        )
        self._episode: Episode | None = None
        self._stats = dict(ZERO)
        self.private_context: list[dict] = []

    @property
    def info(self) -> dict:
        """The current episode's accounting, and the committed calls the world answered (``real_calls``)."""
        episode = unwrap(self.env).episode
        calls = episode.calls if episode is not None else []
        return self.episode_stats() | {
            "real_calls": sum(c.source == "real" and c.requestor == "assistant" for c in calls)
        }

    def episode_stats(self) -> dict:
        """The current episode's fields of a run record: the accounting, and the private context
        (``private_context``: per rehearsed turn, its attempts and the chosen one) if any."""
        self._sync()
        out = {**self._stats, "rehearsal_seconds": round(self._stats["rehearsal_seconds"], 4)}
        return out | ({"private_context": list(self.private_context)} if self.private_context else {})

    def reseed(self, seed: int) -> None:
        self.agent.reseed(seed)
        if self.world_model is not None:
            self.world_model.reseed(seed)

    def bind(self, env: gym.Env) -> PrivateRehearsal:
        return PrivateRehearsal(
            self.agent.bind(env),
            env,
            self.budget,
            self.mode,
            self.select,
            self.world_model,
            self.horizon,
            self.scorer,
            self.max_turns,
            self.max_seconds,
        )

    def act_batch(self, observations: list[dict]) -> list:
        if self.budget == 0:
            return self.agent.act_batch(observations)
        return [self.act(obs) for obs in observations]

    def act(self, obs: dict):
        if obs["role"] != "act" or self.budget == 0:
            return self.agent.act(obs)
        self._sync()
        live = unwrap(self.env)
        if obs["messages"] != live.observation()["messages"]:
            raise ValueError("private rehearsal got an observation that is not its env's current one")
        start = time.perf_counter()
        self._deadline = start + self.max_seconds
        attempts = self._parallel() if self.mode == "parallel" else self._sequential()
        chosen = self._choose(obs, attempts)
        self._stats["rehearsal_attempts"] += len(attempts)
        self._stats["rehearsal_seconds"] += time.perf_counter() - start
        self.private_context.append(
            {
                "position": len(obs["messages"]),  # of the committed turn in messages
                "attempts": [a.view(KEPT_CHARS) for a in attempts],
                "chosen": chosen,
            }
        )
        if chosen is None:
            return self.agent.act(private_observation(obs, attempts))
        return attempts[chosen].first

    # attempts --------------------------------------------------------------
    def _branch(self, seen: list[Attempt]) -> _Branch:
        fork = unwrap(self.env).fork(dynamics="rehearsed", reward="actions")
        return _Branch(fork, self.agent.bind(fork), (self.world_model or self.agent).bind(fork), seen)

    def _parallel(self) -> list[Attempt]:
        branches = [self._branch([]) for _ in range(self.budget)]
        self._play(branches)
        return [b.attempt() for b in branches]

    def _sequential(self) -> list[Attempt]:
        attempts: list[Attempt] = []
        for _ in range(self.budget):
            branch = self._branch(list(attempts))
            self._play([branch])
            attempts.append(branch.attempt())
        return attempts

    def _play(self, branches: list[_Branch]) -> None:
        """Step every branch to its end, one generation per branch at a time, batched per responder.

        A branch stops after ``max_turns`` generations, every branch when ``max_seconds`` have
        passed since the committed turn began, and a branch whose responder or step raises stops
        there; each such attempt is kept, with why it was cut."""
        while live := [b for b in branches if not b.done]:
            if time.perf_counter() > self._deadline:
                for b in live:
                    b.stop(f"time bound: {self.max_seconds} s of rehearsal per committed turn")
                return
            groups: dict[int, tuple[Agent, list[_Branch]]] = {}
            for b in live:
                if b.turns >= self.max_turns:
                    b.stop(f"turn bound: {self.max_turns} generations per attempt")
                    continue
                agent = b.responder()
                groups.setdefault(id(agent), (agent, []))[1].append(b)
            for agent, members in groups.values():
                try:
                    actions = self._generate(agent, [b.prompt() for b in members])
                except Exception as e:  # a failing actor or world model ends these attempts, not the episode
                    for b in members:
                        b.stop(f"{agent.name} failed: {type(e).__name__}: {str(e)[:300]}")
                    continue
                for b, action in zip(members, actions):
                    try:
                        b.advance(action, self.horizon)
                    except Exception as e:
                        b.stop(f"the branch failed: {type(e).__name__}: {str(e)[:300]}")

    def _generate(self, agent: Agent, observations: list[dict]) -> list:
        if isinstance(agent, TokenAgent):
            generations = agent.generate(observations)
            self._stats["rehearsal_tokens"] += sum(len(g.completion_ids) for g in generations)
            actions = [g.text for g in generations]
        else:
            actions = agent.act_batch(observations)
            self._stats["rehearsal_tokens"] += sum(
                len(TOKEN_RE.findall(a if isinstance(a, str) else json.dumps(a))) for a in actions
            )
        self._stats["rehearsal_turns"] += len(observations)
        return actions

    # selection -------------------------------------------------------------
    def _choose(self, obs: dict, attempts: list[Attempt]) -> int | None:
        """The attempt whose first turn is committed, or None: generate it with the digest (memory)."""
        played = [i for i, a in enumerate(attempts) if a.turns]  # a failed first generation leaves none
        if self.select == "memory" or not played:
            return None if not played or any(a.calls_tools for a in attempts) else played[0]
        if self.select == "vote":
            return self._most_common(attempts, played)
        scores = list(self._score(obs, [attempts[i] for i in played]))
        return self._most_common(attempts, [i for i, s in zip(played, scores) if s == max(scores)])

    @staticmethod
    def _most_common(attempts: list[Attempt], indices) -> int:
        """The attempt among ``indices`` whose first turn is the most frequent there (then the earliest)."""
        keys = {i: turn_key(attempts[i].first) for i in indices}
        counts = Counter(keys.values())
        return max(keys, key=lambda i: (counts[keys[i]], -i))

    def _score(self, obs: dict, attempts: list[Attempt]) -> list[Any]:  # numbers, or tuples (errors)
        if callable(self.scorer):
            return self.scorer(obs, attempts)
        if self.scorer == "errors":  # fewest errors in the first turn, then in the second, ...
            width = max(len(a.turns) for a in attempts)
            return [tuple(-e for e in a.turn_errors + [0] * (width - len(a.turns))) for a in attempts]
        prompts = [
            {
                "role": "act",
                "tools": [],
                "tool_call": None,
                "messages": [
                    {"role": "system", "content": JUDGE_PROMPT},
                    {
                        "role": "user",
                        "content": "The conversation so far:\n"
                        + transcript(obs["messages"][1:])[-8000:]
                        + "\n\nThe imagined continuation:\n"
                        + transcript(a.messages)[-8000:],
                    },
                ],
            }
            for a in attempts
        ]
        return [self._rating(text) for text in self._generate(self.agent, prompts)]

    @staticmethod
    def _rating(text) -> float:
        found = re.search(r"\d+(?:\.\d+)?", text if isinstance(text, str) else "")
        return min(10.0, float(found[0])) if found else 0.0

    def _sync(self) -> None:
        """Start the accounting afresh when the env has started another episode."""
        episode = unwrap(self.env).episode
        if episode is not self._episode:
            self._episode, self._stats, self.private_context = episode, dict(ZERO), []
