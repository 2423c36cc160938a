"""`envace-gym sft`: role-masked next-token training on recorded real episodes, in train's token layout."""

import json

import gymnasium as gym
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents import Agent
from envace_gym.agents.prompting import Generation
from envace_gym.cli import app
from envace_gym.play.loop import run_episode
from envace_gym.training import (
    SFT,
    CheckpointError,
    SFTConfig,
    TrainConfig,
    Trainer,
    collect,
    episode_tokens,
    gold_episodes,
    held_out_loss,
    load_episodes,
)
from envace_gym.training.grpo import ROLE_IDS

ENV = "EnvACE/tau2-mock-v0"  # 9 short tasks in its one split, "base"
ACT, REHEARSE, CONTEXT = ROLE_IDS["act"], ROLE_IDS["rehearse"], ROLE_IDS["context"]


class Recording(Agent):
    """An agent that keeps the texts it writes."""

    def __init__(self, agent):
        self.agent, self.name, self.texts = agent, agent.name, []

    def act(self, obs):
        self.texts.append(self.agent.act(obs))
        return self.texts[-1]


class Replay:
    """Writes the recorded texts in order, as a model would: an act turn through its end-of-turn
    token, a rehearsal through the template's closing of the tool message."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts = tokenizer, list(texts)

    def generate_ids(self, prompts, stops):
        gens = []
        for prompt, stop in zip(prompts, stops):
            text = self.texts.pop(0)
            ids = self.tokenizer(text + ("\n" + stop if stop else self.tokenizer.eos_token), add_special_tokens=False)[
                "input_ids"
            ]
            gens.append(Generation(text, prompt, ids, [0.0] * len(ids)))
        return gens


def _config(tiny, out, **kw):
    defaults = dict(
        model=f"hf:{tiny}",
        env_id=ENV,
        out=str(out),
        split="base",
        eval_split="base",
        max_episodes=4,
        batch=4,
        minibatch=4,
        steps=3,
        lr=3e-3,
        save_every=1,
        tensorboard=False,
    )
    return SFTConfig(**(defaults | kw))


def _metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_episode_tokens_are_what_a_rollout_tags(tiny):
    """An oracle episode under rehearsed dynamics, tokenized from its record, equals the rollout of
    an agent that writes the same texts: the same ids, the same act/rehearse/context tags."""
    env = gym.make(ENV, dynamics="rehearsed")
    oracle = Recording(agents.load("oracle", env=env))
    record = run_episode(env, oracle, "update_task_with_message_history", seed=0)
    assert record["real_call_ids"] == []  # rehearsed: no tool message is a real response
    episode = record["messages"][record["opening_messages"] :]  # the opening holds an earlier call
    calls = [m["tool_call_id"] for m in episode if m["role"] == "tool"]
    tokenizer = agents.load(f"hf:{tiny}").tokenizer
    ids, roles = episode_tokens(tokenizer, record | {"real_call_ids": calls})
    replay = Replay(tokenizer, oracle.texts)
    (rollout,) = collect(
        replay, [gym.make(ENV, dynamics="rehearsed")], ["update_task_with_message_history"], group_size=1, seed=0
    )
    assert rollout.generations == {"act": 2, "rehearse": 1} and not replay.texts
    assert (ids, roles) == (rollout.ids, rollout.roles)

    # and by content: each act span is an assistant turn, each rehearse span a tool response
    spans, start = [], 0
    for k in range(1, len(roles) + 1):
        if k == len(roles) or roles[k] != roles[start]:
            spans.append((roles[start], tokenizer.decode(ids[start:k])))
            start = k
    acts = [text for role, text in spans if role == ACT]
    rehearsals = [text for role, text in spans if role == REHEARSE]
    assert len(acts) == 2 and all(t.endswith(tokenizer.eos_token) for t in acts)
    assert rehearsals == [m["content"] + "\n</tool_response>" for m in episode if m["role"] == "tool"]
    assert "How can I help" in spans[0][1] and spans[0][0] == CONTEXT  # the suite's opening is context
    # a tool response that is not real is context
    ids, roles = episode_tokens(tokenizer, record)
    assert REHEARSE not in roles and roles.count(ACT) == rollout.roles.count(ACT)


def test_sft_from_gold_lowers_held_out_loss_of_each_role(tiny, tmp_path):
    trainer = SFT(_config(tiny, tmp_path, steps=3))
    held_out = [episode_tokens(trainer.tokenizer, r) for r in gold_episodes(ENV, "base")[5:]]
    before = held_out_loss(trainer.model, held_out, trainer.tokenizer.pad_token_id)
    records = trainer.train()
    after = held_out_loss(trainer.model, held_out, trainer.tokenizer.pad_token_id)
    print(f"held-out loss before {before}, after {after}")
    for role in ("act", "rehearse"):
        assert after[role] < before[role] - 0.5
        assert records[-1][f"loss/{role}"] < records[0][f"loss/{role}"]
    assert [r["step"] for r in records] == [1, 2, 3] and records[0]["episodes"] == 4
    assert {"tokens", "tokens_per_s", "lr", "tokens/act", "tokens/rehearse"} <= set(records[0])


def test_an_untrained_role_is_reported_but_gets_no_gradient(tiny, tmp_path):
    """roles=act updates the weights exactly as training both roles on episodes whose rehearse
    tokens are relabelled as context."""
    act_only = SFT(_config(tiny, tmp_path / "a", roles=["act"], max_episodes=2, minibatch=1, steps=1))
    relabelled = SFT(_config(tiny, tmp_path / "b", max_episodes=2, minibatch=1, steps=1))
    relabelled.sequences = [
        (ids, [CONTEXT if r == REHEARSE else r for r in roles]) for ids, roles in relabelled.sequences
    ]
    start = [p.detach().clone() for p in act_only.model.parameters()]
    (record,) = act_only.train()
    relabelled.train()
    assert record["loss/rehearse"] > 0 and record["tokens/rehearse"] > 0  # reported
    for a, b, _ in zip(act_only.model.parameters(), relabelled.model.parameters(), start):
        assert torch.allclose(a, b, atol=1e-6)
    assert any(not torch.equal(a, s) for a, s in zip(act_only.model.parameters(), start))


def test_sft_from_a_run_file(tiny, tmp_path):
    runs = tmp_path / "runs.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "run",
            ENV,
            "--agent",
            "oracle",
            "--dynamics",
            "real",
            "--out",
            str(runs),
            "--task-ids",
            "create_task_1,update_task_1,update_task_with_message_history",
        ],
    )
    assert result.exit_code == 0, result.output
    records = load_episodes(runs)
    assert len(records) == 3 and all(len(r["real_call_ids"]) == r["tool_calls"] > 0 for r in records)
    config = _config(tiny, tmp_path / "sft", source=str(runs), max_episodes=None, batch=2, steps=None)
    trainer = SFT(config)
    assert trainer.cfg.steps == 2 and len(trainer.sequences) == 3  # one epoch of 3 episodes, 2 a step
    assert config.steps is None  # the caller's config is not rewritten
    records = trainer.train()
    assert [r["episodes"] for r in records] == [2, 2] and all(r["tokens/rehearse"] for r in records)
    old = tmp_path / "old.jsonl"  # a record written before runs carried transcripts
    old.write_text(json.dumps({k: v for k, v in load_episodes(runs)[0].items() if k != "messages"}) + "\n")
    with pytest.raises(ValueError, match="no messages"):
        load_episodes(old)


def test_malformed_records_are_one_line_errors_naming_the_record(tiny, tmp_path):
    runs = tmp_path / "runs.jsonl"
    result = CliRunner().invoke(
        app, ["run", ENV, "--agent", "oracle", "--dynamics", "real", "--out", str(runs), "--task-ids", "create_task_1"]
    )
    assert result.exit_code == 0, result.output
    good = load_episodes(runs)[0]
    forged_role = {**good, "messages": [*good["messages"][:-1], {**good["messages"][-1], "role": "user\nhi"}]}
    cases = {
        "opening_messages": {**good, "opening_messages": len(good["messages"])},
        "tools": {k: v for k, v in good.items() if k != "tools"},
        "role": forged_role,
    }
    for needle, record in cases.items():
        bad = tmp_path / f"bad-{needle}.jsonl"
        bad.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
        result = CliRunner().invoke(
            app,
            [
                "sft",
                "--model",
                f"hf:{tiny}",
                "--env",
                ENV,
                "--from",
                str(bad),
                "--out",
                str(tmp_path / "out"),
                "--steps",
                "1",
                "--split",
                "base",
                "--eval-split",
                "base",
            ],
        )
        assert result.exit_code == 2, result.output
        line = " ".join(result.output.split())
        assert line.startswith("error:") and needle in line and ("line 2" in line or "episode 2" in line), line
    (tmp_path / "junk.jsonl").write_text(json.dumps(good) + "\nnot json\n")
    with pytest.raises(ValueError, match="junk.jsonl:2: not JSON"):
        load_episodes(tmp_path / "junk.jsonl")
    long = {**good, "messages": [*good["messages"][:-1], {**good["messages"][-1], "content": "word " * 20_000}]}
    (tmp_path / "long.jsonl").write_text(json.dumps(long) + "\n")
    trainer = SFT(
        _config(
            tiny,
            tmp_path / "sft",
            source=str(tmp_path / "long.jsonl"),
            max_episodes=None,
            batch=1,
            steps=1,
            max_tokens=512,
        )
    )
    assert len(trainer.sequences[0][0]) == 512


def test_tool_calls_that_are_not_calls_or_nest_too_deep_are_value_errors_naming_the_line(tmp_path):
    """Not the chat template's UndefinedError or a RecursionError when the record is laid out."""

    def record(tool_calls):
        return {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": tool_calls},
            ],
            "tools": [],
            "opening_messages": 1,
            "real_call_ids": [],
        }

    deep: dict = {}
    for _ in range(700):
        deep = {"x": deep}
    good = json.dumps(record([{"id": "c0", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]))
    bad = {
        "a string": json.dumps(record("f(1)")),
        "numbers": json.dumps(record([1, 2])),
        "no name": json.dumps(record([{"function": {"arguments": {}}}])),
        "700 deep": json.dumps(record([{"function": {"name": "f", "arguments": deep}}])),
        "too deep to parse": "[" * 100_000 + "]" * 100_000,
    }
    path = tmp_path / "runs.jsonl"
    for line in bad.values():
        path.write_text(good + "\n" + line + "\n")
        with pytest.raises(
            ValueError, match="runs.jsonl(:2: nested deeper| episode 2: message 1's 'tool_calls' must be)"
        ):
            load_episodes(path)
    path.write_text(good + "\n")
    assert len(load_episodes(path)) == 1


def test_resume_continues_the_run_and_refuses_a_damaged_checkpoint(tiny, tmp_path):
    def config(out):
        return _config(tiny, out, max_episodes=3, batch=2, steps=2)

    whole = tmp_path / "whole"
    SFT(config(whole)).train()
    part = tmp_path / "part"
    first = SFT(config(part))
    for step in (1, 2):  # step 1 is logged and saved; step 2 is logged, then the run is killed
        with (part / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(first.train_step()) + "\n")
        if step == 1:
            first.save()
    resumed = SFT(config(part))
    resumed.resume()
    assert resumed.step == 1 and resumed.cursor == 2 and len(_metrics(part)) == 1
    resumed.train()
    timeless = [[{k: v for k, v in r.items() if k != "tokens_per_s"} for r in _metrics(out)] for out in (part, whole)]
    assert timeless[0] == timeless[1] and len(timeless[0]) == 2

    weights = whole / "step-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="checksum"):
        SFT(config(whole)).resume()


def test_the_cli_warm_starts_a_model_that_train_starts_from(tiny, tmp_path):
    runner = CliRunner()
    out = tmp_path / "sft"
    result = runner.invoke(
        app,
        [
            "sft",
            "--model",
            f"hf:{tiny}",
            "--env",
            ENV,
            "--from",
            "gold",
            "--split",
            "base",
            "--eval-split",
            "base",
            "--roles",
            "act,rehearse",
            "--max-episodes",
            "3",
            "--batch",
            "3",
            "--steps",
            "2",
            "--lr",
            "1e-3",
            "--eval-every",
            "2",
            "--eval-tasks",
            "2",
            "--save-every",
            "2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "step 2: loss act" in result.output
    (first, second) = _metrics(out)
    assert second["eval/loss/act"] > 0 and "eval/loss/act" not in first
    assert json.loads((out / "config.json").read_text())["roles"] == ["act", "rehearse"]
    assert (out / "metrics.png").exists() and (out / "step-2" / "manifest.json").exists()
    assert list((out / "tensorboard").iterdir())
    # the checkpoint is a model `train --model hf:OUT/step-2` starts from
    grpo = Trainer(
        TrainConfig(
            model=f"hf:{out / 'step-2'}",
            env_id=ENV,
            out=str(tmp_path / "grpo"),
            split="base",
            eval_split="base",
            group_size=1,
            tasks_per_step=1,
            steps=1,
        )
    )
    saved = load_file(out / "step-2" / "model.safetensors")
    assert saved and all(torch.equal(grpo.model.state_dict()[k], v) for k, v in saved.items())
    result = runner.invoke(
        app,
        [
            "sft",
            "--model",
            f"hf:{tiny}",
            "--env",
            ENV,
            "--split",
            "base",
            "--eval-split",
            "base",
            "--roles",
            "act,world",
            "--out",
            str(tmp_path / "bad"),
        ],
    )
    assert result.exit_code == 2 and "roles" in result.output


def test_records_holding_u2028_u2029_or_u0085_load_and_a_line_cut_short_is_named(tmp_path):
    """Lines end at \\n only, as records.rows reads them: text written with ensure_ascii=False keeps them."""
    text = "a\u2028b\u2029c\x85d"
    record = {
        "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": text}],
        "tools": [],
        "opening_messages": 1,
        "real_call_ids": [],
    }
    path = tmp_path / "runs.jsonl"
    line = json.dumps(record, ensure_ascii=False)
    path.write_text(f"{line}\n\n{line}\n", encoding="utf-8")
    assert load_episodes(path) == [record, record] and load_episodes(path, 1) == [record]
    path.write_text(f"{line}\n{line[:40]}", encoding="utf-8")  # killed mid-write
    with pytest.raises(ValueError, match="runs.jsonl:2: not JSON"):
        load_episodes(path)
    path.write_bytes(line.encode() + b"\n\xff\n")
    with pytest.raises(ValueError, match="runs.jsonl: not UTF-8 text"):
        load_episodes(path)
