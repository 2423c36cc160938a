import json

import pytest

from envace_gym.core.errors import ErrorCode
from envace_gym.core.messages import MAX_JSON_DEPTH, parse_act, parse_rehearsal


def test_tool_call_blocks_with_whitespace_and_several_calls():
    text = (
        'Let me look.\n<tool_call>\n  {"name": "a", "arguments": {"x": 1}}  \n</tool_call>'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>'
        '<tool_call>{"name": "c", "parameters": {"z": 3}}</tool_call>'
    )
    text_out, calls = parse_act(text)
    assert text_out == "Let me look."
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("a", {"x": 1}, None),
        ("b", {"y": 2}, None),
        ("c", {"z": 3}, None),
    ]
    assert len({c.id for c in calls}) == 3


def test_openai_structured_message():
    action = {
        "content": "hi",
        "tool_calls": [{"id": "abc", "type": "function", "function": {"name": "f", "arguments": '{"q": "x"}'}}],
    }
    text, calls = parse_act(action)
    assert text == "hi" and calls[0].id == "abc" and calls[0].arguments == {"q": "x"}


def test_malformed_calls_become_errors():
    cases = [
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
        '<tool_call>{"name": "f", "arguments": "{broken"}</tool_call>',
        "<tool_call>[1, 2",
        "<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>",
    ]
    for case in cases:
        _, calls = parse_act(case)
        assert len(calls) == 1 and calls[0].error.code == ErrorCode.MALFORMED_CALL, case


def test_non_text_action_is_one_malformed_call():
    _, calls = parse_act(12345)
    assert calls[0].error.code == ErrorCode.MALFORMED_CALL


def test_rehearsal_forms():
    value = {"order_id": "#W1", "status": "delivered"}
    for text in (
        json.dumps(value),
        f"<tool_response>{json.dumps(value)}</tool_response>",
        f"<think>hmm</think>\n<execution_result>\n{json.dumps(value)}\n</execution_result>",
    ):
        assert parse_rehearsal(text) == (value, None)


def test_hostile_rehearsals_give_structured_error():
    hostile = [
        "not json",
        "42",
        '"a string"',
        "null",
        "x" * (10 * 1024 * 1024),
        "[" * (MAX_JSON_DEPTH + 5) + "]" * (MAX_JSON_DEPTH + 5),
        "[" * 100000,
        None,
        3.5,
    ]
    for text in hostile:
        value, error = parse_rehearsal(text)
        assert value is None and error.code == ErrorCode.MALFORMED_RESPONSE
        assert json.loads(error.content())["error"]["code"] == "malformed_response"


def test_tool_call_blocks_match_the_lazy_regex_they_replace():
    import random
    import re

    from envace_gym.core.messages import tool_call_blocks

    pattern = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
    parts = ["<tool_call>", "</tool_call>", "<tool_call", "/tool_call>", "a", "\n", "<", "{}"]
    rng = random.Random(0)
    for _ in range(20_000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 10)))
        assert tool_call_blocks(text) == ([m.group(1) for m in pattern.finditer(text)], pattern.sub("", text))


def test_error_code_of_text_parses_only_what_may_be_an_error():
    from envace_gym.core.errors import error_code_of_text

    assert error_code_of_text('{"error": {"code": "x", "message": ""}}') == "x"
    assert error_code_of_text('{"\\u0065rror": {"code": "y"}}') == "y"  # an escaped key is still found
    assert error_code_of_text('{"error": "text", "a": 1}') is None
    assert error_code_of_text('{"ok": [1, 2]}') is None


def test_arguments_dump_within_the_growth_bound_of_their_text():
    from envace_gym.core.messages import MAX_DUMP_GROWTH

    for arguments in ({"s": "\U0001f600" * 50}, {"n": [1e15, -1e15, 1e-7]}, {"": [[], [], {}]}, {"c": 'é<\\"'}):
        body = json.dumps({"name": "f", "arguments": arguments}, ensure_ascii=False, separators=(",", ":"))
        for text in (
            body,
            json.dumps(
                {"name": "f", "arguments": json.dumps(arguments, ensure_ascii=False)},
                ensure_ascii=False,
                separators=(",", ":"),
            ),
        ):
            _, (call,) = parse_act(f"<tool_call>{text}</tool_call>")
            assert call.text_chars == len(text)
            assert len(json.dumps(call.arguments)) <= MAX_DUMP_GROWTH * call.text_chars


def test_a_number_that_overflows_to_infinity_is_not_standard_json():
    from envace_gym.core.messages import loads_bounded

    for text in ('{"a": 1e400}', "[-1e400]", '{"a": NaN}'):
        with pytest.raises(ValueError):
            loads_bounded(text)
    assert loads_bounded('{"a": 1e300, "b": 10000000000000000000000000}') == {"a": 1e300, "b": 10**25}
    _, (call,) = parse_act('<tool_call>{"name": "f", "arguments": {"x": 1e999}}</tool_call>')
    assert call.error is not None and call.error.code == ErrorCode.MALFORMED_CALL
