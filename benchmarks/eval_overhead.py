"""What ``eval`` adds to the same runs made one by one (target: at most 10%).

Both sides play the oracle on the paper's envs that run without a judge (BFCL's 15 wrapped categories,
tau2's three domains), ``--limit`` tasks each, in this process. The baseline makes each env's
:class:`~envace_gym.play.run.Run` and plays it, as ``envace-gym run`` does; ``eval`` does the same through
:class:`~envace_gym.evaluation.Evaluation`, then scores every benchmark (bfcl-eval's and tau2's code),
and writes results.json, the Markdown table and the PNG. The two alternate, ``--repeats`` rounds; the
medians are compared. Then the same as commands: ``envace-gym run`` once per env, one process each,
against one ``envace-gym eval`` process.

    python benchmarks/eval_overhead.py --limit 5 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import envace_gym  # noqa: F401
from envace_gym.evaluation import PAPER, EvalConfig, Evaluation, markdown
from envace_gym.play.run import Run, RunConfig
from envace_gym.reporting.figures import plot_eval


def one_by_one(limit: int, out: Path) -> float:
    start = time.perf_counter()
    for benchmark in PAPER[:2]:
        for env_id in benchmark.env_ids:
            path = out / f"{env_id.split('/')[-1]}.jsonl"
            run = Run(RunConfig(env_id, agent="oracle", split=benchmark.split, limit=limit, out=str(path)))
            list(run)
            for env in run.envs:
                env.close()
    return time.perf_counter() - start


def evaluated(limit: int, out: Path) -> float:
    start = time.perf_counter()
    ids = [e for b in PAPER[:2] for e in b.env_ids]
    evaluation = Evaluation(EvalConfig(agent="oracle", suites=[",".join(ids)], limit=limit, out=str(out)))
    for _, run in evaluation.runs():
        list(run)
        for env in run.envs:
            env.close()
    results = evaluation.results()
    (out / "results.json").write_text(results.model_dump_json(indent=1))
    (out / "results.md").write_text(markdown(results))
    plot_eval(results, out / "results.png")
    return time.perf_counter() - start


def commands(limit: int, out: Path) -> dict[str, float]:
    """Seconds of the ``run`` commands one by one, and of one ``eval`` command, on the same envs."""
    cli = [sys.executable, "-m", "envace_gym.cli"]
    start = time.perf_counter()
    for benchmark in PAPER[:2]:
        for env_id in benchmark.env_ids:
            split = ["--split", benchmark.split] if benchmark.split else []
            path = out / f"{env_id.split('/')[-1]}.jsonl"
            cmd = [*cli, "run", env_id, "--agent", "oracle", *split, "--limit", str(limit), "--out", str(path)]
            subprocess.run(cmd, check=True, capture_output=True)
    runs = time.perf_counter() - start
    ids = ",".join(e for b in PAPER[:2] for e in b.env_ids)
    start = time.perf_counter()
    cmd = [*cli, "eval", "--agent", "oracle", "--suites", ids, "--limit", str(limit), "--out", str(out / "eval")]
    subprocess.run(cmd, check=True, capture_output=True)
    return {"run_commands_s": round(runs, 2), "eval_command_s": round(time.perf_counter() - start, 2)}


def main(args) -> dict:
    times: dict[str, list[float]] = {"one_by_one": [], "eval": []}
    one_by_one(1, Path(tempfile.mkdtemp()))  # warm: the suites' data loaded once, as in any process
    evaluated(1, Path(tempfile.mkdtemp()))
    for round_ in range(args.repeats):
        order = ("one_by_one", "eval") if round_ % 2 == 0 else ("eval", "one_by_one")
        for name in order:
            fn = one_by_one if name == "one_by_one" else evaluated
            times[name].append(fn(args.limit, Path(tempfile.mkdtemp())))
    base, ev = statistics.median(times["one_by_one"]), statistics.median(times["eval"])
    return {
        "envs": sum(len(b.env_ids) for b in PAPER[:2]),
        "limit": args.limit,
        "repeats": args.repeats,
        "one_by_one_s": round(base, 3),
        "eval_s": round(ev, 3),
        "overhead": f"{100 * (ev / base - 1):+.1f}%",
        **commands(args.limit, Path(tempfile.mkdtemp())),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    print(json.dumps(main(parser.parse_args()), indent=1))
