"""BFCL v4 multi-turn categories on bfcl-eval's executable backends.

One episode is one entry: each of its questions is a user turn, and within a
turn the agent calls tools until it answers without a call. Every episode owns
fresh backend instances loaded from the entry's initial config. A call reaches
a backend only as a bound method looked up by name among the entry's declared
functions, with keyword arguments that passed the tool's JSON Schema: model
text is never evaluated as code (bfcl-eval itself passes call strings to ``eval``).
"""

from __future__ import annotations

import ast
import copy
import decimal
import inspect
import json
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import mpmath
from bfcl_eval.constants.default_prompts import (  # noqa: E402  (after source: it sets BFCL_PROJECT_ROOT)
    DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC as ADDED_FUNCTIONS_PROMPT,
)
from bfcl_eval.constants.default_prompts import (
    MAXIMUM_STEP_LIMIT,
)

from envace_gym.core.episode import CallRecord, Episode, Task
from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.grader import Grader
from envace_gym.core.limits import Limits
from envace_gym.core.messages import format_tool_call
from envace_gym.core.response import DumpedJSON, Response, execute
from envace_gym.core.state import deep_copy
from envace_gym.core.suite import Suite, User, UserReply, World
from envace_gym.core.tools import ToolSet
from envace_gym.suites.bfcl import categories, source
from envace_gym.suites.bfcl.schemas import openai_schema

MAX_STEPS_PER_TURN = MAXIMUM_STEP_LIMIT  # bfcl-eval's limit of tool-calling steps in one user turn
CATEGORIES = categories.MULTI_TURN
SYSTEM_PROMPT = (
    "You operate the tools described to you on the user's behalf. Within each user turn, keep "
    "calling tools until the request is done, then reply without a tool call; that reply ends the "
    "turn. If no available tool can do what is asked, or a needed value is missing, say so "
    "instead of guessing."
)
CANNOT = "I cannot do that with the tools I have, or a value I need is missing. Could you help?"
DONE = "Done."


def corrected(class_name: str, doc: dict) -> dict:
    """A function doc with bfcl-eval's one known type erratum fixed.

    TicketAPI's docs type ``ticket_id`` as an integer, but entry 173 of every
    category keeps string ticket ids and its ground truth closes ``'ticket_001'``;
    the backend accepts both, so the schema does too.
    """
    params = doc["parameters"]["properties"]
    if class_name != "TicketAPI" or "ticket_id" not in params:
        return doc
    fixed = copy.deepcopy(doc)
    fixed["parameters"]["properties"]["ticket_id"]["type"] = "integer_or_string"
    return fixed


def native_text(result: Any) -> str:
    """bfcl-eval's text of a backend result (what its checker compares)."""
    if isinstance(result, str):
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


class BFCLWorld(World):
    """Backend instances of one episode and the tool names each of them answers."""

    def __init__(self, instances: dict[str, Any], owners: dict[str, str]):
        self.instances, self.owners = instances, owners

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        owner = self.owners.get(name)
        if owner is None:
            error = ToolError(ErrorCode.UNKNOWN_TOOL, f"no backend function named '{name[:100]}'")
            return Response(error=error, native=f"Error during execution: {error.message}")
        # backends keep and mutate the lists and dicts they are given: never hand them the caller's
        arguments = {k: deep_copy(v) if isinstance(v, (list, dict)) else v for k, v in arguments.items()}
        try:
            method = getattr(self.instances[owner], name)
            if source.is_stateless(owner):
                # the math backend (the only one that does) sets mpmath's and decimal's
                # process-wide precision: scope both
                with decimal.localcontext(), mpmath.workprec(mpmath.mp.prec):
                    result = method(**arguments)
            else:
                result = method(**arguments)
        except Exception as e:  # a backend bug or an argument its code cannot take
            return Response(
                error=ToolError(ErrorCode.EXECUTION_ERROR, f"{name}: {e}"), native=f"Error during execution: {e}"
            )
        if type(result) is dict:  # most results: their JSON text is both response and native text
            try:
                text = json.dumps(result)
                return Response(text=DumpedJSON(text), native=text)
            except (TypeError, ValueError):
                pass
        return Response.from_native(native_text(result))

    def fork(self) -> BFCLWorld:
        return BFCLWorld(copy.deepcopy(self.instances), self.owners)


