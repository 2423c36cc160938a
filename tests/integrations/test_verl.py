"""The envace agent loop and the role-wise estimator in verl 0.9.1, in verl's own venv (.venv-verl,
made by `make setup`): tests/support/verl_loop.py runs there against a server manager backed by the tiny
model and by the oracle's replies, and reports each check as a JSON line."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from fakes import FakeChatServer
from paths import ROOT, SUPPORT
from safetensors.torch import load_file

VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"


@pytest.fixture(scope="module")
def checks(tiny) -> list[dict]:
    """Every check of tests/support/verl_loop.py, one JSON line each, from one process in verl's venv."""
    if not VERL_PYTHON.exists():
        pytest.skip(f"no verl venv at {VERL_PYTHON.parent.parent}: `make setup` makes it")
    done = subprocess.run(
        [str(VERL_PYTHON), str(SUPPORT / "verl_loop.py"), str(tiny)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def by_case(checks: list[dict]) -> dict[str, dict]:
    """The estimator's checks (batches with one thing wrong, and against verl's GRPO), by case: taken from
    ``checks`` in each test, so that every test of the fixture is one xdist group and it is built once."""
    return {c["case"]: c for c in checks if c["check"] in ("batch", "grpo")}


@pytest.mark.slow
def test_the_loop_gives_the_tokens_masks_and_roles_of_collect_under_real_and_rehearsed_dynamics(checks):
    agreement = [c for c in checks if c["check"] == "agreement"]
    assert len(agreement) == 6
    for c in agreement:
        assert c["ids"] and c["roles"] and c["mask"] and c["logprobs"] and c["prompt_untrained"], c
        assert c["reward"][0] == c["reward"][1] and c["reward_info"] and c["error"] is None, c
    oracle = [c for c in agreement if c["case"].startswith("oracle")]
    assert [c["reward"][0] for c in oracle] == [1.0] * 4
    assert all((c["rehearse_tokens"] > 0) == c["case"].endswith("rehearsed") for c in oracle)


@pytest.mark.slow
def test_a_hostile_or_failing_server_manager_ends_the_episode_with_its_error(checks):
    hostile = {c["case"]: c for c in checks if c["check"] == "hostile"}
    assert set(hostile) == {"raises", "out of vocabulary", "no log-probs", "nan log-prob", "empty"}
    for c in hostile.values():
        assert c["error"] and c["reward"] == 0.0 and c["trained"] == 0, c
    assert "the server went away" in hostile["raises"]["error"]


@pytest.mark.slow
def test_role_wise_advantages_in_verl_equal_the_trainers_and_the_hook_serves_them(checks):
    advantages = [c for c in checks if c["check"] == "advantages"]
    assert [(c["case"], c["same"], c["nonzero"]) for c in advantages] == [("episode", True, True), ("row", True, True)]
    assert [c["same"] for c in checks if c["check"] == "hook"] == [True]


@pytest.mark.parametrize("case", ["nan reward", "inf reward"])
def test_a_non_finite_reward_leaves_its_row_out_as_the_trainer_leaves_out_a_failed_reward(checks, case):
    c = by_case(checks)[case]
    assert c["error"] is None and c["finite"] and c["left_out"] and c["rest"], c
    assert c["warned"] == ["1 of 4 rows have a non-finite reward: left out (advantage 0)"], c


@pytest.mark.parametrize("norm", [False, True])
def test_the_estimator_is_verls_grpo_but_for_the_documented_differences(checks, norm):
    """docs/integrations/verl.md: population std against verl's sample std, 0 for a group of equal
    rewards (float32 rounding of its mean is no signal) and for a one-sample group (verl: its reward)."""
    c = by_case(checks)[f"grpo norm={norm}"]
    assert c["groups_agree"] == [True, True], c
    assert c["equal"] == [0.0] * 6 and c["single"] == [0.0] * 2, c
    assert c["verl_single"] == pytest.approx([0.8 / (1 + 1e-6) if norm else 0.8] * 2), c


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("index short", "index has 3 entries for a batch of 4 rows"),
        ("envace_roles short", "envace_roles has 3 entries for a batch of 4 rows"),
        ("envace_generations long", "envace_generations has 5 entries for a batch of 4 rows"),
        ("response_mask short", r"response_mask is Tensor \[3, 4\], token_level_rewards \[4, 4\]"),
        ("index row missing", r"index\[2\] is missing"),
        ("envace_roles row missing", r"envace_roles\[2\] must be a list of role ids, got NoneType"),
        ("envace_generations row missing", r"envace_generations\[2\] must map act and rehearse to counts"),
        ("envace_roles row too long", r"envace_roles\[0\] has 5 roles for 4 response tokens"),
        ("envace_roles row not roles", r"envace_roles\[0\] holds ids that are no role's: \[0, 1, 7\]"),
        ("envace_generations key missing", "needs the envace loop's envace_generations"),
        ("uid key missing", r"needs the batch's group index \(verl's uid\)"),
    ],
)
def test_a_malformed_batch_is_a_value_error_naming_the_field(checks, case, message):
    error = by_case(checks)[case]["error"]
    assert error and error.startswith("ValueError: ") and re.search(message, error), error


