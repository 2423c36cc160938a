"""BFCL v4's Java, JavaScript and format-sensitivity categories against bfcl-eval's own evaluation:
its per-entry evaluator (``_evaluate_single_ast_entry``) and its format-sensitivity runner, called
with a handler whose ``decode_ast`` is its OpenAI handler's (function calling, or prompting)."""

from __future__ import annotations

import copy
import importlib
import json
import sys
import time
import types
from functools import partial
from types import SimpleNamespace

import pytest
from gymnasium.utils.env_checker import check_env
from helpers import play

from envace_gym import agents
from envace_gym.core.messages import format_tool_call
from envace_gym.env import EnvACEEnv
from envace_gym.suites.bfcl import format_sensitivity as fs
from envace_gym.suites.bfcl import source
from envace_gym.suites.bfcl.single_turn import LANGUAGES, category_suite

# bfcl-eval's checker accepts no answer here: an ArrayList of "any" has every element converted to a
# string, and the possible answer holds numbers and booleans
UNREACHABLE = {"simple_java_36", "simple_java_65"}
# bfcl-eval's JSON decoder cuts the answer at the first "}]": a list of objects inside the arguments
JSON_UNREACHABLE = "simple_python_96"
FC_MODEL = "reference_fc"  # bfcl-eval reads it as "reference/fc", a model that gets dots as underscores


@pytest.fixture(scope="module")
def bfcl():
    """bfcl-eval's eval runner (loaded with a stand-in for its model table) and its OpenAI handler class."""
    source.ast_checker()
    name = "bfcl_eval.constants.model_config"
    stand_in = types.ModuleType(name)
    stand_in.MODEL_CONFIG_MAPPING = source._AnyModel()
    sys.modules[name] = stand_in
    try:
        runner = importlib.import_module("bfcl_eval.eval_checker.eval_runner")
    finally:
        del sys.modules[name]
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler

    checker = sys.modules["bfcl_eval.eval_checker.ast_eval.ast_checker"]
    checker.MODEL_CONFIG_MAPPING[FC_MODEL.replace("_", "/")] = SimpleNamespace(underscore_to_dot=True)
    return runner, OpenAICompletionsHandler


def handler(bfcl, fc: bool):
    """A handler whose ``decode_ast`` is bfcl-eval's OpenAI handler's, for a function-calling model or not."""
    handler = SimpleNamespace(is_fc_model=fc)
    handler.decode_ast = partial(bfcl[1].decode_ast, handler)
    return handler


class Script:
    def __init__(self, action):
        self.action = action

    def act(self, obs):
        return self.action


def make_env(suite, **kwargs) -> EnvACEEnv:
    return EnvACEEnv(suite, max_turns=None, **kwargs)


def fc_verdict(bfcl, category: str, episode) -> dict:
    """bfcl-eval's evaluation of the episode's calls as a function-calling model's result: each call's
    name as shown and its arguments as JSON text, decoded by its OpenAI handler, then its checker."""
    runner, _ = bfcl
    result = [{c.name: "{" if c.error == "malformed_call" else json.dumps(c.arguments)} for c in episode.calls]
    if not result:  # a reply without calls: its text, which the handler fails to decode
        result = episode.messages[-1]["content"]
    prompt = {**source.entries(category)[episode.task.id]}
    language = LANGUAGES[category]
    return runner._evaluate_single_ast_entry(
        handler(bfcl, fc=True),
        episode.task.id,
        result,
        source.answers(category)[episode.task.id],
        prompt,
        FC_MODEL,
        category,
        language=language,
        return_format=None,
    )


def changed(value):
    return value + "_x" if isinstance(value, str) else value


