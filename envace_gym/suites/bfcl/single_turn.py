"""BFCL v4 single-turn categories: one-step envs scored with bfcl-eval's AST checker.

These categories have no executable backend: the agent answers the request once,
its tool calls are validated and handed to the checker (with BFCL's own function
names, dots included), and nothing runs.

The Java and JavaScript categories are played as bfcl-eval plays them with a
function-calling model: its language hints turn every parameter into a string
whose description names its Java or JavaScript type, and the checker converts
each string back with bfcl-eval's type converters.
"""

from __future__ import annotations

import copy
import json
from functools import cache, cached_property, partial
from typing import Any

import numpy as np

from envace_gym.suites.bfcl import categories, source  # source first: it points bfcl-eval's config at the cache

# isort: split
from bfcl_eval.constants.enums import Language
from bfcl_eval.utils import add_language_specific_hint_to_function_doc

from envace_gym.core.episode import Episode, Task
from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.grader import Grader
from envace_gym.core.limits import BudgetExceeded, run_isolated
from envace_gym.core.messages import format_tool_call
from envace_gym.core.response import Response
from envace_gym.core.suite import Suite, User, World
from envace_gym.core.tools import ToolSet
from envace_gym.suites.bfcl.schemas import openai_schema, tool_name

CATEGORIES = categories.SINGLE_TURN
#: the categories in another language than Python, checked with bfcl-eval's converters for it
LANGUAGES = dict(zip(categories.LANGUAGES, (Language.JAVA, Language.JAVASCRIPT)))
SYSTEM_PROMPT = (
    "Answer the user's request in a single reply made of the tool calls that fulfil it, all of "
    "them at once. If no available tool fits the request, reply in words without a tool call."
)
NO_TOOL = "None of the available tools can do that."
CHECKER_MODEL = "envace-gym"  # the model name bfcl-eval's checker is given
# bfcl-eval's Java and JavaScript converters read the agent's strings with regular expressions that can
# backtrack exponentially (its JavaScript 2D-array pattern) and with int(), which refuses over 4,300
# digits: the checker of those categories runs in a child process, bounded
CHECK_SECONDS, CHECK_MEMORY = 10.0, 1 << 30


def _first_choices(candidates: dict, nested: bool = True) -> dict:
    """BFCL's possible answer for a call's arguments reduced to its first choices.

    Each key lists its acceptable values ("" marks one that may be left out); a
    mapping value (or a list of them) lists acceptable values per key in turn, one
    level deep, which is as far as bfcl-eval's dict checker looks.
    """
    out = {}
    for key, values in candidates.items():
        if not isinstance(values, list):  # simple_java_64's one bare string: its characters, "" among them
            continue
        chosen = [v for v in values if v != ""][:1]
        if chosen:
            out[key] = _first_value(chosen[0]) if nested else chosen[0]
    return out


def _first_value(value: Any) -> Any:
    if isinstance(value, dict):
        return _first_choices(value, nested=False)
    if isinstance(value, list):
        return [_first_choices(v, nested=False) if isinstance(v, dict) else v for v in value]
    return value


def java_literal(value: Any, kind: str, item: str | None = None) -> str:
    """A value as the string bfcl-eval's Java converter reads back as it (``kind``: the BFCL type,
    ``item``: an array's element type). A string stays as it is: it may name a variable."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        puts = "".join(f"put({json.dumps(k)}, {_java_element(v)}); " for k, v in value.items())
        return f"new HashMap<String, Object>() {{{{ {puts}}}}}"
    if isinstance(value, list) and kind == "ArrayList":  # its String and char elements keep their quotes
        quoted = item in ("String", "char")
        elements = ", ".join(json.dumps(v) if quoted else java_literal(v, str(item)) for v in value)
        return f"new ArrayList<>(Arrays.asList({elements}))"
    if isinstance(value, list):  # an Array's elements are converted one by one, strings unquoted
        return f"new {item}[]{{{', '.join(java_literal(v, str(item)) for v in value)}}}"
    suffix = {"long": "L", "float": "f"}.get(kind, "")
    return f"{value}{suffix}"


def _java_element(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else java_literal(value, "any")


def js_literal(value: Any, kind: str, item: str | None = None) -> str:
    """A value as the string bfcl-eval's JavaScript converter reads back as it."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return f"[{', '.join(_js_element(v) for v in value)}]"
    if isinstance(value, dict):
        return f"{{{', '.join(f'{k}: {_js_element(v)}' for k, v in value.items())}}}"
    return f"{value}{'n' if kind == 'Bigint' else ''}"


