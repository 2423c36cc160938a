"""TRL's GRPOTrainer on envace-gym envs (envace_gym.integrations.trl): environment_factory and rollout_func."""

import inspect
import json
import os

import pytest

pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[trl]'")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from training_configs import grpo_config  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402

import envace_gym  # noqa: E402, F401
from envace_gym.integrations.trl import (  # noqa: E402
    EpisodeRollout,
    environment_factory,
    episode_reward,
    final_reply,
    make_dataset,
    prepare_tokenizer,
)

ENV = "EnvACE/tau2-mock-gen-v0"
CALL = '<tool_call>\n{"name": "get_users", "arguments": {}}\n</tool_call>'
REPLY = "Done: task_2."
AFTER_TOOL = "</tool_response><|im_end|>\n<|im_start|>assistant\n"  # where a reply follows a tool response


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: on a loaded machine, two threads that wait on each other are 4x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def forcing(tokenizer, text: str, after: str = "", scale: float = 100.0) -> dict:
    """A ``sequence_bias`` under which the random tiny model writes ``text`` and ends its turn
    (where its context ends with ``after``): each token is biased given the ones before it,
    longer matches more."""
    context = tokenizer(after, add_special_tokens=False)["input_ids"]
    ids = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    return {tuple(context + ids[: k + 1]): scale * (k + 1) for k in range(len(ids))}


def test_environment_class_has_exactly_the_suites_tools_and_scores_with_the_env():
    tools = environment_factory(ENV, split="train")
    env = tools()
    suite = env.env.unwrapped.suite
    schemas = {s["function"]["name"]: s["function"] for s in env.env.unwrapped.tools.schemas}
    public = {n for n, _ in inspect.getmembers(tools, inspect.isfunction) if not n.startswith("_")}
    assert public - {"reset", "get_reward"} == set(schemas)
    for name, want in schemas.items():  # what TRL renders in the prompt
        got = get_json_schema(getattr(env, name))["function"]
        assert got["description"] == want["description"]
        assert set(got["parameters"].get("required", [])) == set(want["parameters"].get("required", []))
        assert {k: v.get("type") for k, v in got["parameters"]["properties"].items()} == {
            k: v.get("type") for k, v in want["parameters"]["properties"].items()
        }
    assert get_json_schema(env.update_task_status)["function"]["parameters"]["properties"]["status"]["enum"] == [
        "pending",
        "completed",
    ]

    def play(task_id, calls):
        env.reset(task_id=task_id, prompt=[], other_column=1)  # dataset columns TRL passes along
        return [json.loads(getattr(env, c["name"])(**c["arguments"])) for c in calls]

    gold = suite.gold_calls(suite.task("train_1"))  # create task_2, complete it, and say its id
    responses = play("train_1", gold)
    assert not any("error" in r for r in responses)
    assert final_reply([[{"role": "assistant", "content": REPLY}]], [env]) == [None]
    assert env.get_reward() == 1.0 and env.env.unwrapped.episode.ended_by == "agent_done"
    play("train_1", gold)
    assert env.get_reward() == 0.0  # the id was never told
    play("train_1", gold[:1])
    final_reply([[{"role": "assistant", "content": REPLY}]], [env])
    assert env.get_reward() == 0.0
    assert (
        play("train_1", [{"name": "create_task", "arguments": {"title": "x"}}])[0]["error"]["code"]
        == "invalid_arguments"
    )
    play("train_4", suite.gold_calls(suite.task("train_4")))  # ends with a transfer: the step ends the episode
    assert env.env.unwrapped.episode.ended_by == "transfer" and env.get_reward() == 1.0
    with pytest.raises(RuntimeError):
        env.get_users()


def test_nested_parameters_carry_their_schema_and_unfit_envs_are_refused():
    book = environment_factory("EnvACE/tau2-airline-v0").book_reservation
    flights = get_json_schema(book)["function"]["parameters"]["properties"]["flights"]
    assert "flight_number" in flights["description"] and "$ref" not in flights["description"]
    with pytest.raises(ValueError, match="EpisodeRollout"):
        environment_factory(ENV, split="train", dynamics="rehearsed")
    with pytest.raises(ValueError, match="inline"):
        EpisodeRollout(ENV, split="train", dynamics="rehearsed", rehearsal_format="prompted")


@pytest.mark.slow
def test_grpo_step_through_environment_factory(tiny, tmp_path):
    from trl import GRPOTrainer  # here, not at collection: 13 s of imports on this machine

    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(tiny))
    bias = {**forcing(tokenizer, CALL), **forcing(tokenizer, REPLY, after=AFTER_TOOL, scale=10_000.0)}
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny),
        processing_class=tokenizer,
        args=grpo_config(tmp_path, max_completion_length=512, generation_kwargs={"sequence_bias": bias}),
        train_dataset=make_dataset(ENV, limit=2, split="train"),
        environment_factory=environment_factory(ENV, split="train"),
        reward_funcs=[final_reply],
    )
    trainer.train()
    log = trainer.state.log_history[0]
    assert trainer.state.global_step == 1
    assert log["tools/call_frequency"] == 1.0 and log["tools/failure_frequency"] == 0.0
    assert "rewards/tau2_mock_gen_v0/mean" in log
    for env in trainer.environments:  # the call ran in the real world; the reply ended the episode
        episode = env.env.unwrapped.episode
        assert [(c.name, c.source, c.error) for c in episode.calls] == [("get_users", "real", None)]
        assert episode.messages[-1] == {"role": "assistant", "content": REPLY}
        assert episode.ended_by == "agent_done"