def language_perturbations(call: dict) -> list[tuple[str, str]]:
    """(kind, action) with one argument changed, dropped or of the wrong JSON type, the wrong name, an
    extra call, no call."""
    name, arguments = call["name"], call["arguments"]
    key = sorted(arguments)[0] if arguments else None
    out = [
        ("name", format_tool_call(name + "_x", arguments)),
        ("extra", format_tool_call(name, arguments) * 2),
        ("no call", "I cannot help with that."),
        ("malformed", "<tool_call>\n{not json\n</tool_call>"),
    ]
    if key is not None:
        out += [
            ("changed", format_tool_call(name, {**arguments, key: changed(arguments[key])})),
            ("dropped", format_tool_call(name, {k: v for k, v in arguments.items() if k != key})),
            ("type", format_tool_call(name, {**arguments, key: 7})),
            ("quoted", format_tool_call(name, {**arguments, key: json.dumps(arguments[key])})),
        ]
    return out


@pytest.mark.slow  # an agreement sweep against bfcl-eval: 9 s or more
@pytest.mark.parametrize("category", list(LANGUAGES))
def test_oracle_passes_every_java_and_javascript_entry(bfcl, category):
    """1.0 on every entry but those bfcl-eval's checker rejects whatever the answer; there bfcl-eval
    rejects the oracle's answer too."""
    env = make_env(category_suite(category))
    oracle = agents.load("oracle", env=env)
    failed = []
    for task_id in env.task_ids:
        reward, info, _ = play(env, oracle, task_id=task_id)
        assert info["ended_by"] == "answered" and info["reward_source"] == "world"
        assert reward == float(fc_verdict(bfcl, category, env.episode)["valid"])
        if reward < 1.0:
            failed.append(task_id)
    assert len(env.task_ids) == {"simple_java": 100, "simple_javascript": 50}[category]
    assert set(failed) == (UNREACHABLE if category == "simple_java" else set())


@pytest.mark.slow  # an agreement sweep against bfcl-eval: 9 s or more
@pytest.mark.parametrize("category", list(LANGUAGES))
def test_perturbed_java_and_javascript_agree_with_bfcl(bfcl, category):
    """Every other entry, eight perturbations each: the env's verdict and failure type are bfcl-eval's (every
    entry agreed when the sweep last ran in full; half keeps the suite in its time budget)."""
    suite = category_suite(category)
    env = make_env(suite)
    tried, failed, disagreements = 0, 0, []
    for task_id in env.task_ids[::2]:
        (call,) = suite.gold_calls(suite.task(task_id))
        for kind, action in language_perturbations(call):
            reward, info, _ = play(env, Script(action), task_id=task_id)
            reference = fc_verdict(bfcl, category, env.episode)
            tried += 1
            failed += reward == 0.0
            if reward != float(reference["valid"]) or (
                reward == 0.0 and info["reward_info"].get("error_type") != reference.get("error_type")
            ):
                disagreements.append((task_id, kind, info["reward_info"], reference.get("error_type")))
    assert tried >= 150 and not disagreements, disagreements[:5]
    assert failed > 0.8 * tried


def test_java_and_javascript_tools_are_shown_as_bfcl_shows_them():
    """Every parameter a string with its type in its description; the checker reads the entry's types."""
    suite = category_suite("simple_java")
    task = suite.task("simple_java_22")
    (tool,) = suite.tools(task).schemas
    ids = tool["function"]["parameters"]["properties"]["ids"]
    assert tool["function"]["name"] == "PmsProductServiceImpl_updateNewStatus"
    assert ids["type"] == "string" and "Java ArrayList type parameter in string representation" in ids["description"]
    assert "items" not in ids and task.data["function"][0]["parameters"]["properties"]["ids"]["type"] == "ArrayList"
    assert suite.gold_calls(task)[0]["arguments"]["ids"] == "new ArrayList<>(Arrays.asList(101L, 202L, 303L))"


DIGITS = "7" * 5000  # past int()'s 4,300-digit limit
ARRAYS = "[" + ", ".join(["[1]"] * 40) + " x"  # bfcl-eval's JavaScript 2D-array pattern: hours to fail


