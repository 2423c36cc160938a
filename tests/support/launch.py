"""Two CPU processes through ``accelerate launch`` (gloo), as the distributed and sharded tests start them."""

import os
import shutil
import subprocess
import sys

from paths import ROOT

ACCELERATE = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which("accelerate")
LAUNCH = [
    ACCELERATE,
    "launch",
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
]


def launch(args, tmp_path):
    """``accelerate launch`` of ``args`` on two CPU processes in ``tmp_path``; fails the test if it fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([*LAUNCH, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