class OverLimit(Exception):
    """A call that the scorer ran past the episode's limits."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def scored_result(suite: Suite, world: BFCLWorld, name: str, arguments: dict, limits: Limits) -> str:
    """A call's native text as bfcl-eval's checker compares it, run within ``limits`` as the episode's calls
    are; :class:`OverLimit` when it runs past them."""
    response = execute(suite, world, name, arguments, limits)
    if response.error is not None and response.error.code == ErrorCode.LIMIT_EXCEEDED:
        raise OverLimit(name, response.error.message)
    return response.native


def state_differences(model: BFCLWorld, gold: BFCLWorld) -> dict[str, list[str]]:
    """bfcl-eval's state rule: every public attribute of each gold instance, compared with ``!=``."""
    out = {}
    for class_name, gold_instance in gold.instances.items():
        instance = model.instances[class_name]
        differing = [
            attr
            for attr, value in vars(gold_instance).items()
            if not attr.startswith("_") and getattr(instance, attr) != value
        ]
        if differing:
            out[class_name] = differing
    return out


@dataclass(frozen=True)
class GoldCall:
    name: str
    arguments: dict  # keyword form, as written by the ground truth (defaults not filled in)


@dataclass
class Entry:
    category: str
    raw: dict
    gold: list[list[GoldCall]]  # per turn
    owners: dict[str, str]
    docs: list[dict]  # the function docs offered from the start
    added: dict[int, list[dict]]  # turn -> function docs added at that turn (miss-func)

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category


