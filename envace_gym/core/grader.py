"""How a suite's episodes are scored, and the gold they are scored against."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from envace_gym.core.episode import Episode, Task, canonical, recording_key
from envace_gym.core.limits import Limits
from envace_gym.core.messages import format_tool_call
from envace_gym.core.response import execute

if TYPE_CHECKING:
    from envace_gym.core.suite import Suite, World


#: The text of a reward's parts that may leave the scorer: names of checks and of what went wrong, never a
#: value (a gold argument, a state difference, a rubric, a checker's message, an expected answer).
PUBLIC_TEXT = frozenset(
    {"action", "func_name", "tool", "error_type", "code", "note", "model", "reward_basis", "backend", "unmet"}
)


#: Parts that hold the gold's values, numbers included: dropped whole.
GOLD_PARTS = frozenset(
    {"arguments", "db_diff", "differences", "missing", "expected", "possible_answers", "ground_truth", "details"}
)


def without_gold(parts: Any, key: str | None = None) -> Any:
    """A reward's parts as ``info`` may carry them: the :data:`GOLD_PARTS` dropped, numbers, booleans and None
    kept, and text only under the names of :data:`PUBLIC_TEXT`. So which checks were met, and how many, stays;
    what the gold says (arguments, answers, differences from the gold state, rubrics) goes. Returns None for a
    part that goes."""
    if key in GOLD_PARTS:
        return None
    if parts is None or isinstance(parts, (bool, int, float)):
        return parts
    if isinstance(parts, str):
        return parts if key in PUBLIC_TEXT else None
    if isinstance(parts, dict):
        kept = {k: without_gold(v, k) for k, v in parts.items()}
        return {k: v for k, v in kept.items() if v is not None or parts[k] is None}
    if isinstance(parts, (list, tuple)):
        items = [without_gold(v, key) for v in parts]
        return [v for v in items if v is not None]
    return None


def unmet_arguments(gold: dict, made: dict, names: Iterable[str] | None = None) -> list[str]:
    """The names of the arguments (of both calls, or ``names``) in which a made call differs from a gold one,
    numbers compared as numbers (:func:`~envace_gym.core.episode.canonical`): what a failed check's ``unmet`` lists.

    >>> unmet_arguments({"celsius": 22, "room": "hall"}, {"celsius": 22.0, "room": "den", "fan": True})
    ['fan', 'room']
    """

    def text(value: Any) -> str:
        return json.dumps(canonical(value), sort_keys=True)

    names = gold.keys() | made.keys() if names is None else names
    return sorted(k for k in names if k not in gold or k not in made or text(gold[k]) != text(made[k]))


class Grader:
    """A suite's gold and scores, read by the env, the rewards and the oracle agents.

    Every method has a default from the tasks' ``gold`` calls: :meth:`score_actions` is the
    gold-call match, :meth:`evaluate` (the ``world`` and ``replay`` rewards) is that match
    unless overridden to check the world's state, :meth:`oracle_plan` makes each gold call
    then says "Done.", and :meth:`recordings` are the gold calls' real responses. A suite
    returns its grader from :attr:`Suite.grader <envace_gym.core.suite.Suite.grader>`.
    """

    def __init__(self, suite: Suite):
        self.suite = suite
        self._recordings: dict[str, dict] = {}

    def has_gold(self, task: Task) -> bool:
        """Whether the task has gold calls (default: yes). The oracle, the ``actions`` rewards and
        replay of gold need them; a task without them is scored by the suite's ``judge_reward``."""
        return True

    def require_gold(self, task: Task) -> None:
        """Refuse, with one ValueError, what needs gold calls on a task that has none."""
        if not self.has_gold(task):
            raise ValueError(
                f"{self.suite.name} task {task.id!r} has no gold calls, so the oracle, the 'actions' "
                "rewards and replay of gold cannot run on it; use a judge reward"
            )

    def gold_calls(self, task: Task) -> list[dict]:
        """The task's gold calls in order: ``{"name", "arguments", "requestor"}``."""
        self.require_gold(task)
        return [
            {"name": c["name"], "arguments": c.get("arguments", {}), "requestor": c.get("requestor", "assistant")}
            for c in task.gold
        ]

    def oracle_plan(self, task: Task) -> list[Any]:
        """The act actions an oracle plays, in order (default: each gold call, then "Done.")."""
        return [
            format_tool_call(c["name"], c["arguments"]) for c in self.gold_calls(task) if c["requestor"] == "assistant"
        ] + ["Done."]

    def evaluate(self, task: Task, world: World, episode: Episode) -> tuple[float, dict]:
        """The real evaluator, on a world that holds the episode's effects (default:
        :meth:`score_actions`; override it to check the world's state)."""
        return self.score_actions(task, episode)

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        """Gold-action match, needing no world: 1 when every gold call was made (same requestor,
        name and arguments, numbers compared as numbers, in any order, each made call matching one
        gold call), else 0. A check not met whose call was made with other arguments names them in
        ``unmet`` (those of the nearest such call)."""
        made = [c for c in episode.calls if c.ran]
        keys = [(c.requestor, *recording_key(c.name, c.arguments)) for c in made]
        gold, checks = self.gold_calls(task), []
        for call in gold:
            key = (call["requestor"], *recording_key(call["name"], call["arguments"]))
            met = key in keys
            if met:
                i = keys.index(key)
                del made[i], keys[i]
            checks.append({"action": call["name"], "arguments": call["arguments"], "met": met})
        for call, check in zip(gold, checks):
            near = [
                unmet_arguments(call["arguments"], c.arguments)
                for c in made
                if (c.requestor, c.name) == (call["requestor"], call["name"])
            ]
            if not check["met"] and near:
                check["unmet"] = min(near, key=len)
        reward = 1.0 if all(c["met"] for c in checks) else 0.0
        return reward, {"action": reward, "action_checks": checks}

    def communicate_checks(self, task: Task, episode: Episode) -> list[dict]:
        """What the agent had to tell the user, each ``{"info", "met"}`` (default: nothing)."""
        return []

    def criteria(self, task: Task) -> str:
        """The task's success criteria in words, for an LLM judge (never shown to the agent)."""
        calls = "\n".join(f"- {c['name']}({json.dumps(c['arguments'])})" for c in self.gold_calls(task))
        return f"The tool calls a correct episode makes:\n{calls or '- none'}"

    def judge_reward(self) -> Any:
        """The suite's own judge (a reward callable), the default reward of its tasks without gold
        under every dynamics (default: none)."""
        return None

    def recordings(self, task: Task) -> dict[tuple[str, str], list[str]]:
        """Real responses of the task's gold calls, keyed by :func:`~envace_gym.core.episode.recording_key`."""
        if task.id not in self._recordings:
            table: dict[tuple[str, str], list[str]] = {}
            world = self.suite.new_world(task)
            for call in self.gold_calls(task):
                response = execute(self.suite, world, call["name"], call["arguments"], Limits(), call["requestor"])
                table.setdefault(recording_key(call["name"], call["arguments"]), []).append(response.content)
            self._recordings[task.id] = table
        return self._recordings[task.id]


class NoGoldGrader(Grader):
    """The grader of a suite without gold calls, which says so: the oracle, the ``actions``
    rewards and replay of gold refuse, and the suite's ``judge_reward`` (if a subclass gives one)
    is the default reward."""

    def has_gold(self, task: Task) -> bool:
        return False
