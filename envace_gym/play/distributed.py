"""Episodes across processes and machines on Ray (``pip install 'envace-gym[ray]'``).

Each worker is a Ray actor holding ``envs_per_worker`` envs of one id and its own agent, built from
the same spec (a name that :func:`envace_gym.agents.load` knows: an ``hf:`` model loads once per
actor). Episodes go to workers in fixed chunks of ``envs_per_worker`` ``(task_id, seed)`` pairs,
every episode's agent randomness seeded from its seed, so a record does not depend on which worker
played it or when; records come back in the sequential run's order. A worker that dies is
restarted by Ray and its chunk rerun (``tries`` times in all); a chunk that still fails is recorded,
episode by episode, with its error.

    envace-gym run EnvACE/tau2-retail-v0 --workers 4                   # a local Ray
    envace-gym run EnvACE/tau2-retail-v0 --workers 32 --ray-address auto   # join a cluster
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker builds: ``gym.make(env_id, **make_kwargs)`` ``envs_per_worker`` times, and
    ``agents.load(agent, env=..., **agent_kwargs)`` once."""

    env_id: str
    agent: str
    make_kwargs: dict = field(default_factory=dict)
    agent_kwargs: dict = field(default_factory=dict)
    envs_per_worker: int = 1
    rehearser: str | None = None  # ``compare``: the agent whose rehearsals are scored against the real calls
    rehearsal: dict = field(default_factory=dict)  # agents.with_rehearsal's options (budget 0 or none: no rehearsal)
    job: Callable[[EnvWorker, list[tuple[str, int]]], list[dict]] | None = None  # plays a chunk in place of a run


class EnvWorker:
    """One Ray actor's envs and agent (``ray.remote`` is applied by :func:`run_distributed`)."""

    def __init__(self, spec: WorkerSpec):
        import envace_gym  # noqa: F401  (registers the ids in this process)
        from envace_gym import agents
        from envace_gym.play.loop import make_envs
        from envace_gym.registration import resolve_env

        self.envs = make_envs(resolve_env(spec.env_id), spec.envs_per_worker, **spec.make_kwargs)
        self.agent = agents.with_rehearsal(
            agents.load(spec.agent, env=self.envs[0], **spec.agent_kwargs), self.envs[0], **spec.rehearsal
        )
        self.rehearser = agents.load(spec.rehearser, env=self.envs[0]) if spec.rehearser else None
        self.job = spec.job

    def play(self, episodes: list[tuple[str, int]]) -> list[dict]:
        """The run records of ``episodes`` in their order (or what the spec's ``job`` makes of them)."""
        from envace_gym.play.loop import run_batched

        if self.job is not None:
            return self.job(self, episodes)
        order = {episode: i for i, episode in enumerate(episodes)}
        records = list(run_batched(self.envs, self.agent, episodes, reseed=True))
        return sorted(records, key=lambda r: order[(r["task_id"], r["seed"])])

    def describe(self) -> dict:
        return {"agent": self.agent.name, "pid": os.getpid()}


