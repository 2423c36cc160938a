"""Playing a served env from the tests: OpenEnv's own client (run in its venv, ``.venv-openenv``), and
an agent that plays recorded actions."""

import json
import subprocess

import pytest
from paths import ROOT, SUPPORT

from envace_gym import agents

OPENENV_PYTHON = ROOT / ".venv-openenv" / "bin" / "python"  # made by `make setup`


def openenv_client(url: str, episodes: list[dict], headers: dict | None = None) -> list[dict]:
    if not OPENENV_PYTHON.exists():
        pytest.skip(f"OpenEnv's client venv is missing ({OPENENV_PYTHON}): `make setup` makes it")
    done = subprocess.run(
        [str(OPENENV_PYTHON), str(SUPPORT / "openenv_client.py")],
        capture_output=True,
        text=True,
        timeout=240,
        input=json.dumps({"url": url, "episodes": episodes, "headers": headers}),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


class Recorded(agents.Agent):
    """Plays actions recorded in process, in order: how a remote env is played without a model."""

    name = "recorded"

    def __init__(self, actions: list):
        self.actions = iter(actions)

    def act(self, obs: dict) -> str:
        return next(self.actions)
