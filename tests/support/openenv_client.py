"""Plays episodes with OpenEnv's own GenericEnvClient (run under .venv-openenv, which has `openenv`).

stdin: {"url": URL, "episodes": [{"reset": {...}, "actions": [...]}, ...], "headers": {...} (optional)};
stdout: per episode, the
reset's and each step's (observation, reward, done) as OpenEnv's client parsed them, or the error text.
"""

import json
import sys

from openenv import GenericEnvClient

job = json.load(sys.stdin)
out = []
with GenericEnvClient(base_url=job["url"], message_timeout_s=60, headers=job.get("headers")).sync() as env:
    for episode in job["episodes"]:
        steps = []
        try:
            results = [env.reset(**episode["reset"])]
            for action in episode["actions"]:
                results.append(env.step(action))
            steps = [{"observation": r.observation, "reward": r.reward, "done": r.done} for r in results]
            out.append({"steps": steps, "state": env.state()})
        except Exception as e:  # the protocol's errors come back as RuntimeError("Server error: ...")
            out.append({"error": str(e)})
print(json.dumps(out))
