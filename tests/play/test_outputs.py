"""Where outputs go and who may write them: safe names, one writer per output, eval's records per env id,
eval's errors and interruptions, and names printed as they are."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import gymnasium as gym
import psutil
import pytest
from paths import SUPPORT
from typer.testing import CliRunner

import envace_gym  # noqa: F401
from envace_gym import make_mcp_env
from envace_gym.cli import app
from envace_gym.evaluation import EvalConfig, EvalResults, Evaluation
from envace_gym.play.records import OutputInUse, OutputLock, id_path, safe_name
from envace_gym.play.run import Run, RunConfig, records_file
from envace_gym.registration import register_factory, register_finmcp

runner = CliRunner()
OFFICE = "EnvACE/tau2-mock-office-v0"


def finmcp_file(path: Path) -> Path:
    from finmcp_samples import FINMCP

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(s) for s in FINMCP))
    return path


def test_safe_names_are_plain_file_names_and_never_collide(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # records_file makes the default file's folder
    names = ["oracle", "hf:runs/train/step-1", "hf:runs/sft/step-2", "dir/agents.py:Me", "dir_agents.py_Me", "a" * 200]
    safe = [safe_name(n) for n in names]
    assert safe[0] == "oracle" and len(set(safe)) == len(names)
    assert all("/" not in s and ":" not in s and not s.startswith(".") and len(s) <= 80 for s in safe)
    assert safe_name("..") != ".." and "/" not in safe_name("../../etc/passwd")
    assert id_path("EnvACE/tau2-retail-v0") == Path("EnvACE", "tau2-retail-v0")
    assert id_path("Me/thermo-v0") != id_path("thermo-v0")  # the namespace is kept
    # run's default file keeps the whole agent spec and the namespace: no two runs share it
    files = {
        records_file(None, env, agent, "real")
        for env in ("Me/thermo-v0", "thermo-v0")
        for agent in ("hf:runs/train/step-1", "hf:runs/sft/step-2", "dir/a.py:A", "dir/a.py:B")
    }
    assert len(files) == 8 and all(f.parent.parent.name in ("runs", "Me") for f in files)


def test_one_evals_benchmarks_never_share_a_records_file(tmp_path):
    mock = finmcp_file(tmp_path / "mock.jsonl")  # once written to records/mock-real.jsonl beside tau2-mock's
    a, b = finmcp_file(tmp_path / "a" / "samples.jsonl"), finmcp_file(tmp_path / "b" / "samples.jsonl")
    out = tmp_path / "eval"
    suites = f"EnvACE/tau2-mock-v0,{mock},{a},{b}"
    result = runner.invoke(app, ["eval", "--suites", suites, "--limit", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    results = EvalResults.model_validate_json((out / "results.json").read_text())
    assert len(results.benchmarks) == 4  # every file given is played
    files = [f for bench in results.benchmarks for f in bench.records]
    assert len(set(files)) == 4
    for bench in results.benchmarks:  # each scored on its own env's records
        (file,) = bench.records
        rows = [json.loads(line) for line in Path(file).read_text().splitlines()]
        assert {r["env_id"] for r in rows} == {bench.name} and bench.episodes == len(rows) > 0


def test_an_id_is_never_taken_from_another_file_or_registration(tmp_path):
    first = register_finmcp(finmcp_file(tmp_path / "x" / "dup.jsonl"))
    second = register_finmcp(finmcp_file(tmp_path / "y" / "dup.jsonl"))
    assert first == "finmcp/dup-v0" != second and second.startswith("finmcp/dup-")
    assert register_finmcp(tmp_path / "x" / "dup.jsonl") == first  # the same file keeps its id
    register_factory("finmcp/taken-v0", partial(make_mcp_env, None, []))
    with pytest.raises(ValueError, match="already registered"):
        register_finmcp(finmcp_file(tmp_path / "taken.jsonl"))
    gym.registry.pop("finmcp/taken-v0")


@pytest.mark.parametrize(
    "args, says",
    [
        (["--agent", "oracel"], "unknown agent"),
        (["--suites", "EnvACE/no-such-suite-v0"], "no-such-suite"),
        (["--user", "gpt-4o"], "MODEL@BASE_URL"),
        (["--agent-kwargs", "temperature=2"], "temperature"),
        (["--suites", "EnvACE/vitabench-delivery-v0"], "judge"),
    ],
)
def test_an_eval_that_can_measure_nothing_is_one_line_and_exit_2(tmp_path, args, says):
    suites = [] if "--suites" in args else ["--suites", OFFICE]
    argv = ["eval", *suites, "--limit", "1", "--out", str(tmp_path), *args]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error:") and says in line
    assert not (tmp_path / "results.json").exists()


AGENT_FILE = """
from envace_gym.agents.oracle import OracleAgent


