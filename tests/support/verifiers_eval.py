"""Runs verifiers evaluations in verifiers' own venv (.venv-verifiers, made by `make setup`).

stdin: {"model_url": URL, "taskset": {...}, "env": {...}, "limit": N} evaluates the envace taskset (its
config as ``--env.taskset.*`` takes it; "env": more of ``--env.*``) with the model at URL, one episode at a
time; or {"openenv": URL, "token": TOKEN, "resets": [...], "model_url": URL} plays `envace-gym serve` at URL
through verifiers' own OpenEnvTaskset, its player on the envace harness (verifiers' own chat harnesses
install a program with uv). verifiers 0.4.0's OpenEnv env sends no credentials: :func:`send_token` gives
its two clients the token.
stdout: a JSON list, per episode its rewards, metrics, info, errors and the roles of its sampled turns.
"""

import asyncio
import functools
import json
import sys
import urllib.parse

import httpx
import verifiers.v1 as vf


def send_token(token: str) -> None:
    """Give verifiers' OpenEnv env ``token`` on both of its clients: the WebSocket URL's ``?token=`` (openenv
    0.4.1's GenericEnvClient takes no headers) and the /schema request's ``Authorization: Bearer``."""
    import openenv
    from verifiers.v1.tasksets.openenv import taskset as openenv_taskset

    class Client(openenv.GenericEnvClient):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._ws_url = f"{self._ws_url}?{urllib.parse.urlencode({'token': token})}"

    openenv.GenericEnvClient = Client
    headers = {"Authorization": f"Bearer {token}"}
    openenv_taskset.httpx = type("Httpx", (), {"AsyncClient": functools.partial(httpx.AsyncClient, headers=headers)})


def env_of(job: dict) -> vf.Env:
    if "openenv" not in job:
        return vf.load_environment(vf.resolve_env_config({"taskset": job["taskset"], **job.get("env", {})}))
    send_token(job["token"])
    taskset = {"id": "openenv", "base_url": job["openenv"], "resets": job["resets"]}
    # the envace harness (the package exports it), in this process: a local runtime
    player = {"harness": {"id": "envace-tau2-retail"}, "runtime": {"type": "subprocess"}}
    return vf.load_environment(vf.resolve_env_config({"taskset": taskset, "player": player}))


async def evaluate(job: dict) -> list[dict]:
    env = env_of(job)
    client = vf.EvalClientConfig(base_url=job["model_url"], api_key_var="ENVACE_FAKE_KEY")
    ctx = vf.ModelContext(model="scripted", client=client)
    tasks = env.taskset.take(job["limit"]) if job.get("limit") else env.taskset
    out = []
    async with env.serving():
        for task in tasks:  # one at a time: the scripted model answers in order
            episode = await env.run_episode(task, ctx)
            for trace in episode.traces:
                out.append(
                    {
                        "task": task.data.id,
                        "rewards": {k: r.score if r else None for k, r in trace.rewards.items()},
                        "metrics": trace.metrics,
                        "info": trace.info,
                        "errors": [f"{e.type}: {e.message}" for e in [*episode.errors, *trace.errors]],
                        "sampled": sum(n.sampled for n in trace.nodes),
                    }
                )
            if not episode.traces:
                out.append({"task": task.data.id, "errors": [f"{e.type}: {e.message}" for e in episode.errors]})
    return out


print(json.dumps(asyncio.run(evaluate(json.load(sys.stdin)))))