@pytest.mark.parametrize(
    "task_id, key, value, error_type, why",
    [
        ("simple_java_22", "newStatus", DIGITS, "java", "ValueError"),
        ("simple_javascript_21", "id", DIGITS, "js", "ValueError"),
        ("simple_javascript_21", "products", ARRAYS, "js", "ran past 1.0 s"),
    ],
)
def test_java_and_javascript_checkers_are_bounded_and_what_they_cannot_convert_is_wrong(
    monkeypatch, task_id, key, value, error_type, why
):
    """What bfcl-eval's converters cannot read, or would take hours over: the agent's wrong answer, in seconds."""
    monkeypatch.setattr("envace_gym.suites.bfcl.single_turn.CHECK_SECONDS", 1.0)
    suite = category_suite(task_id.rsplit("_", 1)[0])
    env = make_env(suite)
    env.reset(options={"task_id": task_id})
    (gold,) = suite.gold_calls(suite.task(task_id))  # every other argument right
    started = time.perf_counter()
    _, reward, terminated, _, info = env.step(format_tool_call(gold["name"], {**gold["arguments"], key: value}))
    assert time.perf_counter() - started < 5 and terminated and "error" not in info
    assert reward == 0.0 and info["reward_info"]["error_type"] == f"type_error:{error_type}"
    _, parts = suite.grader.evaluate(suite.task(task_id), None, env.unwrapped.episode)
    assert why in parts["error"][0]


@pytest.mark.parametrize("category", [*LANGUAGES, "format_sensitivity"])
@pytest.mark.parametrize("dynamics", ["real", "rehearsed"])
def test_check_env_and_rehearsed_episodes(category, dynamics):
    suite = fs.format_sensitivity_suite() if category == "format_sensitivity" else category_suite(category)
    env = make_env(suite, dynamics=dynamics)
    check_env(env, skip_render_check=True)
    oracle = agents.load("oracle", env=env)
    for task_id in env.task_ids[:5]:
        reward, info, infos = play(env, oracle, task_id=task_id)
        assert reward == 1.0 and info["ended_by"] == "answered"
        assert info["reward_source"] == ("world" if dynamics == "real" else "actions")
        assert all(i["role"] == "act" for i in infos)


def fs_reference(bfcl, texts: dict[str, str], tmp_path) -> tuple[dict[str, str | None], dict]:
    """bfcl-eval's format-sensitivity runner on answers by task id: each one's failure type (None when it
    passes) and the runner's score header."""
    runner, _ = bfcl
    ids = list(texts)
    prompt = [copy.deepcopy(fs.cases()[i][0]) for i in ids]
    truth = [{"id": i.split(":")[-1], "ground_truth": fs.cases()[i][1]} for i in ids]
    results = [{"id": i, "result": texts[i]} for i in ids]
    runner.format_sensitivity_runner(
        handler(bfcl, fc=False), results, prompt, truth, "envace_reference", "format_sensitivity", tmp_path
    )
    (path,) = tmp_path.rglob("BFCL_v4_format_sensitivity_score.json")
    header, *failures = [json.loads(line) for line in path.read_text().splitlines()]
    path.unlink()
    failed = {f["id"]: f["error_type"] for f in failures}
    return {i: failed.get(i) for i in ids}, header


def assert_same_report(score: dict, header: dict) -> None:
    assert score["accuracy"] == pytest.approx(100 * header["accuracy"])
    for key in ("max_delta", "variance", "std"):
        assert score[key] == header[f"accuracy_{key}"]
    played = {c: a for c, a in score["configs"].items() if a is not None}
    assert played == {c: pytest.approx(100 * header[c]["accuracy"]) for c in played} and len(played) > 1
    assert all(c in played for c in header if c.startswith("ret_fmt="))


def test_format_sensitivity_oracle_and_report_agree_with_bfcl(bfcl, tmp_path):
    """Every one of the 5,200 tasks: 1.0 but where bfcl-eval's JSON decoder cannot read the answer,
    bfcl-eval's runner passing the same ones, and the report its runner writes."""
    env = make_env(fs.format_sensitivity_suite())
    oracle = agents.load("oracle", env=env)
    started = time.perf_counter()
    rewards, texts = {}, {}
    for task_id in env.task_ids:
        rewards[task_id], info, _ = play(env, oracle, task_id=task_id)
        texts[task_id] = env.episode.messages[-1]["content"]
    assert time.perf_counter() - started < 30
    assert len(rewards) == 5200 and len(fs.cases()) == 5200
    failed = {t for t, r in rewards.items() if r < 1.0}
    assert {(t.split(":")[-1], fs.answer_format(t)[0]) for t in failed} == {(JSON_UNREACHABLE, "json")}
    assert len(failed) == 6
    reference, header = fs_reference(bfcl, texts, tmp_path)
    assert {t for t, error in reference.items() if error} == failed
    assert_same_report(fs.format_sensitivity_score(rewards), header)