class Mine(OracleAgent):
    pass
"""


def test_an_agent_given_as_a_path_names_its_world_model_file_safely(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "my_agents_eval.py").write_text(AGENT_FILE)
    agent = f"{tmp_path}/mine/my_agents_eval.py:Mine"
    out = tmp_path / "eval"
    argv = ["eval", "--agent", agent, "--suites", "EnvACE/bfcl-multi-turn-base-v0", "--limit", "1", "--world-model"]
    result = runner.invoke(app, [*argv, "--out", str(out)])
    assert result.exit_code == 0, result.output
    world = sorted(p.relative_to(out) for p in (out / "world").rglob("*.jsonl"))
    assert len(world) == 3 and all(p.parts[:3] == ("world", "EnvACE", "bfcl-multi-turn-base-v0") for p in world)
    again = runner.invoke(app, [*argv, "--resume", "--out", str(out)])
    assert again.exit_code == 0, again.output


def test_a_second_writer_is_refused_and_nothing_written_is_lost(tmp_path):
    out = tmp_path / "run.jsonl"
    first = Run(RunConfig(OFFICE, limit=2, out=str(out)))
    records = list(first)
    before = out.read_bytes()
    assert len(records) == 2 and not out.with_name("run.jsonl.lock").exists()  # released when played
    with OutputLock(out):
        with pytest.raises(OutputInUse, match=r"pid \d+"):
            Run(RunConfig(OFFICE, limit=2, seed=5, out=str(out)))
        # another process, through the command line: one line naming this one, and the file untouched
        command = [sys.executable, "-m", "envace_gym.cli", "run", OFFICE, "--limit", "2", "--seed", "5"]
        other = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert other.returncode == 2 and f"pid {os.getpid()}" in other.stdout, other.stdout
        assert out.read_bytes() == before
    folder = tmp_path / "eval"
    holder = Evaluation(EvalConfig(suites=[OFFICE], limit=1, out=str(folder)))
    with pytest.raises(OutputInUse, match="being written"):
        Evaluation(EvalConfig(suites=[OFFICE], limit=1, out=str(folder)))
    holder.close()
    Evaluation(EvalConfig(suites=[OFFICE], limit=1, out=str(folder))).close()


def test_a_run_killed_mid_call_leaves_no_child_and_no_lock(tmp_path):
    out = tmp_path / "run.jsonl"
    holder = subprocess.Popen([sys.executable, str(SUPPORT / "locked_call.py"), str(out)], stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"calling\n"
    deadline = time.monotonic() + 30
    while not (children := psutil.Process(holder.pid).children()):  # the isolated call's child
        assert time.monotonic() < deadline
        time.sleep(0.05)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    _, alive = psutil.wait_procs(children, timeout=5)  # it died with its parent
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in alive)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the kernel dropped the lock: nothing to take over
        OutputLock(out).acquire().release()


def test_a_forked_child_never_holds_an_output_lock(tmp_path):
    lock = OutputLock(tmp_path / "run.jsonl").acquire()
    wait, go = os.pipe()
    started, ready = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child that outlives its parent's hold on the lock
        os.write(ready, b"x")  # the fork hooks have run by the time the child's own code does
        os.read(wait, 1)
        os._exit(0)
    try:
        os.read(started, 1)
        lock._held.close()  # as the holder's death would: now only the child's copy could keep the lock
        with open(lock.file) as again:
            fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.write(go, b"x")
        os.waitpid(pid, 0)


def test_a_lock_naming_an_ended_process_is_taken_over_with_a_warning(tmp_path):
    out = tmp_path / "run.jsonl"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(ended.stdout)
    with open(out.with_name("run.jsonl.lock"), "a+") as stale:  # still held, as by an orphan of a killed run
        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)
        stale.write(f"pid {dead} (since 12:00:00)")
        stale.flush()
        with pytest.warns(RuntimeWarning, match=f"pid {dead}, which has ended"), OutputLock(out) as lock:
            assert lock.file.read_text().startswith(f"pid {os.getpid()} ")
        with pytest.raises(OutputInUse):  # a holder that lives is never taken over
            with OutputLock(out), OutputLock(out):
                pass


def test_names_holding_markup_print_as_they_are(tmp_path):
    out = tmp_path / "odd[/]name[red].jsonl"
    result = runner.invoke(app, ["run", OFFICE, "--limit", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "odd[/]name[red].jsonl" in result.output
    fin = finmcp_file(tmp_path / "[/]fin.jsonl")
    evaluated = runner.invoke(app, ["eval", "--suites", str(fin), "--out", str(tmp_path / "e[/]")])
    assert evaluated.exit_code == 0, evaluated.output
    assert "e[/]" in evaluated.output


def test_eval_starts_by_removing_what_it_rewrites_and_a_failed_write_is_one_line(tmp_path, monkeypatch):
    out = tmp_path / "eval"
    (out / "world" / "old").mkdir(parents=True)
    stale = [out / "results.json", out / "results.md", out / "results.png", out / "world" / "old" / "x.jsonl"]
    for path in stale:
        path.write_text("another agent's")
    Evaluation(EvalConfig(suites=[OFFICE], limit=1, out=str(out))).close()
    assert not any(p.exists() for p in stale)

    def full_disk(results, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("envace_gym.evaluation.evaluate.plot_eval", full_disk)
    result = runner.invoke(app, ["eval", "--suites", OFFICE, "--limit", "1", "--out", str(out)])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1].startswith("error:"), result.output
    assert not (out / "results.png").exists() and not list(out.glob(".*part*"))
    assert json.loads((out / "results.json").read_text())["agent"] == "oracle"  # written whole


def test_ctrl_c_in_the_world_model_stage_says_how_to_go_on(tmp_path, monkeypatch):
    def interrupted(self, on_call=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(Evaluation, "world_rows", interrupted)
    argv = ["eval", "--suites", "EnvACE/bfcl-multi-turn-base-v0", "--limit", "1", "--world-model"]
    result = runner.invoke(app, [*argv, "--out", str(tmp_path)])
    assert result.exit_code == 130 and "--resume" in result.output
    assert not (tmp_path / ".lock").exists()


def test_earlier_results_are_never_replaced_without_overwrite(tmp_path):
    out = tmp_path / "eval"
    common = ["eval", "--suites", OFFICE, "--limit", "1", "--out", str(out)]
    assert runner.invoke(app, common).exit_code == 0
    kept = sorted((out / "records").rglob("*.jsonl"))
    again = runner.invoke(app, common)
    assert again.exit_code == 2 and "--overwrite replaces them" in again.output
    assert sorted((out / "records").rglob("*.jsonl")) == kept and (out / "results.json").exists()
    other = runner.invoke(app, ["eval", "--suites", "EnvACE/tau2-mock-v0", *common[3:], "--overwrite"])
    assert other.exit_code == 0, other.output
    assert [p.parts[-2] for p in (out / "records").rglob("*.jsonl")] == ["tau2-mock-v0"]  # the earlier env's are gone
    both = runner.invoke(app, [*common, "--resume", "--overwrite"])
    assert both.exit_code == 2 and "give one of them" in both.output
    compared = tmp_path / "c.jsonl"
    compare = ["compare", OFFICE, "--limit", "1", "--out", str(compared)]
    assert runner.invoke(app, compare).exit_code == 0
    assert runner.invoke(app, compare).exit_code == 2
    assert runner.invoke(app, [*compare, "--overwrite"]).exit_code == 0
