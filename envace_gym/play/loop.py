"""Running whole episodes of an agent, one JSON-ready record per episode: in one env, or in
several envs stepped together so that the agent answers their turns in one ``act_batch``."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, cast

import gymnasium as gym

from envace_gym.agents import Agent
from envace_gym.env import EnvACEEnv
from envace_gym.fidelity import summarize
from envace_gym.openai_client import ModelServerError
from envace_gym.play.records import RunRecord
from envace_gym.wrappers import unwrap

if TYPE_CHECKING:
    from envace_gym.integrations.openenv.client import RemoteEnv

Play = Generator[dict, str, dict]  # yields observations, is sent actions, returns the record


def make_envs(env_id: str, n: int, **kwargs) -> list[gym.Env]:
    """``n`` envs of ``gym.make(env_id, **kwargs)``. A simulator given by name is loaded once, by the
    first env, and bound to each other one."""
    envs = [gym.make(env_id, **kwargs)]
    kwargs["simulator"] = unwrap(envs[0]).simulator
    for _ in range(n - 1):
        envs.append(gym.make(env_id, **kwargs))
        if kwargs["simulator"] is not None:
            unwrap(envs[-1]).simulator = kwargs["simulator"].bind(envs[-1])
    return envs


#: told of each step an episode takes, after it: the role of the observation answered and the step's info
OnStep = Callable[[str, dict], None]


def run_episode(
    env: gym.Env,
    agent: Agent,
    task_id: str,
    seed: int | None = None,
    options: dict | None = None,
    on_step: OnStep | None = None,
) -> dict:
    """Play one episode to its end and describe it: a :class:`~envace_gym.play.records.RunRecord`, dumped
    (its fields say what each holds, the transcript that ``envace-gym sft`` trains on included).

    An agent whose model server fails, or whose own code raises, ends the episode: reward 0,
    ``ended_by`` ``agent_error`` and the failure in ``error``. The agent's own fields
    (:meth:`~envace_gym.agents.base.Agent.episode_stats`: a private rehearsal's cost) are in it.
    """
    return next(run_batched([env], agent, [(task_id, seed)], options=options, on_step=on_step))


def play(
    env: gym.Env,
    agent: Agent,
    task_id: str,
    seed: int | None = None,
    options: dict | None = None,
    on_step: OnStep | None = None,
) -> Play:
    """One episode as a coroutine: the package's one episode loop (``run``, ``compare``, ``eval`` and
    training's held-out measures all play through it). It yields each observation and is sent the
    agent's action; an exception thrown in (the agent's) ends the episode as ``agent_error``. It returns
    the record of :func:`run_episode`. ``options``: more of ``reset``'s options (``dynamics``);
    ``on_step``: told of each step."""
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options={**(options or {}), "task_id": task_id})
    opening, tools = len(obs["messages"]), obs["tools"]
    calls: list[dict] = []  # those the steps' infos reported
    reward, done, failure = 0.0, False, None
    while not done:
        try:
            action = yield obs
        except Exception as e:  # the agent's failure, thrown in by run_batched
            failure = str(e) if isinstance(e, ModelServerError) else f"{type(e).__name__}: {e}"
            break
        role = obs["role"]
        obs, step_reward, terminated, truncated, info = env.step(action)
        if on_step is not None:
            on_step(role, info)
        reward = float(step_reward)
        calls += info["tool_calls"]
        done = terminated or truncated
    inner = cast("EnvACEEnv | RemoteEnv", env.unwrapped)
    if isinstance(inner, EnvACEEnv) and inner.episode is not None:  # in process: the episode itself
        messages, tools = list(inner.episode.messages), inner.tools.schemas
        answered = [c.info() for c in inner.episode.calls]
    else:  # a served env (RemoteEnv): what its observations and infos said
        messages, answered = list(obs["messages"]), calls
    shadowed = [{"tool": c["name"], **c["fidelity"]} for c in answered if c.get("fidelity") is not None]
    real_ids = [c["id"] for c in answered if c["source"] == "real" and c["requestor"] == "assistant"]
    return RunRecord(
        task_id=str(task_id),
        env_id=env.spec.id if env.spec else getattr(inner, "env_id", None),
        split=inner.split,
        seed=seed,
        reward=reward,
        reward_source=info.get("reward_source"),
        reward_info=info.get("reward_info", {}),
        dynamics=info["dynamics"],
        agent=agent.name,
        turns=info["turn"],
        tool_calls=len(calls),
        ended_by="agent_error" if failure else info["ended_by"],
        error=failure or info.get("error"),
        seconds=round(time.perf_counter() - start, 4),
        fidelity=summarize(shadowed).get("all"),  # shadow dynamics: the mean fidelity of its calls
        messages=messages,
        tools=tools,
        opening_messages=opening,
        real_call_ids=real_ids,
        real_calls=len(real_ids),
        routes=[{"tool": c["name"], "source": c["source"], **c["route"]} for c in answered if c.get("route")],
        **agent.episode_stats(),
    ).model_dump()


def run_batched(
    envs: Sequence[gym.Env],
    agent: Agent,
    episodes: Sequence[tuple[str, int | None]],
    reseed: bool = False,
    on_turn: Callable[[int, float], None] | None = None,
    options: dict | None = None,
    on_step: OnStep | None = None,
) -> Generator[dict, None, None]:
    """Play the ``(task_id, seed)`` episodes, ``len(envs)`` at a time, and yield their records as
    they end; an env whose episode ends starts the next one.

    Each round, the observations of every running episode go to the agent at once: one
    ``act_batch`` per distinct agent, where the first env is played by ``agent`` itself and
    every other by ``agent.bind(env)`` (an oracle reads its own env; most agents bind to
    themselves). An exception from one ``act_batch`` (a model server's, or the agent's own)
    ends each episode of it as ``agent_error``. With one env this is :func:`run_episodes`, record for record.
    ``reseed``: each episode's agent randomness is seeded from its seed (``Agent.reseed``), so that its
    record does not depend on which episodes ran before it or beside it. ``on_turn(n, seconds)`` is told
    of each ``act_batch``: the turns it answered and how long it took. ``options`` and ``on_step``: each
    episode's, as :func:`play` takes them.
    """
    actors = [agent, *(agent.bind(env) for env in envs[1:])]
    todo = iter(episodes)
    running: dict[int, tuple[Play, dict]] = {}  # env index: its episode and the observation to answer

    def start(slot: int) -> None:
        for task_id, seed in todo:
            if reseed and seed is not None:
                actors[slot].reseed(seed)
            episode = play(envs[slot], actors[slot], task_id, seed, options, on_step)
            running[slot] = (episode, next(episode))
            return

    for slot in range(len(envs)):
        start(slot)
    while running:
        groups: dict[int, list[int]] = {}
        for slot in running:
            groups.setdefault(id(actors[slot]), []).append(slot)
        for slots in groups.values():
            started = time.perf_counter()
            try:
                actions = actors[slots[0]].act_batch([running[s][1] for s in slots])
                failure = None
            except Exception as e:  # a model server's or the agent's own code's: those episodes end
                actions, failure = [""] * len(slots), e  # not sent: each episode is thrown the failure
            if on_turn is not None:
                on_turn(len(slots), time.perf_counter() - started)
            for slot, action in zip(slots, actions):
                episode = running[slot][0]
                try:
                    running[slot] = (episode, episode.throw(failure) if failure else episode.send(action))
                except StopIteration as end:
                    del running[slot]
                    yield end.value
                    start(slot)


def failed_record(env: gym.Env, agent_name: str, task_id: str, seed: int | None, error: str) -> dict:
    """The record of an episode that could not be played (its worker kept dying): reward 0, ``ended_by``
    ``worker_error``, the cause in ``error``, every other field at its default (a dumped ``RunRecord``)."""
    inner = unwrap(env)
    return RunRecord(
        task_id=str(task_id),
        env_id=env.spec.id if env.spec else None,
        split=inner.split,
        seed=seed,
        reward=0.0,
        reward_source=None,
        dynamics=inner.dynamics,
        agent=agent_name,
        turns=0,
        tool_calls=0,
        ended_by="worker_error",
        error=error,
        seconds=0.0,
    ).model_dump()


def run_episodes(
    env: gym.Env | Sequence[gym.Env], agent: Agent, task_ids: Sequence[str], seed: int = 0, repeats: int = 1
) -> Iterator[dict]:
    """Every task ``repeats`` times in a row, episode i seeded ``seed + i``; given several envs, that
    many episodes at a time (:func:`run_batched`)."""
    envs = [env] if isinstance(env, gym.Env) else list(env)
    order = [task_id for task_id in task_ids for _ in range(repeats)]
    return run_batched(envs, agent, [(task_id, seed + i) for i, task_id in enumerate(order)])