def fs_perturbations(task_id: str, calls: list[tuple[str, dict]]) -> list[tuple[str, str]]:
    return_format, tagged = fs.answer_format(task_id)
    name, arguments = calls[0]
    key = sorted(arguments)[0]
    other = "python" if return_format != "python" else "json"

    def text(c, fmt=return_format, tag=tagged):
        return fs.answer_text(c, fmt, tag)

    return [
        ("changed", text([(name, {**arguments, key: changed(arguments[key]) or 7}), *calls[1:]])),
        ("dropped", text([(name, {k: v for k, v in arguments.items() if k != key}), *calls[1:]])),
        ("type", text([(name, {**arguments, key: [arguments[key]]}), *calls[1:]])),
        ("name", text([(name + "_x", arguments), *calls[1:]])),
        ("extra", text([*calls, calls[0]])),
        ("other format", text(calls, other)),
        ("other tag", text(calls, tag=not tagged)),
        ("prose", "Sure: " + text(calls)),
        ("envace format", "\n".join(format_tool_call(n, a) for n, a in calls)),
    ]


def test_format_sensitivity_perturbed_agree_with_bfcl(bfcl, tmp_path):
    """Two entries in all 26 formats, nine wrong answers each, and the report of all of them."""
    suite = fs.format_sensitivity_suite()
    env = make_env(suite)
    task_ids = [t for t in env.task_ids if t.split(":")[-1] in ("simple_python_19", "parallel_9")]
    assert len(task_ids) == 52
    rewards, texts, infos = {}, {}, {}
    for task_id in task_ids:
        calls = [(c["name"], c["arguments"]) for c in suite.gold_calls(suite.task(task_id))]
        for _, action in fs_perturbations(task_id, calls):
            reward, info, _ = play(env, Script(action), task_id=task_id)
            # a distinct id per answer for bfcl-eval's runner, in the same format
            index, config, entry = task_id.split(":")
            answer_id = f"{index}{len(texts)}:{config}:{entry}"
            rewards[answer_id], texts[answer_id], infos[answer_id] = reward, action, info["reward_info"]
            fs.cases()[answer_id] = fs.cases()[task_id]
    try:
        reference, header = fs_reference(bfcl, texts, tmp_path)
    finally:
        for answer_id in texts:
            del fs.cases()[answer_id]
    disagreements = [
        (i, infos[i], reference[i])
        for i, r in rewards.items()
        if (r == 1.0) != (reference[i] is None) or (r == 0.0 and infos[i]["error_type"] != reference[i])
    ]
    assert len(rewards) == 52 * 9 and not disagreements, disagreements[:5]
    passed = sum(error is None for error in reference.values())
    assert 0 < passed < 0.3 * len(rewards)  # formats told apart, and most answers wrong
    assert_same_report(fs.format_sensitivity_score(rewards), header)


