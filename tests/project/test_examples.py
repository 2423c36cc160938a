"""Every script in examples/ runs end to end on tiny settings (CleanRL's habit: examples are executed,
not just shown). Each runs as its own process from a temporary folder, writing only there.

Covered elsewhere: examples/my_suite.py (test_authoring.py), mcp_register.py (test_cli.py),
mcp_notes_server.py (test_mcp.py, and here as mcp_env.py's default server). examples/gpu/ needs GPUs:
only what a CPU can check is checked (the scripts parse, every option they pass exists)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from paths import EXAMPLES

GPU = EXAMPLES / "gpu"
# the smallest GRPO run and evaluation of examples/rehearsal_study.py (one step, one episode pair,
# one turn of four tokens, one test task)
TINY_GRPO = (
    "--steps 1 --eval-every 1 --fidelity-every 1 --group-size 2 --tasks-per-step 1 --minibatch 2 "
    "--eval-tasks 1 --new-tokens 4 --max-turns 1"
).split()


def environ(**extra: str) -> dict:
    """This environment, offline, with this interpreter's folder first on PATH (the shell scripts call ``python``)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return {**env, **extra}


def run(command: list, cwd: Path, timeout: float = 600, **env: str) -> str:
    """Run ``command`` in ``cwd``; its output (stdout and stderr), or a failure that shows the end of it."""
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=environ(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{' '.join(map(str, command))} exited {done.returncode}:\n{done.stdout[-6000:]}"
    return done.stdout


def example(name: str, *args, cwd: Path, **env: str) -> str:
    return run([sys.executable, EXAMPLES / name, *args], cwd, **env)


@pytest.mark.slow
def test_mcp_env_plays_the_notes_server(tmp_path):
    out = example("mcp_env.py", cwd=tmp_path)
    assert "tools: ['add_note', 'list_notes', 'read_note', 'delete_note']" in out
    assert "| reward: 1.0 tool_f1" in out  # the oracle's call, scored against the gold one


@pytest.mark.slow
def test_sb3_ppo(tmp_path):
    args = ("--steps", 1, "--episodes", 2, "--knn-tasks", 1, "--out", tmp_path / "sb3")
    out = example("sb3_ppo.py", *args, cwd=tmp_path)
    results = json.loads((tmp_path / "sb3" / "results.json").read_text())
    assert results["steps"] == 1 and results["random"]["real"]["episodes"] == 2
    for name in ("oracle", "knn"):  # both world models trained, each scored in both worlds
        assert results[name]["rehearsed"]["reward_source"] == ["replay"]
        assert results[name]["real"]["reward_source"] == ["world"]
        assert f"PPO, {name} world" in out
    assert sorted(results["random"]["rehearsed"]) == ["knn", "oracle"]


@pytest.mark.slow
def test_train_rehearsal(tmp_path):
    out = tmp_path / "train_rehearsal"
    example(
        "train_rehearsal.py",
        *("--seeds", 0, "--hidden", 64, "--layers", 1, "--warm-tasks", 1, "--warm-epochs", 1),
        *("--grpo-steps", 1, "--group-size", 2, "--eval-tasks", 1, "--new-tokens", 2, "--out", out),
        cwd=tmp_path,
    )
    (row,) = json.loads((out / "results.json").read_text())
    assert row["seed"] == 0 and len(row["grpo_rewards"]) == 1
    for phase in ("before", "warm", "grpo"):
        assert {"act_reward", "gold_share", "valid_calls", "leaf_match", "loss_act", "loss_rehearse"} <= set(row[phase])
    assert (out / "results.png").stat().st_size > 0
    assert (out / "seed0" / "warm" / "step-1").is_dir() and (out / "seed0" / "grpo" / "step-1").is_dir()
    # the warm start trained on act and rehearse tokens (a 5,000-token context cut at 4,096 trained none)
    warm = [json.loads(line) for line in (out / "seed0" / "warm" / "metrics.jsonl").read_text().splitlines()]
    assert all(step["loss/act"] is not None and step["loss/rehearse"] is not None for step in warm)


@pytest.mark.slow
def test_rehearsal_study_room(tmp_path):
    out = tmp_path / "room"
    example("rehearsal_study_room.py", "--dry-run", "--sizes", "1m", "16m", "--out", out, cwd=tmp_path)
    assert json.loads((out / "settings.json").read_text())["sizes"] == ["1m", "16m"]
    example(
        "rehearsal_study_room.py",
        *("--sft-steps", 1, "--steps", 1, "--eval-every", 1, "--episodes", 1, "--group-size", 2, "--tasks-per-step", 1),
        *("--conditions", "real", "envace", "--new-tokens", 4, "--max-turns", 1, "--out", out),
        cwd=tmp_path,
    )
    (run_,) = json.loads((out / "rehearsal_study_room.json").read_text())["runs"]
    assert (run_["size"], run_["seed"]) == ("1m", 0) and {"share", "reward", "leaf_match"} <= set(run_["warm"])
    for name in ("real", "envace"):
        assert [p["step"] for p in run_[name]["curve"]] == [0, 1]
        assert set(run_[name]["leaf_match"]) == {"before", "after"}
    assert (out / "rehearsal_study_room.png").stat().st_size > 0


@pytest.mark.slow
def test_trl_grpo_both_routes(tiny, tmp_path):
    out = example("trl_grpo.py", "--model", tiny, "--out", tmp_path / "trl", cwd=tmp_path)
    assert "environment_factory: one step in" in out and "rollout_func: one step in" in out


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """examples/rehearsal_study.py's main path, two seeds (one child process each), every phase and
    condition at its smallest; the warm start is SFT step 1 (saved as seed{N}/warm, as the ablations need)."""
    out = tmp_path_factory.mktemp("study")
    log = example(
        "rehearsal_study.py",
        *("--seeds", 0, 1, "--hidden", 64, "--layers", 1, "--sft-episodes", 2, "--sft-steps", 1, "--sft-batch", 1),
        *("--sft-eval-every", 1, "--warm-step", 1, "--val-fidelity", 1, "--before-tasks", 1, *TINY_GRPO),
        *("--out", out),
        cwd=out,
    )
    assert "child exit codes [0, 0]" in log, log[-4000:]
    return out


@pytest.mark.slow
def test_rehearsal_study_and_its_summary(study):
    results = json.loads((study / "results.json").read_text())
    assert [r["seed"] for r in results["runs"]] == [0, 1]
    for run_ in results["runs"]:
        assert run_["warm_step"] == 1 and len(run_["sft_curve"]) == 1
        for name in ("real", "envace", "act-only", "adaptive", "adaptive-wm"):
            assert [p["step"] for p in run_[name]] == [0, 1]
    assert {"before", "warm", "plateau", "real", "envace", "act-only"} <= set(results["summary"])
    for name in ("results.md", "results.png", "sft_curve.png"):
        (study / name).unlink()
    example("rehearsal_study.py", "--summarize", "--out", study, cwd=study)  # redrawn from the seed files
    assert json.loads((study / "results.json").read_text())["summary"] == results["summary"]
    assert "| GRPO, envace |" in (study / "results.md").read_text()
    assert (study / "results.png").is_file() and (study / "sft_curve.png").is_file()


def ablations(script: str, study: Path, out: Path, dry_run: bool = False, **env: str) -> dict[str, dict]:
    """Run an ablation script tiny from ``study``'s warm start (``dry_run``: each run only checks and
    writes its settings); each run's arguments, by run name. The script does not fail when a run does
    (its runs' output goes to OUT/NAME.log): each is checked."""
    args = " ".join([*TINY_GRPO, *["--dry-run"] * dry_run])
    run(["bash", EXAMPLES / script], out.parent, WARM=str(study), OUT=str(out), STUDY_ARGS=args, **env)
    runs = {}
    for log in sorted(out.glob("*.log")):
        results = log.with_suffix("") / ("settings.json" if dry_run else "results.json")
        assert results.is_file(), f"{log.name}:\n{log.read_text()[-4000:]}"
        found = json.loads(results.read_text())
        if not dry_run:
            assert [p["step"] for p in found["runs"][0]["real"]] == [0, 1], log.name
        runs[log.stem] = found if dry_run else found["args"]
    return runs


@pytest.mark.slow
def test_study_ablations(study, tmp_path):
    # its settings reach the study and its warm start is found (the training is round 3's below, for real)
    runs = ablations("study_ablations.sh", study, tmp_path / "ablate", dry_run=True)
    assert sorted(runs) == ["clip0.1", "group16", "kl0.05", "lr1e-3", "lr1e-4", "temp0.7"]
    for args in runs.values():  # the script's settings, then the tiny ones, then each run's own
        assert args["warm_from"] == str(study) and args["conditions"] == ["real"] and args["steps"] == 1
        assert args["reward"] == "strict_progress"
    assert runs["lr1e-3"]["lr"] == 1e-3 and runs["temp0.7"]["temperature"] == 0.7
    assert runs["clip0.1"]["clip_eps"] == 0.1 and runs["kl0.05"]["kl_coef"] == 0.05
    assert runs["group16"]["group_size"] == 16 and runs["lr1e-4"]["lr"] == 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("part", ["1", "2"])
def test_study_ablations_round3(study, tmp_path, part):
    runs = ablations("study_ablations_round3.sh", study, tmp_path / "ablate3", dry_run=part == "2", PART=part)
    for args in runs.values():
        assert args["warm_from"] == str(study) and args["steps"] == 1 and args["reward"] == "strict_progress"
    if part == "1":
        assert sorted(runs) == ["baseline", "charged", "scaled"]
        assert runs["scaled"]["scale_advantages"] and runs["charged"]["charge_rejected"]
    else:
        assert sorted(runs) == ["lr1e-4", "warmup25", "warmup25-lr1e-4"]
        assert runs["warmup25-lr1e-4"]["warmup_steps"] == 25 and runs["warmup25-lr1e-4"]["lr"] == 1e-4


# examples/gpu: needs GPUs, so not run; its files are read and its command lines parsed


def gpu_commands() -> dict[str, list[str]]:
    """The command lines of examples/gpu/qwen3_8b_grpo.sh with its variables at their defaults, by
    program (``vllm``, ``accelerate``): environment assignments, redirections and ``"$@"`` left out."""
    script = GPU / "qwen3_8b_grpo.sh"
    text = script.read_text().replace("\\\n", " ")
    values = dict(re.findall(r"^(\w+)=\$\{\1:-([^}]*)\}$", text, re.M))
    values["HERE"] = str(GPU)
    commands = {}
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        while words and re.fullmatch(r"\w+=.*", words[0]):
            words.pop(0)
        if words and words[0] in ("vllm", "accelerate"):
            words = [re.sub(r"\$(\w+)", lambda m: values[m.group(1)], w) for w in words]
            end = next((i for i, w in enumerate(words) if w in (">", "&", "$@")), len(words))
            commands[words[0]] = words[1:end]
    return commands


def test_gpu_files_say_they_need_gpus():
    for path in sorted(GPU.iterdir()):
        lines = path.read_text().splitlines()
        first = lines[1] if lines[0].startswith("#!") else lines[0]
        assert first.startswith("# NEEDS GPUS") and "not run by the tests" in first, path.name


def test_gpu_recipe_parses_and_passes_only_options_that_exist():
    import typer
    import yaml
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser

    from envace_gym.cli import app
    from envace_gym.cli.options import config_from
    from envace_gym.cli.training import TRAINING_FIELDS
    from envace_gym.training.config import TrainConfig

    subprocess.run(["bash", "-n", GPU / "qwen3_8b_grpo.sh"], check=True)
    # the accelerate config: every key one accelerate reads (it refuses unknown ones), no FSDP plugin
    assert yaml.safe_load((GPU / "accelerate_fsdp.yaml").read_text())["num_processes"] == 6
    config = ClusterConfig.from_yaml_file(GPU / "accelerate_fsdp.yaml")
    assert config.distributed_type == "MULTI_GPU" and config.num_processes == 6 and config.gpu_ids == "0,1,2,3,4,5"
    commands = gpu_commands()
    assert sorted(commands) == ["accelerate", "vllm"]
    # accelerate launch's own parser, then envace-gym train's (typer) on what it runs
    launch = commands["accelerate"]
    assert launch[0] == "launch"
    parsed = launch_command_parser().parse_args(launch[1:])
    assert Path(parsed.config_file) == GPU / "accelerate_fsdp.yaml" and parsed.module
    assert parsed.training_script == "envace_gym.cli" and parsed.training_script_args[0] == "train"
    train = typer.main.get_command(app).commands["train"]
    context = train.make_context("train", list(parsed.training_script_args[1:]))
    options = {k: v for k, v in context.params.items() if k != "resume"}
    train_config = config_from(TrainConfig, options, TRAINING_FIELDS)
    assert train_config.model == "vllm:Qwen/Qwen3-8B@http://127.0.0.1:8000/v1"
    assert train_config.fsdp and train_config.bf16 and train_config.roles == ["act", "rehearse"]
    assert (train_config.lr, train_config.tasks_per_step, train_config.group_size) == (1e-6, 16, 4)


@pytest.mark.slow
def test_gpu_recipe_vllm_serve_options_exist():
    """vllm serve's own parser on the script's server command line (importing vLLM takes seconds)."""
    pytest.importorskip("vllm")
    serve = gpu_commands()["vllm"]
    assert serve[0] == "serve"
    check = (
        "import sys\n"
        "from vllm.entrypoints.cli.serve import FlexibleArgumentParser, make_arg_parser\n"
        "args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])\n"
        "print(args.model_tag, args.tensor_parallel_size, args.logprobs_mode)\n"
    )
    out = run([sys.executable, "-c", check, *serve[1:]], GPU)
    assert "Qwen/Qwen3-8B 2 processed_logprobs" in out