def _js_element(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else js_literal(value, "any")


def _literals(arguments: dict, doc: dict, category: str) -> dict:
    """A call's arguments as bfcl-eval asks a function-calling model for them in Java or JavaScript."""
    literal = java_literal if LANGUAGES[category] == Language.JAVA else js_literal
    params = doc["parameters"]["properties"]
    return {k: literal(v, params[k]["type"], params[k].get("items", {}).get("type")) for k, v in arguments.items()}


class NoBackend(World):
    """BFCL's single-turn functions exist only as docs: a call is scored, never run."""

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        return Response(
            error=ToolError(ErrorCode.EXECUTION_ERROR, "BFCL single-turn functions have no executable backend")
        )

    def fork(self) -> NoBackend:
        return self


class QuestionUser(User):
    """Says the entry's last user message (everything before it is the episode's opening)."""

    def __init__(self, text: str):
        self.text = text

    def opening(self, world: World) -> str:
        return self.text

    def reply(self, agent_text: str, world: World):
        raise RuntimeError("a BFCL single-turn episode ends with the agent's first message")


class SingleTurnSuite(Suite):
    """One single-turn category. Build it with :func:`envace_gym.suites.bfcl.get_suite`."""

    one_step = True

    def __reduce__(self):  # pickled by reference: the process-wide suite of its category
        return category_suite, (self.category,)

    def __init__(self, category: str):
        known = CATEGORIES + tuple(LANGUAGES)
        if category not in known:
            raise ValueError(f"unknown BFCL single-turn category {category!r}; choose from {known}")
        self.category = self.name = category
        self._raw = source.entries(category)
        self._toolsets: dict[str, ToolSet] = {}

    def task_ids(self, split: str | None = None) -> list[str]:
        if split not in (None, "default"):
            raise ValueError(f"BFCL {self.category} has no splits; pass split=None")
        return list(self._raw)

    def task(self, task_id: str) -> Task:
        if task_id not in self._raw:
            raise KeyError(f"BFCL {self.category} has no entry {task_id!r}")
        return Task(task_id, self._raw[task_id])

    def tools(self, task: Task) -> ToolSet:
        if task.id not in self._toolsets:
            self._toolsets[task.id] = ToolSet([openai_schema(d) for d in self.shown_docs(task)])
        return self._toolsets[task.id]

    def shown_docs(self, task: Task) -> list[dict]:
        """The function docs the agent sees: in Java and JavaScript, bfcl-eval's hinted ones (every
        parameter a string, its type in its description); the checker reads the entry's own."""
        if self.category not in LANGUAGES:
            return task.data["function"]
        return add_language_specific_hint_to_function_doc([copy.deepcopy(task.data)])[0]["function"]

    def _messages(self, task: Task) -> list[dict]:
        return task.data["question"][0]

    def summary(self, task: Task) -> str:
        """The entry's question."""
        return " ".join(m["content"] for m in self._messages(task) if m["role"] == "user")

    def system_prompt(self, task: Task) -> str:
        extra = [m["content"] for m in self._messages(task) if m["role"] == "system"]
        return "\n\n".join([SYSTEM_PROMPT, *extra])

    def new_world(self, task: Task) -> NoBackend:
        return NoBackend()

    def opening_messages(self, task: Task) -> list[dict]:
        return [
            {"role": m["role"], "content": m["content"]} for m in self._messages(task)[:-1] if m["role"] != "system"
        ]

    def make_user(self, kind: str | User, task: Task, seed: int | None, **kwargs) -> User:
        if isinstance(kind, User):
            return kind
        if kind == "scripted":
            return QuestionUser(self._messages(task)[-1]["content"])
        raise ValueError(f"BFCL users say the entry's question: use user='scripted' or a User, not {kind!r}")

    @cached_property
    def grader(self) -> SingleTurnGrader:
        return SingleTurnGrader(self)


def checker_info(result: dict) -> dict:
    """``reward_info`` from bfcl-eval's checker result: no error for a valid answer (its checkers
    report ``simple_function_checker:unclear`` there), else its type and first three messages."""
    if result["valid"]:
        return {"valid": True, "error_type": None, "error": []}
    return {"valid": False, "error_type": result.get("error_type"), "error": result.get("error", [])[:3]}


class SingleTurnGrader(Grader):
    """bfcl-eval's verdict on a single-turn answer, and gold calls from the category's possible answers."""

    suite: SingleTurnSuite

    def __init__(self, suite: SingleTurnSuite):
        super().__init__(suite)
        self.answers = source.answers(suite.category)

    def evaluate(self, task: Task, world: World, episode: Episode) -> tuple[float, dict]:
        """bfcl-eval's verdict on the calls: its AST checker, or (ir)relevance by call presence."""
        category = self.suite.category
        calls = [c for c in episode.calls if c.error != str(ErrorCode.MALFORMED_CALL)]
        decoded = len(calls) == len(episode.calls)
        if "irrelevance" in category:
            valid = not calls
            return float(valid), {"valid": valid, "calls": len(calls)}
        if "relevance" in category:
            valid = bool(calls)
            return float(valid), {"valid": valid, "calls": len(calls)}
        if not decoded or not calls:  # as for a function-calling model: a reply in words does not decode
            return 0.0, {"valid": False, "error_type": "ast_decoder:decoder_failed"}
        names = {tool_name(d["name"]): d["name"] for d in task.data["function"]}
        output = [{names.get(c.name, c.name): c.arguments} for c in calls]
        language = LANGUAGES.get(category, Language.PYTHON)
        given = (task.data["function"], output, self.answers[task.id], language, category, CHECKER_MODEL)
        check = partial(source.ast_checker(), *given)
        if language == Language.PYTHON:
            result = check()
        else:
            try:
                result = run_isolated(check, CHECK_SECONDS, CHECK_MEMORY)
            except (BudgetExceeded, MemoryError, RuntimeError) as e:
                why = f"ran past {CHECK_SECONDS} s" if isinstance(e, BudgetExceeded) else f"failed: {e}"
                return 0.0, {
                    "valid": False,
                    "error_type": f"type_error:{'java' if language == Language.JAVA else 'js'}",
                    "error": [f"bfcl-eval's {language.value} type conversion {why}"[:500]],
                }
        return float(result["valid"]), checker_info(result)

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        """The same verdict: a single-turn answer is its calls."""
        return self.evaluate(task, NoBackend(), episode)

    def gold_calls(self, task: Task) -> list[dict]:
        """The first acceptable value of every parameter ("" marks one that may be left out), in Java
        and JavaScript as the string the checker converts back to it.

        live_relevance has no ground truth (any call passes): its gold is one
        schema-valid call of the first function, drawn with a fixed seed.
        """
        if task.id not in self.answers:
            if "irrelevance" in self.suite.category:
                return []
            first = self.suite.tools(task).names[0]
            arguments = self.suite.tools(task).sample_arguments(first, np.random.default_rng(0))
            return [{"name": first, "arguments": arguments, "requestor": "assistant"}]
        out = []
        docs = {d["name"]: d for d in task.data["function"]}
        for answer in self.answers[task.id]:
            ((name, params),) = answer.items()
            arguments = _first_choices(params)
            if self.suite.category in LANGUAGES:
                arguments = _literals(arguments, docs[name], self.suite.category)
            out.append({"name": tool_name(name), "arguments": arguments, "requestor": "assistant"})
        return out

    def oracle_plan(self, task: Task) -> list[Any]:
        calls = self.gold_calls(task)
        if not calls:
            return [NO_TOOL]
        return ["\n".join(format_tool_call(c["name"], c["arguments"]) for c in calls)]


@cache
def category_suite(category: str) -> SingleTurnSuite:
    """The process-wide suite of one category (its entries are read once)."""
    return SingleTurnSuite(category)