def test_format_sensitivity_evaluates_no_expression_and_bounds_its_json_decoder(monkeypatch):
    task_id = next(t for t in fs.cases() if fs.answer_format(t) == ("python", False))
    (call,) = fs.format_sensitivity_suite().gold_calls(fs.format_sensitivity_suite().task(task_id))
    name, key = call["name"], sorted(call["arguments"])[0]
    probe = "__import__('sys').modules.setdefault('envace_probe', 1) + 1"
    result = fs.verdict(task_id, f"[{name}({key}={probe})]")
    assert result["error_type"] == "ast_decoder:decoder_failed" and "envace_probe" not in sys.modules
    assert fs.unsafe_expression(f"[{name}({key}=2 * 3 + 4 ** -2, other='a' + 'b')]", False) is None
    assert fs.unsafe_expression("[f(x='ab' * 10 ** 9)]", False) == "'ab' * 10 ** 9"
    assert fs.unsafe_expression("[f(x=9 ** 10 ** 10)]", False) == "9 ** 10 ** 10"
    json_task = next(t for t in fs.cases() if fs.answer_format(t) == ("json", False))
    monkeypatch.setattr(fs, "DECODE_SECONDS", 1.0)
    started = time.perf_counter()
    result = fs.verdict(json_task, "[" + ",".join(["{a}"] * 40) + "x]")  # days for the regex in process
    assert result["error_type"] == "ast_decoder:decoder_failed" and time.perf_counter() - started < 5


def test_format_sensitivity_reads_a_malformed_tool_call_block_as_written(bfcl, tmp_path):
    """An answer in a ``<tool_call>`` block (a JSON list, XML, a tagged answer): bfcl-eval's decoder
    finds it in the text, and the env's grader reads the same text."""
    suite = fs.format_sensitivity_suite()
    env = make_env(suite)
    texts, rewards = {}, {}
    for return_format in ("python", "json", "verbose_xml", "concise_xml"):
        for tagged in (False, True):
            task_id = next(t for t in env.task_ids if fs.answer_format(t) == (return_format, tagged))
            calls = [(c["name"], c["arguments"]) for c in suite.gold_calls(suite.task(task_id))]
            inner = fs.answer_text(calls, return_format, tagged)
            texts[task_id] = f"<tool_call>{inner}</tool_call>"
            rewards[task_id], _, _ = play(env, Script(texts[task_id]), task_id=task_id)
            assert env.episode.messages[-1]["tool_calls"][0]["text"] == inner
    reference, _ = fs_reference(bfcl, texts, tmp_path)
    assert {t: r == 1.0 for t, r in rewards.items()} == {t: error is None for t, error in reference.items()}
    assert sum(rewards.values()) == 7  # but Python without tags: "[<tool_call>[...]" is no Python to either


def test_format_sensitivity_bounds_its_decoders_and_fails_huge_arithmetic(monkeypatch):
    """Unclosed tags, answers bfcl-eval's patterns backtrack over, arithmetic too long or too large:
    each the agent's wrong answer, decided in bounded time, never an env failure."""
    monkeypatch.setattr(fs, "DECODE_SECONDS", 1.0)
    suite = fs.format_sensitivity_suite()
    env = make_env(suite)

    def first(return_format, tagged=False):
        return next(t for t in env.task_ids if fs.answer_format(t) == (return_format, tagged))

    python = first("python")
    call = suite.gold_calls(suite.task(python))[0]
    key = sorted(call["arguments"])[0]
    others = "".join(f"{k}={v!r}, " for k, v in call["arguments"].items() if k != key)
    answers = [
        (first("python", True), "<TOOLCALL>" * 30_000),
        (first("json", True), "<TOOLCALL>" * 30_000),
        (first("json"), "[" + ",".join(["{}"] * 16) + "}" * 40_000 + "x"),
        (first("verbose_xml"), "<functions>" * 30_000),
        (python, f"[{call['name']}({others}{key}={' * '.join(['999999999 ** 100'] * 200)})]"),
        (python, f"[{call['name']}({others}{key}={' + '.join(['1'] * 1000)})]"),
    ]
    for task_id, text in answers:
        started = time.perf_counter()
        reward, info, _ = play(env, Script(text), task_id=task_id)
        assert reward == 0.0 and info["ended_by"] == "answered", (text[:50], info)
        assert info["reward_info"]["error_type"] == "ast_decoder:decoder_failed", info["reward_info"]
        assert time.perf_counter() - started < 3, text[:50]
    small = f"[{call['name']}({others}{key}={' + '.join(['1'] * 100)})]"
    assert fs.unsafe_expression(small, False) is None  # 99 operations: evaluated as bfcl-eval does