def connect(address: str | None = None, workers: int = 1):
    """Ray, initialised once per process: a local one sized for ``workers`` when ``address`` is None,
    else the cluster at ``address`` (``auto``, ``ray://HOST:PORT``)."""
    import ray

    if not ray.is_initialized():
        if address is None:  # a small object store: records are small, and this may be a laptop
            ray.init(
                num_cpus=max(workers, os.cpu_count() or 1),
                object_store_memory=256 << 20,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    return ray


def run_distributed(
    spec: WorkerSpec, episodes: Sequence[tuple[str, int]], workers: int, address: str | None = None, tries: int = 3
) -> Generator[dict, None, None]:
    """Play ``episodes`` on ``workers`` Ray actors and yield their records in ``episodes``' order (for
    ``compare``, a failed episode is one record with ``tool`` None and its ``error``).

    On Ctrl-C the actors are stopped, the records finished so far but not yet yielded (their
    earlier neighbours unfinished) are yielded, and KeyboardInterrupt goes on up.
    """
    from envace_gym.play.loop import failed_record, make_envs
    from envace_gym.registration import resolve_env

    if workers < 1 or tries < 1:
        raise ValueError(f"workers and tries must be at least 1, got {workers} and {tries}")
    ray = connect(address, workers)
    probe = make_envs(resolve_env(spec.env_id), 1, **spec.make_kwargs)[0]  # a bad id or option fails here, once
    Worker = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=tries - 1)(EnvWorker)
    actors = [Worker.options(scheduling_strategy="SPREAD").remote(spec) for _ in range(min(workers, len(episodes)))]
    try:  # a worker that cannot build its envs or agent fails here, with its cause
        agent_name = ray.get(actors[0].describe.remote())["agent"] if actors else spec.agent
    except ray.exceptions.RayError as e:
        for actor in actors:
            ray.kill(actor)
        raise ValueError(f"the Ray workers could not start: {' '.join(str(e).split())[-800:]}") from None
    k = spec.envs_per_worker
    chunks = [list(episodes[i : i + k]) for i in range(0, len(episodes), k)]
    pending, free, finished, sent, written = {}, list(actors), {}, 0, 0
    try:
        while written < len(chunks):
            while free and sent < len(chunks):
                actor = free.pop()
                pending[actor.play.options(retry_exceptions=True).remote(chunks[sent])] = (sent, actor)
                sent += 1
            (ready,), _ = ray.wait(list(pending), num_returns=1)
            i, actor = pending.pop(ready)
            try:
                finished[i] = ray.get(ready)
            except ray.exceptions.RayError as e:  # still failing after `tries`: each episode says why
                cause = f"failed {tries} times: {' '.join(str(e).split())[:500]}"
                finished[i] = [
                    {"task_id": task_id, "seed": seed, "tool": None, "error": cause}
                    if spec.rehearser
                    else failed_record(probe, agent_name, task_id, seed, cause)
                    for task_id, seed in chunks[i]
                ]
            free.append(actor)
            while written in finished:
                yield from finished.pop(written)
                written += 1
    except KeyboardInterrupt:
        for i in sorted(finished):
            yield from finished[i]
        raise
    finally:
        for actor in actors:
            ray.kill(actor)


class EnvHost:
    """A Ray actor's share of an :class:`EnvPool`: some envs, stepped on request (``ray.remote`` applied
    by the pool)."""

    def __init__(self, env_id: str, n: int, make_kwargs: dict):
        import envace_gym  # noqa: F401
        from envace_gym.play.loop import make_envs
        from envace_gym.registration import resolve_env

        self.envs = make_envs(resolve_env(env_id), n, **make_kwargs)

    def reset(self, requests: list[tuple[int, int, dict]]) -> list[tuple[dict, dict]]:
        return [self.envs[k].reset(seed=seed, options=options) for k, seed, options in requests]

    def step(self, requests: list[tuple[int, str]]) -> list[tuple]:
        return [self.envs[k].step(text) for k, text in requests]


class EnvPool:
    """``n`` envs of one id in ``workers`` Ray actors (env ``i`` in actor ``i % workers``), for the
    trainer's rollouts (``train --rollout-workers``): :func:`envace_gym.training.rollout.collect` sends
    each round's resets and steps to all actors at once, so slow users, judges and tools run in
    parallel while generation stays batched in the trainer."""

    def __init__(self, env_id: str, n: int, workers: int, make_kwargs: dict | None = None, address: str | None = None):
        if n < 1 or workers < 1:
            raise ValueError(f"an env pool needs at least one env and one worker, got {n} and {workers}")
        self.ray = connect(address, workers)
        self.n, self.workers = n, min(workers, n)
        host = self.ray.remote(num_cpus=1)(EnvHost)
        self.hosts = [
            host.options(scheduling_strategy="SPREAD").remote(env_id, len(range(w, n, self.workers)), make_kwargs or {})
            for w in range(self.workers)
        ]

    def __len__(self) -> int:
        return self.n

    def _scatter(self, method: str, requests: list[tuple]) -> list:
        """Each ``(i, ...)`` request to env ``i``'s actor, all actors at once; the answers in request order."""
        shares: dict[int, list[tuple[int, tuple]]] = {}
        for at, (i, *rest) in enumerate(requests):
            shares.setdefault(i % self.workers, []).append((at, (i // self.workers, *rest)))
        futures = {w: getattr(self.hosts[w], method).remote([r for _, r in share]) for w, share in shares.items()}
        out: list = [None] * len(requests)
        for w, share in shares.items():
            for (at, _), answer in zip(share, self.ray.get(futures[w])):
                out[at] = answer
        return out

    def reset_many(self, requests: list[tuple[int, dict]]) -> list[tuple[dict, dict]]:
        return self._scatter("reset", [(i, seed, options) for i, (seed, options) in enumerate(requests)])

    def step_many(self, actions: list[tuple[int, str]]) -> list[tuple]:
        return self._scatter("step", actions)

    def close(self) -> None:
        for host in self.hosts:
            self.ray.kill(host)
