"""BFCL v4's agentic categories (memory, web search) on bfcl-eval's backends and its agentic checker.

One episode is one entry: the agent calls tools until it answers without a call,
and that answer is scored by bfcl-eval's ``agentic_checker`` (one of the possible
answers must appear in it, ignoring case and some punctuation, not spaces), as
bfcl-eval scores the last message of an entry that is not a call.
:mod:`~envace_gym.suites.bfcl.memory` and :mod:`~envace_gym.suites.bfcl.web_search` give
the worlds, and each its categories' suites (``category_suite``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT
from bfcl_eval.eval_checker.agentic_eval.agentic_checker import agentic_checker

from envace_gym.core.episode import Episode, Task
from envace_gym.core.grader import Grader
from envace_gym.core.messages import format_tool_call
from envace_gym.core.suite import Suite, User, World
from envace_gym.core.tools import ToolSet
from envace_gym.suites.bfcl import categories, source  # noqa: F401  (source sets BFCL_PROJECT_ROOT, which bfcl-eval's loaders read)
from envace_gym.suites.bfcl.schemas import openai_schema

CATEGORIES = categories.MEMORY + categories.WEB_SEARCH


def final_answer(answer: str, context: str) -> str:
    """A final message in the format bfcl-eval's agentic system prompt asks for."""
    return f"{{'answer': '{answer}', 'context': '{context}'}}"


@dataclass
class Entry:
    raw: dict  # bfcl-eval's test entry, as its runner loads it (system prompt and function docs included)
    answers: list[str]  # the possible answers
    source: Any  # the ground truth's "source": memory, the passage; web search, the hops

    @property
    def question(self) -> str:
        return " ".join(m["content"] for m in self.raw["question"][0] if m["role"] == "user")

    @property
    def system(self) -> str:
        return "\n\n".join(m["content"] for m in self.raw["question"][0] if m["role"] == "system")


class AgenticSuite(Suite):
    """One agentic category: bfcl-eval's entries and possible answers; subclasses give the worlds."""

    prefix = ""  # the category's name in bfcl-eval's ground-truth ids ("memory", "web_search")
    max_steps_per_turn = MAXIMUM_STEP_LIMIT  # bfcl-eval's limit of tool-calling steps in one user turn

    def __init__(self, category: str):
        # imported here, after ``source``: its config module reads BFCL_PROJECT_ROOT when imported
        from bfcl_eval.utils import is_memory_prereq, load_dataset_entry, load_ground_truth_entry

        self.category = self.name = category
        entries = load_dataset_entry(category, include_prereq=True)
        self.prereqs = [e for e in entries if is_memory_prereq(e["id"])]
        truths = {g["id"].replace(self.prefix, category, 1): g for g in load_ground_truth_entry(category)}
        self._entries = {
            e["id"]: Entry(e, truths[e["id"]]["ground_truth"], truths[e["id"]]["source"])
            for e in entries
            if not is_memory_prereq(e["id"])
        }
        first = next(iter(self._entries.values())).raw  # every entry has the same one backend and its docs
        # backend methods take fixed keyword parameters: unnamed arguments are refused
        self._tools = ToolSet([openai_schema(d) for d in first["function"]], closed=True)
        self._owners = dict.fromkeys((d["name"] for d in first["function"]), first["involved_classes"][0])

    def task_ids(self, split: str | None = None) -> list[str]:
        if split not in (None, "default"):
            raise ValueError(f"BFCL {self.category} has no splits; pass split=None")
        return list(self._entries)

    def task(self, task_id: str) -> Task:
        if task_id not in self._entries:
            raise KeyError(f"BFCL {self.category} has no entry {task_id!r}")
        entry = self._entries[task_id]
        return Task(task_id, entry, user=entry.question)

    def tools(self, task: Task) -> ToolSet:
        return self._tools

    def system_prompt(self, task: Task) -> str:
        """bfcl-eval's system message of the entry (the answer format)."""
        return task.data.system

    def summary(self, task: Task) -> str:
        return task.data.question

    def make_user(self, kind: str | User, task: Task, seed: int | None, **kwargs) -> User:
        if kind != "scripted" and not isinstance(kind, User):
            raise ValueError(f"BFCL users say the entry's question: use user='scripted' or a User, not {kind!r}")
        return super().make_user(kind, task, seed, **kwargs)

    def backend_label(self) -> str:
        """What answered the calls, for ``reward_info["backend"]``."""
        return f"bfcl-eval {next(iter(self._owners.values()))}"

    def oracle_calls(self, task: Task) -> list[tuple[str, dict]]:
        """Calls that find the answer, where the data allow it (default: none)."""
        return []

    @cached_property
    def grader(self) -> AgenticGrader:
        return AgenticGrader(self)


class AgenticGrader(Grader):
    """bfcl-eval's agentic verdict on the final answer; the oracle makes the suite's calls, then answers."""

    suite: AgenticSuite

    @staticmethod
    def final_text(episode: Episode) -> str | None:
        """The episode's final message: its last assistant message, when that makes no call."""
        last = next((m for m in reversed(episode.messages) if m["role"] == "assistant"), None)
        return None if last is None or last.get("tool_calls") else str(last.get("content") or "")

    def verdict(self, task: Task, episode: Episode) -> tuple[float, dict]:
        info = {"backend": self.suite.backend_label()}
        text = self.final_text(episode)
        if text is None:
            return 0.0, {"valid": False, "error_type": "agentic:no_last_message", **info}
        result = agentic_checker(text, task.data.answers)
        return float(result["valid"]), {"valid": result["valid"], "error_type": result.get("error_type"), **info}

    def evaluate(self, task: Task, world: World, episode: Episode) -> tuple[float, dict]:
        return self.verdict(task, episode)

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        """The same verdict: the answer is what is scored, whoever answered the calls."""
        return self.verdict(task, episode)

    def gold_calls(self, task: Task) -> list[dict]:
        return [{"name": n, "arguments": a, "requestor": "assistant"} for n, a in self.suite.oracle_calls(task)]

    def oracle_plan(self, task: Task) -> list[Any]:
        """Each call in its own message (an answer depends on the earlier ones), then the first possible answer."""
        calls = [format_tool_call(c["name"], c["arguments"]) for c in self.gold_calls(task)]
        return calls + [final_answer(task.data.answers[0], "Found with the tools.")]

    def criteria(self, task: Task) -> str:
        return f"The final answer states one of: {json.dumps(task.data.answers)}"
