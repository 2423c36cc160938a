"""``vllm serve`` for the tests: started in a process group of its own at once, waited for when its URL
is first asked for, and killed with every process it started."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
from helpers import free_port


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server --model MODEL --port PORT *args``, started now; its
    output goes to an unnamed temporary file, shown when it fails to start."""

    def __init__(self, model: str, *args: str, env: dict[str, str] | None = None, start_within: float = 300):
        self.port, self.start_within, self.ready, self.killed = free_port(), start_within, False, False
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), *args]
        self.log = tempfile.TemporaryFile()
        # its own process group: killing the server also kills the engine process it starts
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True
        )
        self.started = time.monotonic()

    @property
    def url(self) -> str:
        """The base URL (``http://127.0.0.1:PORT/v1``), once ``/health`` answers; fails the test if the server
        exits or is not up within ``start_within`` seconds of its start."""
        while not self.ready:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2)
                self.ready = True
            except OSError:
                if self.proc.poll() is not None or time.monotonic() - self.started > self.start_within:
                    self.kill()
                    self.log.seek(0)
                    pytest.fail(f"vllm serve did not start:\n{self.log.read()[-3000:].decode(errors='replace')}")
                time.sleep(1)
        return f"http://127.0.0.1:{self.port}/v1"

    def kill(self) -> None:
        """Kill the server and every process it started (once: then nothing)."""
        if self.killed:
            return
        self.killed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
