import copy

import numpy as np
import pytest

from envace_gym.core.errors import ErrorCode
from envace_gym.core.messages import ToolCall
from envace_gym.core.state import CowMapping, dump
from envace_gym.suites.tau2 import DOMAINS, get_suite


@pytest.mark.parametrize("domain", DOMAINS)
def test_sampled_arguments_are_schema_valid(domain):
    suite = get_suite(domain)
    tools = suite.tools(suite.task(suite.task_ids(None)[0]))
    rng = np.random.default_rng(0)
    for name in tools.names:
        for _ in range(20):
            call = ToolCall("c", name, tools.sample_arguments(name, rng))
            assert tools.check(call) is None, (name, call.arguments)


def test_error_codes():
    suite = get_suite("retail")
    tools = suite.tools(suite.task("5"))
    assert tools.check(ToolCall("c", "nope", {})).code == ErrorCode.UNKNOWN_TOOL
    assert tools.check(ToolCall("c", "get_order_details", {})).code == ErrorCode.INVALID_ARGUMENTS
    assert tools.check(ToolCall("c", "get_order_details", {"order_id": 7})).code == ErrorCode.INVALID_ARGUMENTS
    assert tools.check(ToolCall("c", "get_order_details", {"order_id": "#W1"})) is None
    world = suite.new_world(suite.task("5"))
    response = world.execute("get_order_details", {"order_id": "#W1"})
    assert response.error.code == ErrorCode.EXECUTION_ERROR and "not found" in response.error.message


def test_cow_mapping_copies_on_access_and_forks_independently():
    base = {"a": {"v": [1]}, "b": {"v": [2]}}
    pristine = copy.deepcopy(base)
    m = CowMapping(base)
    m["a"]["v"].append(9)
    m["c"] = {"v": [3]}
    del m["b"]
    assert base == pristine
    assert dict(m.items()) == {"a": {"v": [1, 9]}, "c": {"v": [3]}}
    assert len(m) == 2 and "b" not in m and m.touched() == {"a", "b", "c"}
    f = m.fork()
    f["a"]["v"].append(10)
    assert m["a"]["v"] == [1, 9] and base == pristine


def test_oracle_episodes_leave_the_shared_database_untouched():
    import gymnasium as gym
    from helpers import play

    from envace_gym import agents

    suite = get_suite("retail")
    db = suite._template.tools.db
    before = {
        name: dump({k: v.model_dump() for k, v in getattr(db, name).items()})
        for name in ("users", "orders", "products")
    }
    env = gym.make("EnvACE/tau2-retail-v0", split="base")
    oracle = agents.load("oracle", env=env)
    for task_id in env.unwrapped.task_ids[:40]:
        play(env, oracle, task_id)
    after = {
        name: dump({k: v.model_dump() for k, v in getattr(db, name).items()})
        for name in ("users", "orders", "products")
    }
    assert before == after


def _mutations(arguments: dict, rng) -> list[dict]:
    out = [dict(arguments, unexpected_key=1)]
    for key, value in arguments.items():
        out.append({k: v for k, v in arguments.items() if k != key})
        for other in (None, 3, 2.5, "x", True, [1], {"a": 1}):
            if type(other) is not type(value):
                out.append(dict(arguments, **{key: other}))
                break
        if isinstance(value, dict) and value:
            inner = next(iter(value))
            out.append(dict(arguments, **{key: {**value, inner: [[]]}}))
        if isinstance(value, list) and value:
            out.append(dict(arguments, **{key: [*value, {"z": []}]}))
    return out


@pytest.mark.slow  # every tool of every suite against jsonschema: about 20 s
def test_fast_validator_agrees_with_jsonschema_on_every_suite_tool():
    """The compiled validator (fastjsonschema) and jsonschema agree on valid and broken calls."""
    from envace_gym.suites.bfcl import get_suite as bfcl_suite
    from envace_gym.suites.tau2 import get_suite as tau2_suite

    toolsets = []
    for domain in ("retail", "airline", "telecom", "mock"):
        suite = tau2_suite(domain)
        toolsets += [suite.tools(suite.task(suite.task_ids(None)[0]))]
        toolsets += [suite.user_toolset] if suite.user_toolset else []
    for category in ("multi_turn_base", "live_multiple", "live_simple", "simple_python", "parallel_multiple"):
        suite = bfcl_suite(category)
        toolsets += [suite.tools(suite.task(t)) for t in suite.task_ids(None)[:150]]
    rng = np.random.default_rng(0)
    checked = 0
    for tools in toolsets:
        for name in tools.names:
            args = tools.sample_arguments(name, rng)
            for candidate in [args, *_mutations(args, rng)]:
                slow = not any(True for _ in tools._validators[name].iter_errors(candidate))
                fast = tools.check(ToolCall("c", name, candidate)) is None
                assert slow == fast, (name, candidate)
                checked += 1
    assert checked > 5000


def test_deep_copy_equals_copy_deepcopy_on_every_tau2_database():
    from pydantic import BaseModel, PrivateAttr

    from envace_gym.core.state import deep_copy

    for domain in DOMAINS:
        db = get_suite(domain)._template.tools.db
        for name in type(db).model_fields:
            value = getattr(db, name)
            for item in list(value.values())[:50] if isinstance(value, dict) else [value]:
                mine, theirs = deep_copy(item), copy.deepcopy(item)
                assert dump(mine) == dump(theirs) and type(mine) is type(theirs)
                if isinstance(item, BaseModel):
                    assert mine.model_fields_set == item.model_fields_set and mine is not item

    class Model(BaseModel):
        items: list
        _note: dict = PrivateAttr(default_factory=dict)

    shared = [1]
    model = Model(items=[shared, shared, {"k": (2, [3])}])
    model._note["n"] = [4]
    clone = deep_copy({"a": model, "b": model})
    assert clone["a"] is clone["b"] and clone["a"].items[0] is clone["a"].items[1] is not shared
    assert clone["a"]._note == {"n": [4]} and clone["a"]._note["n"] is not model._note["n"]
    assert clone["a"].items[2] == {"k": (2, [3])} and clone["a"].items[2]["k"][1] is not model.items[2]["k"][1]