@pytest.mark.slow
def test_the_gpu_recipes_compose_in_verls_own_config_and_their_datasets_load(tmp_path):
    """The recipes need GPUs to run; here their datasets are written (2 tasks a split) and verl's hydra
    composes their configuration (``--cfg job``: every override must name a key verl has)."""
    if not VERL_PYTHON.exists():
        pytest.skip(f"no verl venv at {VERL_PYTHON.parent.parent}: `make setup` makes it")
    for script in ("qwen3_8b_envace.sh", "one_gpu_small.sh"):
        first = (ROOT / "examples" / "verl" / script).read_text().splitlines()[1]
        assert first.startswith("# NEEDS") and "not run by the tests" in first
    env = {**os.environ, "PATH": f"{VERL_PYTHON.parent}{os.pathsep}{os.environ['PATH']}", "LIMIT": "2"}
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "verl" / "one_gpu_small.sh"), "--cfg", "job"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**env, "DATA": str(tmp_path / "data")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "adv_estimator: envace_rolewise" in done.stdout and "default_agent_loop: envace" in done.stdout
    assert "worker_process_setup_hook: envace_gym.integrations.verl.install" in done.stdout
    assert "use_v1: false" in done.stdout
    assert "model:\n" in done.stdout and "Qwen/Qwen3-0.6B" in done.stdout
    rows = subprocess.run(
        [
            str(VERL_PYTHON),
            "-c",
            "import pandas as pd, sys; print(len(pd.read_parquet(sys.argv[1])))",
            str(tmp_path / "data" / "train.parquet"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rows.stdout.strip() == "2", rows.stderr


CALL = '<tool_call>\n{"name": "get_users", "arguments": {}}\n</tool_call>'


def forced_model(tiny: Path, out: Path) -> Path:
    """The tiny model, copied, with a ``sequence_bias`` in its generation config under which it plays an
    episode of tau2's mock domain in three turns: it calls get_users, rehearses the call's response (one
    random token at least, then each token ends it with odds of about one in two, so the group's
    episodes differ; never the end of sequence, which only the forced turns write), and says it is done
    (the user stops: an episode that ends, so its judge scores it)."""
    from transformers import AutoTokenizer

    shutil.copytree(tiny, out)
    tokenizer = AutoTokenizer.from_pretrained(out)

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def forcing(text: str, after: str, scale: float) -> list:
        context, target = ids(after), ids(text + tokenizer.eos_token)
        return [[context + target[: k + 1], scale * (k + 1)] for k in range(len(target))]

    end = ids("</tool_response>")
    bias = forcing(CALL, "<|im_start|>assistant\n", 100.0)
    bias += forcing("Done. ###STOP###", "</tool_response><|im_end|>\n<|im_start|>assistant\n", 300.0)
    bias += [[end, 8.0], [ids("<tool_response>\n") + end, -100.0], [[tokenizer.eos_token_id], -100.0]]
    config = json.loads((out / "generation_config.json").read_text())
    (out / "generation_config.json").write_text(json.dumps({**config, "sequence_bias": bias}))
    return out


def main_ppo_overrides(run: Path, model: Path, data: Path) -> list[str]:
    """One GRPO step of verl's own trainer (``RayPPOTrainer.fit``) on CPU: one prompt, two envace episodes,
    the envace_rolewise estimator, FSDP2 over two gloo ranks, the ``hf`` rollout of tests/support/verl_cpu.py."""
    return [
        "trainer.use_v1=false",  # RayPPOTrainer (v1's TaskRunner needs TransferQueue, verl's verl-core extra)
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",  # the FSDP ranks: Ray's logical GPUs, one per rank
        "trainer.nnodes=1",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=1",
        f"trainer.default_local_dir={run / 'checkpoints'}",
        "trainer.logger=[console,file]",
        "algorithm.adv_estimator=envace_rolewise",
        "algorithm.use_kl_in_reward=false",
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.train_batch_size=1",
        "data.max_prompt_length=1024",
        "data.max_response_length=256",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",  # one replica over both ranks
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.agent.default_agent_loop=envace",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={ROOT / 'examples' / 'verl' / 'agent_loops.yaml'}",
        "reward.num_workers=0",  # the loop scores its episodes: verl's reward workers are never asked
        "ray_kwargs.ray_init.num_cpus=16",
        "+ray_kwargs.ray_init.include_dashboard=false",  # its processes would start and import for nothing here
        "+ray_kwargs.ray_init.num_gpus=2",
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=verl_cpu.setup",
    ]


class Judge(FakeChatServer):
    """The episodes' judge: 1 for the first episode it scores, 0 for the second."""

    replies = [{"role": "assistant", "content": json.dumps({"score": s, "reason": "-"})} for s in (1.0, 0.0)]
    requests: list = []


@pytest.fixture(scope="module")
def main_ppo_step(tiny, tmp_path_factory) -> dict:
    """One GRPO step through ``python -m verl.trainer.main_ppo`` on this CPU machine: its metrics (verl's
    file logger), the batch its advantage computation saw and gave, the weights before and after."""
    if not VERL_PYTHON.exists():
        pytest.skip(f"no verl venv at {VERL_PYTHON.parent.parent}: `make setup` makes it")
    run = tmp_path_factory.mktemp("main_ppo")
    model, data = forced_model(tiny, run / "model"), run / "train.parquet"
    judge = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    env = {
        **os.environ,
        "PYTHONPATH": str(SUPPORT),
        "VERL_PLATFORM": "cpu",
        "VERL_USE_EXTERNAL_MODULES": "verl_cpu",
        "VERL_ENGINE_DEVICE": "cuda",  # verl's FSDP engine, registered for cuda and npu, on the cpu platform
        "VERL_FILE_LOGGER_PATH": str(run / "metrics.jsonl"),
        "ENVACE_VERL_BATCH": str(run / "batch.json"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    dataset = [str(ROOT / "examples" / "verl" / "make_dataset.py"), "EnvACE/tau2-mock-gen-v0", "--split", "train"]
    dataset += ["--dynamics", "rehearsed", "--limit", "1", "--max-turns", "4", "--out", str(data)]
    dataset += ["--reward", f"judge:judge@http://127.0.0.1:{judge.server_address[1]}/v1"]
    try:
        for argv in ([*dataset], ["-m", "verl.trainer.main_ppo", *main_ppo_overrides(run, model, data)]):
            done = subprocess.run([str(VERL_PYTHON), *argv], capture_output=True, text=True, cwd=run, env=env)
            assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    finally:
        judge.shutdown()
    return {
        "metrics": json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["data"],
        "batch": json.loads((run / "batch.json").read_text()),
        "before": load_file(model / "model.safetensors"),
        "after": load_file(run / "checkpoints" / "global_step_1" / "actor" / "huggingface" / "model.safetensors"),
        "judged": len(Judge.requests),
    }


@pytest.mark.slow
def test_one_grpo_step_of_verls_main_ppo_runs_on_cpu_and_changes_the_weights(main_ppo_step):
    metrics, before, after = main_ppo_step["metrics"], main_ppo_step["before"], main_ppo_step["after"]
    assert metrics["training/global_step"] == 1 and main_ppo_step["judged"] == 2
    assert (metrics["critic/rewards/min"], metrics["critic/rewards/max"]) == (0.0, 1.0)
    assert math.isfinite(metrics["actor/pg_loss"]) and math.isfinite(metrics["actor/grad_norm"])
    assert metrics["actor/grad_norm"] > 0
    assert set(after) <= set(before) and all(after[k].isfinite().all() for k in after)
    assert any(not torch.equal(before[k], after[k].to(before[k].dtype)) for k in after)
    # the same step (verl's main_ppo is run once: minutes) trained both roles with role-wise advantages
    check_both_roles_trained_with_role_wise_advantages(main_ppo_step["batch"])


def check_both_roles_trained_with_role_wise_advantages(batch: dict) -> None:
    """The batch verl's advantage step saw and gave: act and rehearse tokens both carry gradient, with the
    project's role-wise advantages."""
    from envace_gym.training.grpo import ROLE_IDS, token_advantages

    rewards = torch.tensor(batch["token_level_rewards"]).sum(-1)
    mask, got = torch.tensor(batch["response_mask"]), torch.tensor(batch["advantages"])
    width = mask.shape[1]
    roles = torch.tensor([(r + [0] * width)[:width] for r in batch["envace_roles"]])
    groups = torch.tensor([batch["uid"].index(u) for u in batch["uid"]])
    counts = {k: torch.tensor([g[k] for g in batch["envace_generations"]]) for k in ("act", "rehearse")}
    assert sorted(rewards.tolist()) == [0.0, 1.0] and len(set(batch["uid"])) == 1  # one group, judged apart
    assert batch["responses"][0] != batch["responses"][1]  # two episodes (their gradients do not cancel)
    assert torch.allclose(got, token_advantages(rewards, groups, roles, counts, "episode", True) * mask)
    for role in ("act", "rehearse"):  # every token of both roles is trained, with an advantage
        tokens = roles == ROLE_IDS[role]
        assert tokens.any() and (mask[tokens] == 1).all() and (got[tokens] != 0).all()
    assert (got[roles == ROLE_IDS["context"]] == 0).all()
