"""Samples written for the tests in FinMCP-Bench's format (its own data is not used)."""

import json


def fn(name, **properties):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)},
        },
    }


def tool_call(call_id, name, **arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


FINMCP = [
    {
        "id": "s1",
        "scenery": "fund lookup",
        "diff_level": "easy",
        "task": "single step",
        "tool_list": [fn("fund_nav", code={"type": "string"})],
        "question": "NAV of fund 000001?",
        "answer": "1.23",
        "messages": [
            {"role": "user", "content": "NAV of fund 000001?"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("a", "fund_nav", code="000001")]},
            {"role": "tool", "tool_call_id": "a", "content": '{"code": "000001", "nav": 1.23}'},
            {"role": "assistant", "content": "The NAV is 1.23."},
        ],
    },
    {
        "id": "m1",
        "scenery": "comparison",
        "diff_level": "medium",
        "task": "multi step",
        "tool_list": [fn("fund_nav", code={"type": "string"}), fn("fund_fee", code={"type": "string"})],
        "question": "Compare 000001 and 000002.",
        "answer": "000002 is cheaper.",
        "messages": [
            {"role": "user", "content": "Compare 000001 and 000002."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [tool_call("b", "fund_nav", code="000001"), tool_call("c", "fund_nav", code="000002")],
            },
            {"role": "tool", "tool_call_id": "b", "content": '{"nav": 1.23}'},
            {"role": "tool", "tool_call_id": "c", "content": '{"nav": 2.5}'},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("d", "fund_fee", code="000002")]},
            {"role": "tool", "tool_call_id": "d", "content": "0.5% a year"},
            {"role": "assistant", "content": "000002 is cheaper."},
        ],
    },
    {
        "id": "t1",
        "scenery": "advice",
        "diff_level": "hard",
        "task": "multi turn",
        "tool_list": [fn("fund_nav", code={"type": "string"}), fn("fund_fee", code={"type": "string"})],
        "question": "NAV of 000001?",
        "answer": "0.3%.",
        "messages": [
            {"role": "user", "content": "NAV of 000001?"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("e", "fund_nav", code="000001")]},
            {"role": "tool", "tool_call_id": "e", "content": '{"nav": 1.23}'},
            {"role": "assistant", "content": "1.23."},
            {"role": "user", "content": "And its fee?"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("f", "fund_fee", code="000001")]},
            {"role": "tool", "tool_call_id": "f", "content": '{"fee": "0.3%"}'},
            {"role": "assistant", "content": "0.3%."},
        ],
    },
]
