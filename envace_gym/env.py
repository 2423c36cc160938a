"""The Gymnasium environment whose step switches between real tools and rehearsal."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import deque
from typing import Any, Self

import gymnasium as gym

from envace_gym.core.episode import CallRecord, Episode, recorded, recording_table
from envace_gym.core.errors import ErrorCode, ToolError, error_code_of_text
from envace_gym.core.grader import without_gold
from envace_gym.core.limits import BudgetExceeded, Limits, run_bounded
from envace_gym.core.messages import (
    MAX_DUMP_GROWTH,
    ToolCall,
    assistant_message,
    escape_tags,
    parse_act,
    rehearsal_content,
    tool_message,
    transcript,
)
from envace_gym.core.response import OVER_TIME, Response, checked, execute
from envace_gym.core.suite import Suite, User, World
from envace_gym.dynamics import DYNAMICS, Dynamics, check_dynamics
from envace_gym.fidelity import fidelity
from envace_gym.rehearse_prompts import REHEARSAL_FORMATS, ResponseCache, episode_prompt
from envace_gym.rewards import RewardFn, check_reward, default_reward, resolve_reward, score_episode
from envace_gym.routing import FidelityRouter
from envace_gym.spaces import ActionSpace, ObservationSpace


class EnvACEEnv(gym.Env):
    """A tool-use task as a Gymnasium env with swappable dynamics (the contract: docs/contract).

    Observations are chat prompts (:class:`~envace_gym.spaces.ObservationSpace`); actions are model
    text. An ``act`` turn's tool calls are validated, then answered as ``dynamics`` says
    (:data:`~envace_gym.dynamics.DYNAMICS`): the world, the agent on ``rehearse`` turns, a ``simulator``,
    ``recordings``, a coin with ``p_real``, or a ``router`` (:class:`~envace_gym.routing.FidelityRouter`).
    The reward is terminal, ``info["reward_source"]`` names it, and ``info["reward_info"]`` holds no gold
    unless ``gold_in_info`` (:func:`~envace_gym.core.grader.without_gold`). ``max_turns`` and
    ``max_steps_per_turn`` truncate; ``limits`` (:class:`~envace_gym.core.limits.Limits`) bound each call and
    user turn. Nothing raises out of ``step``: a failure (a world's :attr:`~envace_gym.core.suite.World.failure`
    among them) ends the episode with ``info["error"]``. ``owns_suite``: :meth:`close` also closes the
    suite (:meth:`~envace_gym.core.suite.Suite.close`: a server's processes). A
    rehearse observation is the conversation itself (``rehearsal_format="inline"``) or a simulator prompt
    with earlier responses of the tool (``"prompted"``, from ``response_cache``).

    Example::

        >>> import gymnasium as gym, envace_gym
        >>> env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
        >>> obs, info = env.reset(seed=0, options={"task_id": "5"})
        >>> obs["role"]
        'act'
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    observation_space: ObservationSpace
    action_space: ActionSpace

    def __init__(
        self,
        suite: Suite,
        split: str | None = None,
        task_ids: list | None = None,
        dynamics: str = "real",
        reward: str | RewardFn | None = None,
        user: str | User = "scripted",
        user_kwargs: dict | None = None,
        max_turns: int | None = 50,
        max_steps_per_turn: int | None = None,
        p_real: float = 0.5,
        simulator: Any = None,
        recordings: list[dict] | None = None,
        rehearsal_format: str = "inline",
        response_cache: ResponseCache | None = None,
        examples_per_tool: int = 3,
        limits: Limits | None = None,
        render_mode: str | None = None,
        router: FidelityRouter | None = None,
        gold_in_info: bool = False,
        owns_suite: bool = False,
    ):
        self.suite, self.owns_suite = suite, owns_suite
        self.task_ids = [str(t) for t in task_ids] if task_ids else suite.task_ids(split)
        # the split the tasks come from: None for all tasks, or for given ids that are not all in it
        self.split = (
            split if not task_ids or split is None or set(self.task_ids) <= set(suite.task_ids(split)) else None
        )
        if not self.task_ids:
            raise ValueError(f"no tasks selected in {suite.name} (split={split!r})")
        for task_id in self.task_ids:
            suite.task(task_id)  # fail early on unknown ids
        self._task_set = set(self.task_ids)
        check_dynamics(dynamics, simulator)
        reward = resolve_reward(reward)
        if reward is not None:
            check_reward(reward, dynamics)
        if not 0.0 <= p_real <= 1.0:
            raise ValueError(f"p_real must be in [0, 1], got {p_real}")
        if rehearsal_format not in REHEARSAL_FORMATS:
            raise ValueError(f"rehearsal_format must be one of {REHEARSAL_FORMATS}, got {rehearsal_format!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.dynamics, self.reward, self.user = dynamics, reward, user
        self.user_kwargs, self.gold_in_info = user_kwargs or {}, gold_in_info
        self.max_turns, self.max_steps_per_turn = max_turns, max_steps_per_turn
        self.p_real, self.simulator = p_real, simulator
        self.router = router if router is not None else FidelityRouter()
        self._routes: dict[str, dict] = {}  # call id -> the estimate and reason that routed it (adaptive)
        self.recordings, self.examples_per_tool = recordings, examples_per_tool
        self.rehearsal_format, self.response_cache = rehearsal_format, response_cache
        self.limits = limits or Limits()
        if suite.bounds_calls:  # its worlds bound each call themselves
            self.limits = dataclasses.replace(self.limits, call_seconds=None)
        self.render_mode = render_mode
        self.observation_space = ObservationSpace()
        self.tools = suite.tools(suite.task(self.task_ids[0]))
        self.action_space = ActionSpace(self.tools)
        self.episode: Episode | None = None
        self._error: str | None = None
        if isinstance(simulator, str):
            raise TypeError(
                f"simulator={simulator!r}: an agent name is resolved by gym.make (registered ids); "
                "here give the agent, or a function of the env that returns it"
            )
        if callable(simulator) and not hasattr(simulator, "act"):  # a factory: the agent that plays in this env
            self.simulator = simulator(self)

    @property
    def _live(self) -> Episode:
        """The current episode; a RuntimeError before the first reset."""
        if self.episode is None:
            raise RuntimeError("no episode yet: call reset()")
        return self.episode

    # public API ----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options is None:
            options = {}
        if not isinstance(options, dict):
            raise TypeError(f"reset options must be a dict, got {type(options).__name__}")
        dynamics = options.get("dynamics", self.dynamics)
        check_dynamics(dynamics, self.simulator)
        task_id = options.get("task_id")
        if task_id is None:
            task_id = self.task_ids[int(self.np_random.integers(len(self.task_ids)))]
        elif str(task_id) not in self._task_set:
            raise ValueError(
                f"task {task_id!r} is not one of this env's tasks ({self.suite.name}); "
                "select it with gym.make(..., task_ids=[...]) or another split="
            )
        task = self.suite.task(str(task_id))
        if self.episode is not None:  # the last episode's world lets go of its server session
            self.episode.world.close(wait=False)
        self._reward = self.reward if self.reward is not None else default_reward(self.suite, dynamics, [task])
        check_reward(self._reward, dynamics)
        self.tools = self.suite.tools(task)
        self.action_space.tools, self.action_space.role = self.tools, "act"
        world = self.suite.new_world(task)
        self._user = self.suite.make_user(self.user, task, seed=int(self.np_random.integers(2**31)), **self.user_kwargs)
        self.episode = Episode(self.suite, task, world, dynamics, limits=self.limits)
        self.episode.messages = [
            {"role": "system", "content": self.suite.system_prompt(task)},
            *self.suite.opening_messages(task),
        ]
        self._pending: deque[tuple[ToolCall, str]] = deque()  # calls and who answers each
        self._turn, self._turn_steps, self._transferred, self._error = 0, 0, False, None
        self._rehearsal_errors = 0
        self._diverged = False  # the world missed a rehearsed call that may change its state
        self._replay_table = self._recording_table(dynamics, task)
        self.episode.messages.append({"role": "user", "content": self._user.opening(world)})
        return self._obs(), self._info([])

    def step(self, action: Any):
        ep = self.episode
        if ep is None or ep.ended_by is not None:
            raise RuntimeError("the episode has ended (or never began): call reset()")
        records: list[CallRecord] = []
        try:
            if self._pending:
                self._rehearse(action, records)
            else:
                self._act(action, records)
            self._advance(records)
        except Exception as e:  # a bug in a world, user or suite: the episode ends, its record kept
            self._fail(e)
        if ep.world.failure is not None and ep.ended_by != "error":
            self._fail(f"the episode's world failed: {ep.world.failure}")
        if ep.ended_by is None and not self._pending:
            if self._transferred:
                ep.ended_by = "transfer"
            elif self.max_turns is not None and self._turn >= self.max_turns:
                ep.ended_by = "max_turns"
            elif self.max_steps_per_turn is not None and self._turn_steps > self.max_steps_per_turn:
                ep.ended_by = "max_steps"
        reward, terminated, truncated = 0.0, False, False
        info = self._info(records)
        if self._error is not None:
            info["error"] = self._error
        if ep.ended_by is not None:
            truncated = ep.truncated
            terminated = not truncated
            reward = self._score(info)
        return self._obs(), reward, terminated, truncated, info

    def finish(self, ended_by: str = "time_limit") -> tuple[float, dict]:
        """End the running episode now, as truncated, and score it: ``(reward, info)``. For limits kept
        outside the env: :class:`~envace_gym.wrappers.ScoreTruncated` calls it when an outer ``TimeLimit``
        cuts an episode, so that it still gets its terminal reward. Pending calls stay unanswered."""
        ep = self.episode
        if ep is None or ep.ended_by is not None:
            raise RuntimeError("finish() needs a running episode")
        ep.ended_by = ended_by
        self._pending.clear()
        self.action_space.role = "act"
        info = self._info([])
        return self._score(info), info

    def _score(self, info: dict) -> float:
        reward = score_episode(self._reward, self._live, info)
        if not self.gold_in_info:  # which checks were met, never what the gold says (grader.without_gold)
            info["reward_info"] = without_gold(info["reward_info"]) or {}
        return reward

    # pickling (copies across processes): the suite goes by reference where it defines __reduce__ (the built-in
    # ones do); the world is not pickled but rebuilt on load by replaying the episode's calls (replayed_world)
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if self.episode is not None:
            state["episode"] = copy.copy(self.episode)
            state["episode"].world = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.episode is not None:
            self.episode.world = self.episode.replayed_world()

    def __copy__(self) -> EnvACEEnv:  # a plain shallow copy (fork's start), no pickle round trip
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    def render(self) -> str | None:
        """``render_mode="ansi"``: the episode's transcript, a line a message."""
        return transcript(self.episode.messages) if self.render_mode == "ansi" and self.episode else None

    def fork(self, dynamics: str | None = None, reward: str | RewardFn | None = None) -> Self:
        """A new env holding a copy of this episode that shares no mutable state with it. ``dynamics``
        answers the clone's calls from now on (pending ones included), and ``reward`` scores it (default:
        this env's reward, else the dynamics' default). It does not own the suite."""
        if self.episode is None:
            raise RuntimeError("fork() needs a started episode: call reset() first")
        if dynamics is not None:
            check_dynamics(dynamics, self.simulator)
        clone, ep = copy.copy(self), self.episode  # __copy__: a shallow copy without __setstate__'s world replay
        clone.owns_suite = False
        clone.episode = dataclasses.replace(
            ep,
            world=clone._forked_world(DYNAMICS[dynamics or ep.dynamics]),
            dynamics=dynamics or ep.dynamics,
            messages=copy.deepcopy(ep.messages),
            calls=copy.deepcopy(ep.calls),
        )
        clone._pending = copy.deepcopy(self._pending)
        shared = {id(x): x for x in (ep.suite, ep.task, self.tools)}  # read-only: not copied
        clone._user = copy.deepcopy(self._user, dict(shared))
        clone.action_space = copy.deepcopy(self.action_space, dict(shared))
        clone._np_random = copy.deepcopy(self.np_random)
        if reward is not None or dynamics is not None:
            clone._reward = (
                resolve_reward(reward) or self.reward or default_reward(self.suite, clone.episode.dynamics, [ep.task])
            )
            check_reward(clone._reward, clone.episode.dynamics)
        if dynamics is not None:
            clone._replay_table = self._recording_table(dynamics, ep.task)
            # pending calls are answered as the new dynamics answer them
            clone._pending = deque((call, clone._source(call)) for call, _ in clone._pending)
            try:
                clone._advance([])
            except Exception as e:
                clone._fail(e)
        return clone

    def _forked_world(self, dynamics: Dynamics) -> World:
        """A fork's world under ``dynamics``. Where the episode's world has not run its calls (dynamics that
        ask no world) and the new ones ask it, a local world is rebuilt from the episode's calls; another
        keeps what it has, and has diverged from the history if a call it missed may change state."""
        ep = self._live
        if not dynamics.asks_world:
            return ep.world.detached()
        if DYNAMICS[ep.dynamics].asks_world:
            return ep.world.fork()
        if ep.suite.local_worlds:
            return ep.replayed_world()
        self._diverged = self._diverged or any(
            c.ran and c.source != "real" and c.name not in ep.suite.stateless_tools for c in ep.calls
        )
        return ep.world.fork()

    def close(self) -> None:
        """End the episode's world (:meth:`~envace_gym.core.suite.World.close`), and close the suite if this
        env owns it."""
        if self.episode is not None:
            self.episode.world.close(wait=True)
        if self.owns_suite:
            self.suite.close()
        super().close()

    def observation(self) -> dict:
        """The current observation (what the last ``reset`` or ``step`` returned, or a fork's)."""
        if self.episode is None:
            raise RuntimeError("observation() needs a started episode: call reset() first")
        return self._obs()

    def real_response(self, name: str, arguments: dict) -> Response:
        """What the real world would answer now (used by the oracle's perfect rehearsals).

        Computed on a fresh world that replays the episode's calls, so the
        episode's own world is never touched.
        """
        return execute(self.suite, self._live.replayed_world(), name, arguments, self.limits)

    def act_with(self, agent_class: type) -> str:
        """The action of a fresh ``agent_class(self)`` on the current observation. A method, so that a
        vector env computes it where its sub-env lives: the vector oracle's
        ``venv.call("act_with", OracleAgent)``."""
        return agent_class(self).act(self.observation())

    @property
    def role(self) -> str:
        return "rehearse" if self._pending else "act"

    # turn logic ------------------------------------------------------------
    def _act(self, action: Any, records: list[CallRecord]) -> None:
        ep = self._live
        self._turn += 1
        text, calls = parse_act(action, id_prefix=f"call_{self._turn}")
        self._own_ids(calls)
        ep.messages.append(assistant_message(text, calls))
        if self.suite.one_step:
            self._record_unanswered(calls, records)
            ep.ended_by = "answered"
            return
        if calls:
            self._turn_steps += 1
            self._pending.extend((call, self._source(call)) for call in calls)
            return
        reply = self._guarded(self._user.reply, text, ep.world, seconds=self.limits.user_seconds)
        if reply is None:
            return
        for record in reply.calls:
            record.position = len(ep.messages)
        ep.calls.extend(reply.calls)
        if reply.text:
            ep.messages.append({"role": "user", "content": reply.text})
        self._turn_steps = 0
        if reply.tools is not None:
            self.tools = self.action_space.tools = reply.tools
        if reply.stop:
            ep.ended_by = "user_stop"

    def _own_ids(self, calls: list[ToolCall]) -> None:
        """Give each call an id no other call of the episode has: the policy's own where it is new, else
        one of the env's. Records, routes and token exports key calls by id, so a policy that reuses an
        id never gets one call's answer taken for another's."""
        taken = {c.id for c in self._live.calls}
        for i, call in enumerate(calls):
            n = 0
            while call.id in taken:
                call.id = f"call_{self._turn}_{i}" + (f"_{n}" if n else "")
                n += 1
            taken.add(call.id)

    def _record_unanswered(self, calls: list[ToolCall], records: list[CallRecord]) -> None:
        """A one-step suite's calls: validated and recorded for scoring, answered by no one."""
        for call in calls:
            error = self._check(call)
            source, content = ("rejected", error.content()) if error else ("unanswered", "")
            self._record(call, source, content, str(error.code) if error else None, records)

    def _record(self, call: ToolCall, source: str, content: str, code: str | None, records: list, **extra) -> None:
        """Keep a call of the assistant's, answered by ``source``, in the episode and in this step's ``records``."""
        at = len(self._live.messages)
        record = CallRecord(
            call.id, call.name, call.arguments, "assistant", source, content, code, position=at, **extra
        )
        self._live.calls.append(record)
        records.append(record)

    def _guarded(self, fn, *args, seconds: float | None = None):
        """Call a user or simulator; a failure (a dead server, say) ends the episode, state intact."""
        try:
            return run_bounded(lambda: fn(*args), seconds)
        except BudgetExceeded:
            self._fail(f"{getattr(fn, '__qualname__', fn)} ran past its time budget of {seconds} s")
        except Exception as e:
            self._fail(e)
        return None

    def _fail(self, error: Exception | str) -> None:
        """End the episode on a failure that is not a tool error."""
        self._live.ended_by = "error"
        self._error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self._pending.clear()
        self.action_space.role = "act"

    def _check(self, call: ToolCall) -> ToolError | None:
        """The error that rejects ``call`` (its schema, then the size of its arguments), or None."""
        error = self.tools.check(call)
        limit = self.limits.argument_chars
        # arguments parsed from text this short cannot be longer as JSON than the limit: no dump needed
        short = call.text_chars is not None and call.text_chars * MAX_DUMP_GROWTH <= limit
        if error is None and not short and len(json.dumps(call.arguments)) > limit:
            error = ToolError(ErrorCode.LIMIT_EXCEEDED, f"the arguments of '{call.name}' exceed {limit} characters")
        return error

    def _execute(self, call: ToolCall) -> tuple[str, Response]:
        """``(source, response)`` of one validated call on the world, within the limits. A call that runs
        out of time leaves no trace: the world is rebuilt from the episode's calls, and the call is rejected."""
        ep = self._live
        response = execute(ep.suite, ep.world, call.name, call.arguments, self.limits)
        if response.native != OVER_TIME:
            return "real", response
        if call.name not in ep.suite.stateless_tools:
            ep.world = ep.replayed_world()
        return "rejected", response

    def _advance(self, records: list[CallRecord]) -> None:
        """Answer pending calls until one needs a rehearse turn by the acting agent."""
        shadow = DYNAMICS[self._live.dynamics].shadow
        while self._pending and self._live.ended_by is None:
            call, who = self._pending[0]
            error = self._check(call)
            if error is not None:
                self._answer(call, "rejected", error.content(), records)
            elif who in ("policy", "shadow") or (who == "world" and shadow):
                self.action_space.role = "rehearse"
                return
            elif who == "world":
                source, response = self._execute(call)
                self._answer(call, source, response.content, records, native=response.native)
            elif who == "recording":
                self._answer(call, "replay", self._replayed(call), records)
            else:
                text = self._guarded(self.simulator.act, self._obs())
                if text is None:
                    return
                content, parsed = rehearsal_content(text, self.limits.response_chars)
                self._rehearsal_errors += not parsed
                self._answer(call, "simulated", content, records)
        self.action_space.role = "act"

    def _source(self, call: ToolCall) -> str:
        """Who answers ``call`` under this episode's dynamics (:meth:`~envace_gym.dynamics.Dynamics.who_answers`);
        a router's reason is kept for the call's record."""
        dynamics = DYNAMICS[self._live.dynamics]
        who, route = dynamics.who_answers(call.name, call.arguments, self.np_random, self.p_real, self.router)
        if route is not None:
            self._routes[call.id] = route
        return who

    def _rehearse(self, action: Any, records: list[CallRecord]) -> None:
        call, who = self._pending[0]
        rehearsed, parsed = rehearsal_content(action, self.limits.response_chars)
        self._rehearsal_errors += not parsed
        route = self._routes.pop(call.id, None)
        if who not in ("world", "shadow"):  # the world answers a rehearsed call under shadow dynamics only
            self._keep_world(call)
            self._answer(call, "rehearsed", rehearsed, records, route=route)
            return
        source, response = self._execute(call)
        score = fidelity(response.content, rehearsed)
        if who == "shadow" and source == "real" and not self._diverged:  # a drifted world says nothing of it
            self.router.update(call.name, call.arguments, score)
        shadowed = {"native": response.native, "rehearsed": rehearsed, "fidelity": score, "route": route}
        self._answer(call, source, response.content, records, **shadowed)

    def _keep_world(self, call: ToolCall) -> None:
        """Under dynamics that mix real and rehearsed answers, a rehearsed call runs on a local world too
        (its answer dropped, no real call counted), so that later real calls see the episode's history. A
        world that is not local does not run it, and from then on it has diverged (the tool may change state)."""
        ep = self._live
        if not DYNAMICS[ep.dynamics].mixes or self._diverged or call.name in ep.suite.stateless_tools:
            return
        if not ep.suite.local_worlds or self._execute(call)[0] != "real":  # or it ran out of time, leaving no trace
            self._diverged = True

    def _world_seen(self) -> str | None:
        """What a real call's world had seen: ``state_diverged``, ``consistent`` (under dynamics that mix real
        and rehearsed answers), or None (the world has answered every call)."""
        if self._diverged:
            return "state_diverged"
        return "consistent" if DYNAMICS[self._live.dynamics].mixes else None

    def _answer(self, call: ToolCall, source: str, content: str, records: list[CallRecord], **extra: Any) -> None:
        self._pending.popleft()
        if source == "real":
            extra["world"] = self._world_seen()
        content = escape_tags(content)  # the same JSON value, with no tag or control token
        self._record(call, source, content, error_code_of_text(content), records, **extra)
        self._live.messages.append(tool_message(call, content))
        if source == "real" and self.response_cache is not None:
            self.response_cache.add(call.name, call.arguments, content)
        if call.name == self.suite.transfer_tool and source != "rejected":
            self._transferred = True

    def _replayed(self, call: ToolCall) -> str:
        answer = recorded(self._replay_table or {}, call.name, call.arguments)
        if isinstance(answer, ToolError):
            return answer.content()
        return checked(call.name, Response(text=answer), self.limits, "the recorded").content  # as real ones are

    def _recording_table(self, dynamics: str, task) -> dict | None:
        """The recorded responses that answer calls under ``dynamics`` (None where recordings answer none)."""
        if not DYNAMICS[dynamics].replays:
            return None
        return recording_table(self.recordings, self.suite.grader, task)

    # observations ----------------------------------------------------------
    def _obs(self) -> dict:
        call = self._pending[0][0] if self._pending else None
        tools, messages = self.tools.schemas, list(self._live.messages)
        if call is None:
            return {"role": "act", "messages": messages, "tools": tools, "tool_call": None}
        pending = {"id": call.id, "name": call.name, "arguments": call.arguments}
        if self.rehearsal_format == "prompted":  # a simulator prompt of its own
            cached = self.response_cache.get(call.name) if self.response_cache else []
            function, tools = self.tools.functions[call.name], []
            messages = episode_prompt(self._live, pending, function, cached, self.examples_per_tool)
        return {"role": "rehearse", "messages": messages, "tools": tools, "tool_call": pending}

    def _info(self, records: list[CallRecord]) -> dict:
        return {
            "role": self.role,
            "dynamics": self._live.dynamics,
            "task_id": self._live.task.id,
            "turn": self._turn,
            "tool_calls": [r.info() for r in records],
            "rehearsal_errors": self._rehearsal_errors,
        }
