"""make test's two workers: the tests that share a module's fixture run on one of them, so it is built once."""

import subprocess
import sys
from pathlib import Path

from paths import ROOT

CONFTEST = """
import importlib.util

spec = importlib.util.spec_from_file_location("project_conftest", {path!r})
project = importlib.util.module_from_spec(spec)
spec.loader.exec_module(project)
pytest_itemcollected = project.pytest_itemcollected
"""
PROBE = """
import pytest


@pytest.fixture(scope="module")
def built():
    return 1


@pytest.mark.parametrize("i", range(6))
def test_shared(built, i):
    pass


@pytest.mark.parametrize("i", range(6))
def test_alone(i):
    pass
"""


def test_tests_sharing_a_module_fixture_run_on_one_worker(tmp_path: Path):
    (tmp_path / "conftest.py").write_text(CONFTEST.format(path=str(ROOT / "tests" / "conftest.py")))
    (tmp_path / "test_probe.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-v"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shared = {line.split()[0] for line in done.stdout.splitlines() if "test_shared[" in line and "PASSED" in line}
    assert len(shared) == 1, done.stdout[-3000:]  # one worker ran them all ([gw0] or [gw1])
    assert done.stdout.count("PASSED") == 12
