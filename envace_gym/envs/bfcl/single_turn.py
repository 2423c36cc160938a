"""BFCL v4 single-turn categories: one-step envs scored with bfcl-eval's AST checker.

These categories have no executable backend: the agent answers the request once,
its tool calls are validated and handed to the checker (with BFCL's own function
names, dots included), and nothing runs.
"""

from __future__ import annotations

from functools import cache, cached_property
from typing import Any

import numpy as np
from bfcl_eval.constants.enums import Language  # noqa: E402  (after source: it sets BFCL_PROJECT_ROOT)

from envace_gym.bounded import Response
from envace_gym.envs.bfcl import source
from envace_gym.envs.bfcl.schemas import openai_schema, tool_name
from envace_gym.episode import Episode, Task
from envace_gym.errors import ErrorCode, ToolError
from envace_gym.grader import Grader
from envace_gym.messages import format_tool_call
from envace_gym.suite import Suite, User, World
from envace_gym.tools import ToolSet

CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
)
SYSTEM_PROMPT = (
    "Answer the user's request in a single reply made of the tool calls that fulfil it, all of "
    "them at once. If no available tool fits the request, reply in words without a tool call."
)
NO_TOOL = "None of the available tools can do that."
CHECKER_MODEL = "envace-gym"  # the model name bfcl-eval's checker is given


def _first_choices(candidates: dict, nested: bool = True) -> dict:
    """BFCL's possible answer for a call's arguments reduced to its first choices.

    Each key lists its acceptable values ("" marks one that may be left out); a
    mapping value (or a list of them) lists acceptable values per key in turn, one
    level deep, which is as far as bfcl-eval's dict checker looks.
    """
    out = {}
    for key, values in candidates.items():
        if not isinstance(values, list):
            out[key] = values
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
    """One single-turn category. Build it with :func:`envace_gym.envs.bfcl.get_suite`."""

    one_step = True

    def __reduce__(self):  # pickled by reference: the process-wide suite of its category
        return category_suite, (self.category,)

    def __init__(self, category: str):
        if category not in CATEGORIES:
            raise ValueError(f"unknown BFCL single-turn category {category!r}; choose from {CATEGORIES}")
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
            self._toolsets[task.id] = ToolSet([openai_schema(d) for d in task.data["function"]])
        return self._toolsets[task.id]

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
        if not decoded:
            return 0.0, {"valid": False, "error_type": "ast_decoder:decoder_failed"}
        names = {tool_name(d["name"]): d["name"] for d in task.data["function"]}
        output = [{names.get(c.name, c.name): c.arguments} for c in calls]
        result = source.ast_checker()(
            task.data["function"], output, self.answers[task.id], Language.PYTHON, category, CHECKER_MODEL
        )
        return float(result["valid"]), {
            "valid": result["valid"],
            "error_type": result.get("error_type"),
            "error": result.get("error", [])[:3],
        }

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        """The same verdict: a single-turn answer is its calls."""
        return self.evaluate(task, NoBackend(), episode)

    def gold_calls(self, task: Task) -> list[dict]:
        """The first acceptable value of every parameter ("" marks one that may be left out).

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
        for answer in self.answers[task.id]:
            ((name, params),) = answer.items()
            out.append({"name": tool_name(name), "arguments": _first_choices(params), "requestor": "assistant"})
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
