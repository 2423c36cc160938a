"""The run record has one type (records.RunRecord): the runner builds it, run --resume reads it back, and
its schema, generated from the type, describes every field a real run writes, in the order written."""

import ast
import json
import re
from pathlib import Path

import gymnasium as gym
import pytest

import envace_gym
from envace_gym import agents
from envace_gym.agents.base import Agent
from envace_gym.play import records
from envace_gym.play.loop import failed_record, run_batched, run_episodes
from envace_gym.play.records import RunRecord, resume_records, write_record
from envace_gym.reporting.figures import training_figure

MOCK = "EnvACE/tau2-mock-v0"


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> list[dict]:
    """The records a plain run, a rehearsing run and a failed episode write, as read back from disk."""
    env = gym.make(MOCK)
    rehearsing = agents.with_rehearsal(agents.load("random", env=env), env, budget=2, world_model="knn")
    played = [
        *run_episodes(env, agents.load("oracle", env=env), env.unwrapped.task_ids[:2]),
        *run_batched([env], rehearsing, [(env.unwrapped.task_ids[0], 0)], reseed=True),
        failed_record(env, "oracle", "t", 7, "died"),
    ]
    path = tmp_path_factory.mktemp("records") / "run.jsonl"
    with path.open("w") as f:
        for record in played:
            write_record(f, record)
    return records.rows(path)


def test_the_schema_describes_every_written_field_in_order(written):
    schema = RunRecord.model_json_schema()
    fields = list(schema["properties"])
    assert written[2].get("private_context"), "the rehearsing episode should have rehearsed"
    for record in written:
        assert list(record) == [f for f in fields if f in record]  # the type's order
        assert set(fields) - set(record) <= {"routes", "private_context"}  # only empty ones are left out
        for field in record:
            assert schema["properties"][field].get("description"), field
    assert set(schema["required"]) >= {"task_id", "seed", "reward", "agent", "ended_by"}


def test_run_records_say_they_were_captured_for_evaluation_and_refuse_another_purpose(written):
    assert {record["purpose"] for record in written} == {"eval"}
    assert RunRecord.model_validate({**written[0], "purpose": "train"}).purpose == "train"
    with pytest.raises(ValueError, match="purpose"):
        RunRecord.model_validate({**written[0], "purpose": "auto"})


def test_a_written_record_is_its_types_dump(written):
    for record in written:
        assert RunRecord.model_validate(record).model_dump() == record


def test_agents_that_do_not_rehearse_record_zeros_and_no_private_context(written):
    plain, rehearsed, failed = written[0], written[2], written[3]
    for record in (plain, failed):
        assert [
            record[k] for k in ("rehearsal_attempts", "rehearsal_turns", "rehearsal_tokens", "rehearsal_seconds")
        ] == [0, 0, 0, 0.0]
        assert "private_context" not in record
    assert rehearsed["rehearsal_attempts"] > 0 and rehearsed["rehearsal_turns"] > 0
    assert failed["ended_by"] == "worker_error" and failed["error"] == "died" and failed["messages"] == []


def test_an_agents_own_fields_come_from_episode_stats():
    class Counting(Agent):
        def act(self, obs):
            return "Bye."

        def episode_stats(self):
            return {"rehearsal_attempts": 3}

    env = gym.make(MOCK)
    (record,) = run_episodes(env, Counting(), env.unwrapped.task_ids[:1])
    assert record["rehearsal_attempts"] == 3 and record["rehearsal_turns"] == 0
    assert agents.load("oracle", env=env).episode_stats() == {}


def test_the_episode_loop_knows_no_agent_class():
    source = Path(envace_gym.__file__).parent / "play" / "loop.py"
    imported = {node.module for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.ImportFrom)}
    assert not any(m.startswith("envace_gym.agents.") for m in imported), imported


def test_a_written_line_is_whole_and_on_disk_at_once(tmp_path):
    path = tmp_path / "r.jsonl"
    with path.open("w") as f:
        write_record(f, {"a": "x" * 100_000})
        assert path.read_text() == json.dumps({"a": "x" * 100_000}) + "\n"  # flushed, the file still open


@pytest.mark.parametrize(
    "change,says",
    [
        ({"messages": "hi"}, "messages is 'hi'"),
        ({"turns": 1.5}, "turns is 1.5"),
        ({"private_context": [1]}, "private_context is [1]"),
        ({"seconds": None}, "seconds is None"),
    ],
)
def test_resume_reads_records_through_the_type(written, tmp_path, change, says):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [written[0], written[1] | change]))
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: not a run record: {says}")):
        resume_records(path, {})


def test_resume_fills_the_defaults_of_an_older_record(written, tmp_path):
    path = tmp_path / "run.jsonl"
    old = {k: v for k, v in written[0].items() if not k.startswith("rehearsal_")}
    path.write_text(json.dumps(old) + "\n")
    (record,) = resume_records(path, {})
    assert record == written[0]


def test_training_panels_are_declared_once():
    from envace_gym.reporting import viewer

    assert not hasattr(viewer, "TRAINING_PANELS")
    assert training_figure([{"step": 1, "lr": 0.1}]) is None
    fig = training_figure([{"step": s, "reward": s / 10, "kl/act": 0.1, "eval/reward": None} for s in (1, 2)])
    assert [ax.get_title() for ax in fig.axes] == ["reward by role", "KL and clip fraction"]
