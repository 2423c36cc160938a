"""Library calls leave the caller's process as they found it: matplotlib's backend and sys.path."""

import os
import subprocess
import sys

from envace_gym.specs import import_module

DRAW = """
import matplotlib
matplotlib.use("svg")  # the caller's choice
from envace_gym.evaluation.results import EvalResults
from envace_gym.fidelity import METRICS
from envace_gym.reporting import figures
figures.training_figure([{"step": 1, "reward": 0.5}])
figures.fidelity_figure({"t": {"calls": 1} | {m: 1.0 for m in METRICS}}, "t")
figures.eval_figure(EvalResults.model_construct(agent="a", benchmarks=[], rehearse=0, world_model=[]))
assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
"""


def test_drawing_a_figure_keeps_the_callers_matplotlib_backend():
    done = subprocess.run([sys.executable, "-c", DRAW], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_importing_an_agent_module_by_name_leaves_sys_path_as_it_was(tmp_path, monkeypatch):
    (tmp_path / "my_agent_module_xyz.py").write_text("VALUE = 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    before = list(sys.path)
    try:
        assert import_module("my_agent_module_xyz").VALUE == 7
    finally:
        sys.modules.pop("my_agent_module_xyz", None)
    assert sys.path == before