@pytest.mark.slow
def test_grpo_step_through_rollout_func_trains_act_and_rehearse_tokens(tiny, tmp_path):
    from trl import GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    model.generation_config.sequence_bias = forcing(tokenizer, CALL)
    rollout = EpisodeRollout(ENV, max_new_tokens=24, split="train", dynamics="rehearsed", max_turns=1)
    seen = []

    def rollout_func(prompts, trainer):
        out = rollout(prompts, trainer)
        seen.append((prompts, out))
        return out

    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=grpo_config(tmp_path),
        train_dataset=make_dataset(ENV, limit=2, split="train"),
        rollout_func=rollout_func,
        reward_funcs=episode_reward,
    )
    trainer.train()
    log = trainer.state.log_history[0]
    assert trainer.state.global_step == 1 and "rewards/episode_reward/mean" in log
    prompts, out = seen[0]
    # TRL counts (and trains on) the tokens env_mask marks: the act call and its rehearsal
    assert log["completions/mean_length"] == sum(map(sum, out["env_mask"])) / len(prompts)
    for ids, mask, logprobs in zip(out["completion_ids"], out["env_mask"], out["logprobs"]):
        assert len(ids) == len(mask) == len(logprobs)
        spans = spans_of(ids, mask)
        assert [trained for trained, _ in spans] == [1, 0, 1]
        act, context, rehearse = (tokenizer.decode(s) for _, s in spans)
        assert act == CALL + tokenizer.eos_token
        assert context.endswith("<|im_start|>user\n<tool_response>\n")  # the template's, untrained
        assert all(lp < 0 for lp, m in zip(logprobs, mask) if m)  # the sampler's log-probs

    # user turns are context too: under real dynamics a reply without a call gets the user's answer
    model.generation_config.sequence_bias = forcing(tokenizer, "Hello.")
    model.train()
    out = EpisodeRollout(ENV, max_new_tokens=8, split="train", max_turns=2)(prompts[:1], trainer)
    spans = spans_of(out["completion_ids"][0], out["env_mask"][0])
    assert [trained for trained, _ in spans] == [1, 0, 1]
    assert "<|im_start|>user\nOkay." in tokenizer.decode(spans[1][1])
    assert model.training  # the trainer's mode is restored after generation


def spans_of(ids: list[int], mask: list[int]) -> list[tuple[int, list[int]]]:
    """``ids`` cut into runs of equal ``mask``: ``(mask, ids)`` pairs."""
    spans: list[tuple[int, list[int]]] = []
    for token, m in zip(ids, mask):
        if spans and spans[-1][0] == m:
            spans[-1][1].append(token)
        else:
            spans.append((m, [token]))
    return spans


@pytest.mark.slow
def test_role_wise_trainer_gives_act_and_rehearse_tokens_their_own_baselines_and_steps(tiny, tmp_path):
    from envace_gym.integrations.trl import RoleWiseGRPOTrainer
    from envace_gym.training.grpo import ROLE_IDS, token_advantages

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    model.generation_config.sequence_bias = forcing(tokenizer, CALL)
    rollout = EpisodeRollout(ENV, max_new_tokens=24, split="train", dynamics="rehearsed", max_turns=2)
    seen = []

    def rollout_func(prompts, trainer):
        out = rollout(prompts, trainer)
        out["episode_reward"] = [1.0, 0.0]  # the two episodes of the group score apart
        seen.append(out)
        return out

    class Watched(RoleWiseGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            seen.append(super()._generate_and_score_completions(inputs))
            return seen[-1]

    trainer = Watched(
        model=model,
        processing_class=tokenizer,
        args=grpo_config(tmp_path),
        train_dataset=make_dataset(ENV, limit=1, split="train"),
        rollout_func=rollout_func,
        reward_funcs=episode_reward,
        baseline="row",
    )
    trainer.train()
    assert trainer.state.global_step == 1
    out, scored = seen[0], seen[1]
    width = scored["completion_ids"].shape[1]
    roles = torch.tensor([(r + [0] * width)[:width] for r in out["envace_roles"]])
    counts = {k: torch.tensor([g[k] for g in out["envace_generations"]]) for k in ("act", "rehearse")}
    want = token_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), roles, counts, "row", True)
    assert scored["advantages"].shape == (2, width)
    assert torch.allclose(scored["advantages"], want * scored["completion_mask"])
    for role in ("act", "rehearse"):  # each role's tokens carry its own advantage, context none
        assert (scored["advantages"][roles == ROLE_IDS[role]] != 0).all()
    assert (scored["advantages"][roles == ROLE_IDS["context"]] == 0).all()
