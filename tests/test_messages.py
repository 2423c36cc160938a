import json

from envace_gym.errors import ErrorCode
from envace_gym.messages import MAX_JSON_DEPTH, parse_act, parse_rehearsal


def test_tool_call_blocks_with_whitespace_and_several_calls():
    text = ('Let me look.\n<tool_call>\n  {"name": "a", "arguments": {"x": 1}}  \n</tool_call>'
            '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>'
            '<tool_call>{"name": "c", "parameters": {"z": 3}}</tool_call>')
    text_out, calls = parse_act(text)
    assert text_out == "Let me look."
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("a", {"x": 1}, None), ("b", {"y": 2}, None), ("c", {"z": 3}, None)]
    assert len({c.id for c in calls}) == 3


def test_openai_structured_message():
    action = {"content": "hi", "tool_calls": [
        {"id": "abc", "type": "function", "function": {"name": "f", "arguments": '{"q": "x"}'}}]}
    text, calls = parse_act(action)
    assert text == "hi" and calls[0].id == "abc" and calls[0].arguments == {"q": "x"}


def test_malformed_calls_become_errors():
    cases = ["<tool_call>{not json}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>',
             '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
             '<tool_call>{"name": "f", "arguments": "{broken"}</tool_call>', "<tool_call>[1, 2",
             "<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>"]
    for case in cases:
        _, calls = parse_act(case)
        assert len(calls) == 1 and calls[0].error.code == ErrorCode.MALFORMED_CALL, case


def test_non_text_action_is_one_malformed_call():
    _, calls = parse_act(12345)
    assert calls[0].error.code == ErrorCode.MALFORMED_CALL


def test_rehearsal_forms():
    value = {"order_id": "#W1", "status": "delivered"}
    for text in (json.dumps(value), f"<tool_response>{json.dumps(value)}</tool_response>",
                 f"<think>hmm</think>\n<execution_result>\n{json.dumps(value)}\n</execution_result>"):
        assert parse_rehearsal(text) == (value, None)


def test_hostile_rehearsals_give_structured_error():
    hostile = ["not json", "42", '"a string"', "null", "x" * (10 * 1024 * 1024),
               "[" * (MAX_JSON_DEPTH + 5) + "]" * (MAX_JSON_DEPTH + 5), "[" * 100000, None, 3.5]
    for text in hostile:
        value, error = parse_rehearsal(text)
        assert value is None and error.code == ErrorCode.MALFORMED_RESPONSE
        assert json.loads(error.content())["error"]["code"] == "malformed_response"