def parse_gold_call(text: str, signatures: dict[str, inspect.Signature]) -> GoldCall:
    """A ground-truth call string as name and keyword arguments (parsed with ``ast``, not run)."""
    node = ast.parse(text, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    if len(kwargs) < len(node.keywords):
        raise ValueError(f"not a plain function call: {text!r}")
    bound = signatures[node.func.id].bind(None, *args, **kwargs)
    return GoldCall(node.func.id, {k: v for k, v in bound.arguments.items() if k != "self"})


class TurnUser(User):
    """Says the entry's questions one per turn; a held-out turn announces the added functions."""

    def __init__(self, suite: MultiTurnSuite, task: Task):
        self.suite, self.task = suite, task
        self.questions = [
            " ".join(m["content"] for m in turn if m["role"] == "user") for turn in task.data.raw["question"]
        ]
        self.index = 0

    def opening(self, world: World) -> str:
        return self.questions[0]

    def reply(self, agent_text: str, world: World) -> UserReply:
        self.index += 1
        if self.index >= len(self.questions):
            return UserReply("", stop=True)
        if self.index in self.task.data.added:
            return UserReply(ADDED_FUNCTIONS_PROMPT, tools=self.suite.tools(self.task, self.index))
        return UserReply(self.questions[self.index])


SMALL_POWER, LARGE_NUMBER = 1000, 10**9  # an exponent or a precision; any other number


def _small(value: Any, key: str = "") -> bool:
    """Whether an argument of a math call bounds its cost: numbers within LARGE_NUMBER (``exponent`` and
    ``precision`` within SMALL_POWER), lists of such numbers."""
    if isinstance(value, (bool, str)):
        return True
    if isinstance(value, (int, float)):
        return abs(value) <= (SMALL_POWER if key in ("exponent", "precision") else LARGE_NUMBER)
    if isinstance(value, list):
        return all(_small(v) for v in value)
    return False


class MultiTurnSuite(Suite):
    """One multi-turn category. Build it with :func:`envace_gym.suites.bfcl.get_suite`."""

    max_steps_per_turn = MAX_STEPS_PER_TURN

    def __reduce__(self):  # pickled by reference: the process-wide suite of its category
        return category_suite, (self.category,)

    def __init__(self, category: str):
        if category not in CATEGORIES:
            raise ValueError(f"unknown BFCL multi-turn category {category!r}; choose from {CATEGORIES}")
        self.category = self.name = category
        self._raw = source.entries(category)
        self._answers = source.answers(category)
        self._tasks: dict[str, Task] = {}
        self._toolsets: dict[tuple, ToolSet] = {}
        self._initial: dict[str, dict[str, Any]] = {}  # task id -> pristine backend instances
        self.stateless_tools = frozenset(
            doc["name"] for name in source.stateless_classes() for doc in source.class_docs(name)
        )

    def isolates(self, name: str, arguments: dict) -> bool:
        """A math call runs in a child only when its numbers could make it run long: an ``exponent`` or
        ``precision`` past SMALL_POWER, or any number past LARGE_NUMBER; the rest costs microseconds."""
        if name not in self.stateless_tools:
            return False
        return not all(_small(value, key) for key, value in arguments.items())

    def task_ids(self, split: str | None = None) -> list[str]:
        if split not in (None, "default"):
            raise ValueError(f"BFCL {self.category} has no splits; pass split=None")
        return list(self._raw)

    def task(self, task_id: str) -> Task:
        if task_id not in self._tasks:
            if task_id not in self._raw:
                raise KeyError(f"BFCL {self.category} has no entry {task_id!r}")
            self._tasks[task_id] = Task(task_id, self._entry(self._raw[task_id]))
        return self._tasks[task_id]

    def _entry(self, raw: dict) -> Entry:
        docs, owners, signatures = [], {}, {}
        for class_name in raw["involved_classes"]:
            cls = source.backend_class(class_name)
            for doc in source.class_docs(class_name):
                docs.append(corrected(class_name, doc))
                owners[doc["name"]] = class_name
                signatures[doc["name"]] = inspect.signature(getattr(cls, doc["name"]))
        added: dict[int, list[dict]] = {}
        for turn, names in raw.get("missed_function", {}).items():
            added[int(turn)] = [d for d in docs if d["name"] in names]
            docs = [d for d in docs if d["name"] not in names]
        gold = [[parse_gold_call(c, signatures) for c in turn] for turn in self._answers[raw["id"]]]
        return Entry(self.category, raw, gold, owners, docs, added)

    def tools(self, task: Task, turn: int = 0) -> ToolSet:
        """The tools shown from ``turn`` on; held-out functions join at their turn.

        Until then they are hidden but callable, as with bfcl-eval, whose backends
        answer any function of an involved class (the ground truth of
        miss_func_49 calls ``tail`` two turns before it is announced).
        """
        entry: Entry = task.data
        shown = entry.docs + [d for t, ds in sorted(entry.added.items()) if t <= turn for d in ds]
        held = [d for t, ds in sorted(entry.added.items()) if t > turn for d in ds]
        key = (tuple(d["name"] for d in shown), tuple(d["name"] for d in held))  # shared by entries
        if key not in self._toolsets:
            # backend methods take fixed keyword parameters: unnamed arguments are refused
            self._toolsets[key] = ToolSet(
                [openai_schema(d) for d in shown], hidden=[openai_schema(d) for d in held], closed=True
            )
        return self._toolsets[key]

    def system_prompt(self, task: Task) -> str:
        return SYSTEM_PROMPT

    def new_world(self, task: Task) -> BFCLWorld:
        """A private copy of the entry's initial backends.

        They are loaded once per entry and deep-copied, so that no world shares an
        object with another or with bfcl-eval's modules: its loaders put module-level
        data (the long-context credit cards, say) into instances without copying it.
        """
        if task.id not in self._initial:
            entry: Entry = task.data
            instances = {}
            for class_name in entry.raw["involved_classes"]:
                instance = source.backend_class(class_name)()
                if not source.is_stateless(class_name):
                    config = copy.deepcopy(entry.raw["initial_config"].get(class_name, {}))
                    instance._load_scenario(config, long_context=entry.long_context)
                instances[class_name] = instance
            self._initial[task.id] = copy.deepcopy(instances)
        return BFCLWorld(copy.deepcopy(self._initial[task.id]), task.data.owners)

    def opening_messages(self, task: Task) -> list[dict]:
        return []

    def summary(self, task: Task) -> str:
        """The entry's first question."""
        first = task.data.raw["question"][0] if task.data.raw["question"] else []
        return " ".join(m["content"] for m in first if m["role"] == "user")

    def make_user(self, kind: str | User, task: Task, seed: int | None, **kwargs) -> User:
        if isinstance(kind, User):
            return kind
        if kind == "scripted":
            return TurnUser(self, task)
        raise ValueError(f"BFCL users say the entry's questions: use user='scripted' or a User, not {kind!r}")

    @cached_property
    def grader(self) -> MultiTurnGrader:
        return MultiTurnGrader(self)


class MultiTurnGrader(Grader):
    """bfcl-eval's multi-turn verdict, and each turn's ground-truth calls as the gold."""

    suite: MultiTurnSuite

    @staticmethod
    def turn_calls(episode: Episode) -> list[list[CallRecord]]:
        """The episode's calls grouped by the user turn they were made in."""
        starts = [i for i, m in enumerate(episode.messages) if m["role"] == "user"]
        turns: list[list[CallRecord]] = [[] for _ in starts]
        for call in episode.calls:
            turns[bisect_right(starts, call.position) - 1].append(call)
        return turns

    def evaluate(self, task: Task, world: World, episode: Episode) -> tuple[float, dict]:
        """bfcl-eval's multi-turn verdict.

        As bfcl-eval does, it re-executes the episode's calls turn by turn on fresh
        instances beside a ground-truth run; after every turn that has ground truth,
        the turn must hold a call, every public attribute of every instance must
        equal the ground truth's, and each ground-truth result must be among the
        episode's results so far. A call rejected by validation changes no state and
        adds its error to the results. Every call runs within the episode's limits: one
        that runs past them (a call the agent only rehearsed, say) fails the episode.
        """
        entry: Entry = task.data
        turns = self.turn_calls(episode)
        if len(turns) < len(entry.gold):
            return 0.0, {
                "valid": False,
                "error_type": "multi_turn:force_terminated",
                "turns": len(turns),
                "gold_turns": len(entry.gold),
            }
        model, gold = self.suite.new_world(task), self.suite.new_world(task)
        results: list[str] = []
        for index, (calls, gold_calls) in enumerate(zip(turns, entry.gold)):
            try:
                for call in calls:
                    results.append(
                        scored_result(self.suite, model, call.name, call.arguments, episode.limits)
                        if call.ran
                        else f"Error during execution: {call.content}"
                    )
            except OverLimit as e:
                return 0.0, {
                    "valid": False,
                    "turn": index,
                    "error_type": "multi_turn:call_over_limit",
                    "tool": e.name,
                    "note": str(e),
                }
            gold_results = [scored_result(self.suite, gold, c.name, c.arguments, episode.limits) for c in gold_calls]
            if not gold_calls:
                continue
            failure: dict[str, Any] | None = None
            if not calls:
                failure = {"error_type": "multi_turn:empty_turn_model_response"}
            elif diff := state_differences(model, gold):
                failure = {"error_type": "multi_turn:instance_state_mismatch", "differences": diff}
            elif missing := list((Counter(gold_results) - Counter(results)).elements()):
                failure = {
                    "error_type": "multi_turn:execution_response_mismatch",
                    "missing": [m[:200] for m in missing],
                }
            if failure:
                return 0.0, {"valid": False, "turn": index, **failure}
        return 1.0, {"valid": True, "checked_turns": sum(1 for g in entry.gold if g)}

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        """Each turn's ground-truth calls matched one to one by the turn's calls (defaults filled in)."""
        entry: Entry = task.data
        turns = self.turn_calls(episode)
        checks = []
        for index, gold_calls in enumerate(entry.gold):
            made = [
                self._normalized(task, c.name, c.arguments)
                for c in (turns[index] if index < len(turns) else [])
                if c.ran
            ]
            for gold_call in gold_calls:
                wanted = self._normalized(task, gold_call.name, gold_call.arguments)
                met = wanted in made
                if met:
                    made.remove(wanted)
                checks.append({"turn": index, "action": gold_call.name, "arguments": gold_call.arguments, "met": met})
        reward = 1.0 if all(c["met"] for c in checks) else 0.0
        return reward, {"action": reward, "action_checks": checks}

    @staticmethod
    def _normalized(task: Task, name: str, arguments: dict) -> tuple[str, str] | None:
        owner = task.data.owners.get(name)
        if owner is None:
            return None
        try:
            bound = inspect.signature(getattr(source.backend_class(owner), name)).bind(None, **arguments)
        except TypeError:
            return name, json.dumps(arguments, sort_keys=True, default=str)
        bound.apply_defaults()
        return name, json.dumps({k: v for k, v in bound.arguments.items() if k != "self"}, sort_keys=True, default=str)

    def gold_calls(self, task: Task) -> list[dict]:
        return [
            {"name": c.name, "arguments": c.arguments, "requestor": "assistant"}
            for turn in task.data.gold
            for c in turn
        ]

    def oracle_plan(self, task: Task) -> list[Any]:
        """Per turn: all its ground-truth calls in one message, then a closing reply."""
        plan: list[Any] = []
        for turn in task.data.gold:
            if turn:
                plan += ["\n".join(format_tool_call(c.name, c.arguments) for c in turn), DONE]
            else:
                plan.append(CANNOT)
        return plan


@cache
def category_suite(category: str) -> MultiTurnSuite:
    """The process-wide suite of one category (its entries are read once)."""
    return MultiTurnSuite(category)
