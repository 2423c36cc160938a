import os
import signal
import subprocess
import sys
import time

from paths import ROOT, SUPPORT


def test_sigterm_stops_a_run_as_ctrl_c_does_and_removes_its_temporary_folders(tmp_path):
    """A run stopped by SIGTERM mid-episode exits 143, its BFCL memory folders removed (as after Ctrl-C)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    command = [sys.executable, "-m", "envace_gym.cli", "run", "EnvACE/bfcl-memory-kv-v0", "--limit", "2"]
    command += ["--agent", f"{SUPPORT / 'user_agents.py'}:Stalled", "--out", str(tmp_path / "run.jsonl")]
    env = {**os.environ, "TMPDIR": str(temp)}
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as run:
        try:
            deadline = time.monotonic() + 120
            while not list(temp.glob("envace-bfcl-memory-*")):  # the episode's world is loaded
                assert run.poll() is None and time.monotonic() < deadline, run.stdout.read().decode()
                time.sleep(0.2)
            time.sleep(0.5)  # into the agent's turn
            run.send_signal(signal.SIGTERM)
            output = run.communicate(timeout=60)[0].decode()
        finally:
            run.kill()
    assert run.returncode == 143, output
    assert "--resume plays the rest" in output
    assert list(temp.iterdir()) == []
