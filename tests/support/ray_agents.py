"""Agents that kill their own process, for the Ray fault tests (loaded as tests/support/ray_agents.py:CLASS)."""

import os
import signal
import time
from pathlib import Path

from envace_gym.agents.oracle import OracleAgent


class CrashOn(OracleAgent):
    """The oracle, except that on ``task`` it SIGKILLs its own process mid-episode: once (while
    ``flag`` does not exist yet; it creates it), or every time (``always``)."""

    def __init__(self, env, task: str = "", flag: str = "", always: bool = False):
        super().__init__(env)
        self.task, self.flag, self.always = task, flag, always

    def act(self, obs: dict) -> str:
        if self.env.unwrapped.episode.task.id == self.task and len(obs["messages"]) > 3:
            if self.always or not Path(self.flag).exists():
                Path(self.flag).touch()
                os.kill(os.getpid(), signal.SIGKILL)
        return super().act(obs)


class Slow(OracleAgent):
    """The oracle, ``delay`` seconds a turn."""

    def __init__(self, env, delay: float = 0.2):
        super().__init__(env)
        self.delay = delay

    def act(self, obs: dict) -> str:
        time.sleep(self.delay)
        return super().act(obs)
