import json
import statistics
from functools import partial

import gymnasium as gym
import pandas as pd
import pytest
from paths import EXAMPLES
from typer.testing import CliRunner

import envace_gym
from envace_gym.cli import app
from envace_gym.registration import SuiteEntry, make_env

runner = CliRunner()


def test_run_writes_records_and_a_summary(tmp_path):
    out = tmp_path / "run.jsonl"
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-airline-v0",
            "--agent",
            "oracle",
            "--dynamics",
            "rehearsed",
            "--task-ids",
            "0,1",
            "--task-ids",
            "2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_json(out, lines=True)
    assert list(frame.task_id.astype(str)) == ["0", "1", "2"]
    assert {
        "task_id",
        "reward",
        "reward_source",
        "reward_info",
        "dynamics",
        "agent",
        "turns",
        "tool_calls",
        "seconds",
    } <= set(frame.columns)
    assert (frame.reward == 1.0).all() and (frame.reward_source == "replay").all()  # comparable with real's world
    assert "mean reward 1.000" in result.output


def test_task_id_ranges_follow_the_splits_order(tmp_path):
    out = tmp_path / "run.jsonl"
    result = runner.invoke(
        app, ["run", "EnvACE/tau2-retail-v0", "--split", "test", "--task-ids", "5..17,20", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    order = gym.make("EnvACE/tau2-retail-v0", split="test").unwrapped.task_ids
    expected = order[order.index("5") : order.index("17") + 1] + ["20"]
    assert [json.loads(line)["task_id"] for line in out.read_text().splitlines()] == expected
    result = runner.invoke(app, ["run", "EnvACE/tau2-retail-v0", "--split", "test", "--task-ids", "17..5"])
    assert result.exit_code == 2 and "comes after" in result.output
    result = runner.invoke(app, ["run", "EnvACE/tau2-retail-v0", "--split", "test", "--task-ids", "5..8"])
    assert result.exit_code == 2 and "no task '8'" in result.output


def test_run_reports_bad_arguments_clearly():
    result = runner.invoke(app, ["run", "--dynamics", "dreamy"])
    assert result.exit_code == 2 and "unknown dynamics" in result.output
    result = runner.invoke(app, ["run", "--task-ids", "no-such-task"])
    assert result.exit_code == 2 and "no-such-task" in result.output


def test_train_on_a_suite_without_splits(tiny, tmp_path):
    out = tmp_path / "bfcl"
    result = runner.invoke(
        app,
        [
            "train",
            "--model",
            f"hf:{tiny}",
            "--env",
            "EnvACE/bfcl-simple-python-v0",
            "--dynamics",
            "real",
            "--split",
            "all",
            "--eval-split",
            "all",
            "--steps",
            "1",
            "--group-size",
            "2",
            "--tasks-per-step",
            "1",
            "--max-new-tokens",
            "8",
            "--eval-every",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert record["rows"] == 2 and "eval/reward" in record and (out / "step-1" / "manifest.json").exists()


AGENT_FILE = """
from envace_gym.agents import Agent


class Echo(Agent):
    def __init__(self, text="Done.", times=1):
        self.text, self.times = text, times
        self.name = f"echo:{text}:{times!r}"

    def act(self, obs):
        return self.text
"""


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _one_line_error(args, *parts):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and all(p in line for p in parts), line


def test_run_loads_a_users_agent_class_with_agent_kwargs(tmp_path, monkeypatch):
    (tmp_path / "echo_agents.py").write_text(AGENT_FILE)
    out = tmp_path / "run.jsonl"
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-mock-v0",
            "--agent",
            f"{tmp_path / 'echo_agents.py'}:Echo",
            "--agent-kwargs",
            "text=Bye ###STOP###",
            "--agent-kwargs",
            "times=3",
            "--task-ids",
            "create_task_1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    (record,) = _records(out)
    assert record["agent"] == "echo:Bye ###STOP###:3" and record["ended_by"] == "user_stop"
    monkeypatch.chdir(tmp_path)  # MODULE:CLASS from the working directory
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-mock-v0",
            "--agent",
            "echo_agents:Echo",
            "--task-ids",
            "create_task_1",
            "--max-turns",
            "1",
            "--out",
            str(out),
            "--overwrite",
        ],
    )
    assert result.exit_code == 0 and _records(out)[0]["agent"] == "echo:Done.:1"
    _one_line_error(["run", "EnvACE/tau2-mock-v0", "--agent", "no_such_agents:Echo"], "cannot import 'no_such_agents'")
    _one_line_error(
        ["run", "EnvACE/tau2-mock-v0", "--agent", "echo_agents:Nope"],
        "'echo_agents:Nope' names no envace_gym.agents.Agent subclass",
    )


def test_run_simulated_with_a_simulator_and_mixed_with_p_real(tmp_path):
    out = tmp_path / "run.jsonl"
    common = [
        "run",
        "EnvACE/tau2-mock-v0",
        "--task-ids",
        "create_task_1,update_task_1",
        "--out",
        str(out),
        "--overwrite",
    ]
    assert runner.invoke(app, [*common, "--dynamics", "simulated", "--simulator", "oracle"]).exit_code == 0
    records = _records(out)
    assert all(r["dynamics"] == "simulated" and r["reward"] == 1.0 and r["tool_calls"] for r in records)
    for p_real, real in (("1", True), ("0", False)):
        assert runner.invoke(app, [*common, "--dynamics", "mixed", "--p-real", p_real]).exit_code == 0
        assert all(bool(r["real_call_ids"]) == real and r["reward"] == 1.0 for r in _records(out))


def test_run_with_an_llm_user(server, tmp_path):
    from fakes import FakeChatServer

    url, _ = server
    FakeChatServer.replies = [
        {"role": "assistant", "content": "Please create a task for me."},
        {"role": "assistant", "content": "Thanks! ###STOP###"},
    ]
    out = tmp_path / "run.jsonl"
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-mock-v0",
            "--user",
            f"llm:user-model@{url}?max_retries=0",
            "--task-ids",
            "create_task_1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    (record,) = _records(out)
    assert record["messages"][2] == {"role": "user", "content": "Please create a task for me."}
    assert record["ended_by"] == "user_stop" and len(FakeChatServer.requests) == 2
    assert FakeChatServer.requests[0]["model"] == "user-model"


def test_repeats_and_batches_give_the_same_records(tmp_path):
    runs = {}
    for batch in ("1", "4"):
        out = tmp_path / f"batch{batch}.jsonl"
        result = runner.invoke(
            app,
            [
                "run",
                "EnvACE/tau2-mock-v0",
                "--dynamics",
                "rehearsed",
                "--repeats",
                "2",
                "--batch",
                batch,
                "--out",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        runs[batch] = sorted(
            ({k: v for k, v in r.items() if k != "seconds"} for r in _records(out)), key=lambda r: r["seed"]
        )
    assert runs["1"] == runs["4"] and [r["seed"] for r in runs["1"]] == list(range(18))
    ids = [r["task_id"] for r in runs["1"]]
    assert ids[0::2] == ids[1::2]  # each task twice in a row


def test_batch_one_is_record_for_record_the_sequential_run_and_batches_use_act_batch():
    import gymnasium as gym

    from envace_gym import agents
    from envace_gym.play.loop import run_episodes

    env = gym.make("EnvACE/tau2-mock-v0", dynamics="rehearsed")
    oracle = agents.load("oracle", env=env)
    ids = env.unwrapped.task_ids[:4]
    expected = []
    for i, task_id in enumerate(ids):  # the loop every run made before batching
        obs, info = env.reset(seed=i, options={"task_id": task_id})
        done, calls = False, 0
        while not done:
            obs, reward, terminated, truncated, info = env.step(oracle.act(obs))
            calls += len(info["tool_calls"])
            done = terminated or truncated
        expected.append(
            (
                task_id,
                reward,
                info["reward_info"],
                info["turn"],
                calls,
                info["ended_by"],
                env.unwrapped.episode.messages,
            )
        )
    got = [
        (r["task_id"], r["reward"], r["reward_info"], r["turns"], r["tool_calls"], r["ended_by"], r["messages"])
        for r in run_episodes(env, oracle, ids)
    ]
    assert got == expected

    class Batched(agents.Agent):
        sizes = []

        def act(self, obs):
            return "Done. ###STOP###"

        def act_batch(self, observations):
            self.sizes.append(len(observations))
            return super().act_batch(observations)

    envs = [gym.make("EnvACE/tau2-mock-v0") for _ in range(3)]
    records = list(run_episodes(envs, Batched(), ids[:3], repeats=2))
    assert Batched.sizes == [3, 3] and len(records) == 6


def test_list_shows_full_ids_task_counts_and_splits():
    result = runner.invoke(app, ["list", "tau2"])
    assert result.exit_code == 0
    for domain in ("retail", "airline", "telecom", "mock", "mock-gen"):
        assert f"EnvACE/tau2-{domain}-v0" in result.output
    assert "test 40*" in result.output
    result = runner.invoke(app, ["list", "tau2-mock", "--json"])
    rows = {r["id"]: r for r in json.loads(result.output)}
    assert rows["EnvACE/tau2-mock-v0"] == {
        "id": "EnvACE/tau2-mock-v0",
        "suite": "mock",
        "tasks": 9,
        "default_split": "base",
        "splits": {"base": 9},
    }
    assert rows["EnvACE/tau2-mock-gen-v0"]["splits"] == {"test": 200, "train": 5000}


def _missing_checkout():
    raise ImportError("the suite needs a checkout: set ITS_ROOT")


def test_list_names_a_suite_that_cannot_load_and_lists_the_rest(monkeypatch):
    """As VitaBench's ids do without VITABENCH_ROOT."""
    entry = SuiteEntry(_missing_checkout)
    monkeypatch.setitem(envace_gym.ENV_IDS, "EnvACE/tau2-retail-missing-v0", entry)
    monkeypatch.setitem(
        gym.registry,
        "EnvACE/tau2-retail-missing-v0",
        gym.envs.registration.EnvSpec("EnvACE/tau2-retail-missing-v0", entry_point=partial(make_env, entry)),
    )
    result = runner.invoke(app, ["list", "tau2-retail", "--json"])
    assert result.exit_code == 0
    rows = {r["id"]: r for r in json.loads(result.output)}
    assert "ITS_ROOT" in rows["EnvACE/tau2-retail-missing-v0"]["unavailable"]
    assert rows["EnvACE/tau2-retail-v0"]["tasks"] == 114


def test_records_carry_env_split_seed_and_shadow_fidelity_and_the_summary_a_standard_error(tmp_path):
    out = tmp_path / "run.jsonl"
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-mock-v0",
            "--dynamics",
            "shadow",
            "--agent",
            "random",
            "--max-turns",
            "3",
            "--seed",
            "5",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    records = _records(out)
    assert all(
        r["env_id"] == "EnvACE/tau2-mock-v0" and r["split"] == "base" and isinstance(r["task_id"], str) for r in records
    )
    assert [r["seed"] for r in records] == list(range(5, 14))
    shadowed = [r["fidelity"] for r in records if r["fidelity"]]
    assert shadowed and set(shadowed[0]) == {"calls", "parsed", "shape", "leaf_match", "error_agree", "exact"}
    rewards = [r["reward"] for r in records]
    error = statistics.stdev(rewards) / len(rewards) ** 0.5
    assert f"mean reward {statistics.fmean(rewards):.3f} ± {error:.3f} (standard error)" in result.output


def test_compare_plot_is_readable_for_80_tools():
    from envace_gym.fidelity import METRICS
    from envace_gym.reporting.figures import fidelity_figure as figure

    names = [f"a_long_tool_name_of_a_large_suite_{i:02d}" for i in range(80)]
    summary = {name: {"calls": 2, **{m: 0.5 for m in METRICS}} for name in [*names, "all"]}
    fig = figure(summary, "80 tools")
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"{n} (2)" for n in [*names, "all"]]
    width, height = fig.get_size_inches()
    assert height > 4 * width  # one row per tool, top to bottom


def test_train_names_the_splits_of_a_suite_without_the_default_one():
    _one_line_error(
        ["train", "--model", "hf:/no/model", "--env", "EnvACE/tau2-mock-v0"],
        "EnvACE/tau2-mock-v0 has no split for --split train and --eval-split test",
        "its splits: base",
        "Change --split and --eval-split",
    )


def test_a_suite_without_splits_names_both_flags_in_one_try_and_no_evaluation_needs_no_eval_split():
    bfcl = "EnvACE/bfcl-multi-turn-base-v0"
    _one_line_error(
        ["train", "--model", "hf:/no/model", "--env", bfcl], "--split train and --eval-split test", "its splits: none"
    )
    _one_line_error(  # without evaluation, --split alone is named
        ["train", "--model", "hf:/no/model", "--env", bfcl, "--eval-every", "0"], "no split for --split train;"
    )


def test_knn_refuses_to_act():
    _one_line_error(["run", "EnvACE/tau2-mock-v0", "--agent", "knn"], "knn is a world model and cannot act")


def test_user_errors_are_one_line(tiny):
    _one_line_error(["run", "EnvACE/tau2-mock-v0", "--agent", "hf:/no/such/model"], "no model at '/no/such/model'")
    _one_line_error(
        ["run", "EnvACE/tau2-mock-v0", "--agent", f"vllm:{tiny}@http://127.0.0.1:9/v1"],
        "cannot reach the model server at http://127.0.0.1:9/v1",
    )
    _one_line_error(["run", "EnvACE/tau2-mock-v0", "--agent-kwargs", "max_new_tokens"], "expected KEY=VALUE")
    _one_line_error(["run", "EnvACE/tau2-mock-v0", "--agent-kwargs", "max_new_tokens=8"], "max_new_tokens")
    _one_line_error(["run", "--env", "no/such/suite.py:X-v0"], "cannot import 'no/such/suite.py'")
    _one_line_error(["run", "EnvACE/tau2-mock-v0", "--batch", "0"], "--batch must be at least 1")


def test_a_dead_server_mid_run_keeps_the_records_and_names_the_task(server, tmp_path):
    from fakes import FakeChatServer, Raw

    url, _ = server
    FakeChatServer.replies = [{"role": "assistant", "content": "Done. ###STOP###"}, Raw(b"down", status=500)]
    out = tmp_path / "run.jsonl"
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-mock-v0",
            "--agent",
            f"openai:m@{url}?max_retries=0",
            "--task-ids",
            "create_task_1,update_task_1,impossible_task_1",
            "--max-turns",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 1
    assert [r["ended_by"] for r in _records(out)] == ["user_stop", "agent_error", "max_turns"]
    (line,) = [x for x in result.output.splitlines() if x.startswith("task ") and "failed" in x]
    assert line.startswith("task update_task_1 (seed 1) failed: ") and url in line


def test_an_agent_that_raises_ends_its_episode_and_the_run_goes_on(tmp_path):
    (tmp_path / "flaky_agent.py").write_text(
        "from envace_gym.agents import Agent\n\n"
        "class Flaky(Agent):\n"
        "    name = 'flaky'\n"
        "    calls = 0\n\n"
        "    def act(self, obs):\n"
        "        type(self).calls += 1\n"
        "        if type(self).calls == 2:\n"
        "            raise RuntimeError('my agent broke')\n"
        "        return 'Done. ###STOP###'\n"
    )
    out = tmp_path / "run.jsonl"
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-mock-v0",
            "--agent",
            f"{tmp_path / 'flaky_agent.py'}:Flaky",
            "--task-ids",
            "create_task_1,update_task_1,impossible_task_1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 1, result.output
    records = _records(out)
    assert [r["ended_by"] for r in records] == ["user_stop", "agent_error", "user_stop"]
    assert records[1]["error"] == "RuntimeError: my agent broke"
    assert "1 of 3 episodes failed" in " ".join(result.output.split())


def test_a_reward_that_fails_is_counted_and_exits_non_zero(tmp_path):
    out = tmp_path / "run.jsonl"
    result = runner.invoke(
        app,
        [
            "run",
            "EnvACE/tau2-mock-v0",
            "--agent",
            "oracle",
            "--task-ids",
            "create_task_1,update_task_1",
            "--reward",
            "judge:m@http://127.0.0.1:9/v1?max_retries=0&timeout=2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 1, result.output
    assert all(r["error"] for r in _records(out))
    assert "2 of 2 episodes failed" in " ".join(result.output.split())


def test_vitabench_without_a_judge_is_refused_before_it_starts(monkeypatch, tmp_path):
    monkeypatch.delenv("VITABENCH_JUDGE", raising=False)
    _one_line_error(
        ["run", "EnvACE/vitabench-delivery-v0", "--agent", "random", "--out", str(tmp_path / "r.jsonl")],
        "VITABENCH_JUDGE",
        "--reward",
    )


def test_an_mcp_server_registered_in_a_file_runs_from_the_command_line(tmp_path):
    out = tmp_path / "bank.jsonl"
    example = str(EXAMPLES / "mcp_register.py")
    result = runner.invoke(app, ["run", f"{example}:Bank/bank-v0", "--agent", "oracle", "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in records] == ["balance", "accounts"] and all(r["reward"] == 1.0 for r in records)


def test_tasks_summarises_every_bfcl_entry_by_its_question():
    for env_id in ("EnvACE/bfcl-multi-turn-base-v0", "EnvACE/bfcl-simple-python-v0"):
        result = runner.invoke(app, ["tasks", env_id, "--json"])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)
        assert rows and all(r["summary"].strip() for r in rows), env_id


@pytest.mark.slow
def test_real_and_rehearsed_runs_score_the_same_calls_alike_and_a_suite_that_cannot_says_so(tmp_path):
    means = {}
    for dynamics in ("real", "rehearsed"):
        out = tmp_path / f"{dynamics}.jsonl"
        result = runner.invoke(
            app,
            [
                "run",
                "EnvACE/tau2-retail-v0",
                "--agent",
                "noisy-oracle",
                "--dynamics",
                dynamics,
                "--limit",
                "10",
                "--out",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        frame = pd.read_json(out, lines=True)
        means[dynamics] = (list(frame.reward), set(frame.reward_source))
    assert means["real"][0] == means["rehearsed"][0] and 0 < statistics.fmean(means["real"][0]) < 1
    assert means["real"][1] == {"world"} and means["rehearsed"][1] == {"replay"}
    # the MCP bank's world cannot be rebuilt here: without a reward of its own, the run says so
    (tmp_path / "plain_bank.py").write_text(
        f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\nfrom functools import partial\n"
        "import gymnasium as gym\nfrom mcp_register import SERVER, TASKS\nfrom envace_gym import make_mcp_env\n"
        "gym.register('Bank/plain-v0', entry_point=partial(make_mcp_env, SERVER, TASKS), disable_env_checker=True)\n"
    )
    plain = str(tmp_path / "plain_bank.py") + ":Bank/plain-v0"
    result = runner.invoke(app, ["run", plain, "--dynamics", "rehearsed", "--out", str(tmp_path / "plain.jsonl")])
    assert result.exit_code == 0, result.output
    assert "do not compare" in " ".join(result.output.split())
    # registered with a reward (tool_f1, which scores the calls alike under any dynamics), it keeps it
    bank = str(EXAMPLES / "mcp_register.py") + ":Bank/bank-v0"
    result = runner.invoke(app, ["run", bank, "--dynamics", "rehearsed", "--out", str(tmp_path / "bank.jsonl")])
    assert result.exit_code == 0, result.output
    assert "do not compare" not in " ".join(result.output.split())
    assert set(pd.read_json(tmp_path / "bank.jsonl", lines=True).reward_source) == {"tool_f1"}


def test_a_batched_runs_table_lists_its_episodes_in_task_order(tmp_path):
    out = tmp_path / "batch.jsonl"
    result = runner.invoke(
        app, ["run", "EnvACE/tau2-mock-v0", "--batch", "4", "--out", str(out)], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    done = list(pd.read_json(out, lines=True).task_id)  # the records: in the order the episodes finished
    ids = gym.make("EnvACE/tau2-mock-v0").unwrapped.task_ids
    rows = [ln.split("│")[1].strip() for ln in result.output.splitlines() if ln.startswith("│")]
    assert rows == ids and sorted(done) == sorted(ids) and done != ids  # (this env's oracle finishes out of order)


def test_a_rehearsed_mcp_runs_note_names_its_reward_and_a_given_reward_needs_none(tmp_path):
    """A real run may have used --reward tool_f1: the note names the reward this run uses and the --reward that
    makes two runs compare, and says nothing when this run was given one (it scores alike under any dynamics)."""
    from envace_gym.play.run import Run, RunConfig

    (tmp_path / "noted_bank.py").write_text(
        f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\nfrom functools import partial\n"
        "import gymnasium as gym\nfrom mcp_register import SERVER, TASKS\nfrom envace_gym import make_mcp_env\n"
        "gym.register('Bank/noted-v0', entry_point=partial(make_mcp_env, SERVER, TASKS), disable_env_checker=True)\n"
    )
    plain = str(tmp_path / "noted_bank.py") + ":Bank/noted-v0"
    notes = {}
    for reward in (None, "tool_f1"):
        job = Run(RunConfig(plain, dynamics="rehearsed", reward=reward, out=str(tmp_path / f"{reward}.jsonl")))
        notes[reward] = job.reward_note
        for env in job.envs:
            env.close()
        job.lock.release()
    note = notes[None]
    assert note.startswith("rewards here are the 'actions' reward") and "unless both runs have the same reward" in note
    assert "--reward actions" in note and "a real run's 'world' reward" not in note
    assert notes["tool_f1"] is None
