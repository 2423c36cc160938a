"""``EnvACE/plan-choice-v0``: two plausible plans, one rewarded; a task whose optimum is known.

A customer says an order arrived damaged. The agent settles the claim with one call,
``resolve_claim(resolution)``, ``"refund"`` or ``"replacement"``, then says it is done. The
store's policy (in the system prompt) is to refund. Every reward of the gold (``actions``,
``strict_progress``, ``world``, ...) scores 1 only the clean episode: the refund, no other call (a
rejected one included) and a closing reply; anything else scores 0. A world settles a claim once.

Under the noisy oracle (``agents.load("noisy-oracle", p=P)``) the wrong plan is the only wrong
call there is (the one argument's other enum member), so SFT on its episodes gives a warm start
that picks the rewarded plan in a share of about ``1 - P`` of its episodes: with ``P = 0.5``,
a coin flip that RL must turn into the refund (tests/training/test_learning.py).
"""

from __future__ import annotations

import random
from functools import cache, cached_property

from envace_gym.core.episode import Episode, Task
from envace_gym.core.grader import Grader
from envace_gym.core.suite import Suite, World
from envace_gym.core.tools import ToolSet

REWARDED, OTHER = "refund", "replacement"  #: The rewarded plan and the plausible other one.
NAMES = ("Ana", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana")
ITEMS = ("kettle", "lamp", "chair", "blender", "mirror", "vase", "clock", "toaster")
SPLITS = {"test": 16, "train": 48}  # of the 64 (name, item) pairs, in a fixed shuffled order

SYSTEM_PROMPT = (
    "You settle claims for damaged orders. Store policy: a damaged item is refunded, never replaced. "
    "Settle each claim with one call, then tell the customer it is done."
)
TOOLS = ToolSet(
    [
        {
            "type": "function",
            "function": {
                "name": "resolve_claim",
                "description": "Settle the customer's claim.",
                "parameters": {
                    "type": "object",
                    "properties": {"resolution": {"type": "string", "enum": [REWARDED, OTHER]}},
                    "required": ["resolution"],
                },
            },
        }
    ],
    closed=True,
)


class ClaimDesk(World):
    """One claim, settled at most once."""

    def __init__(self):
        self.resolution: str | None = None

    def resolve_claim(self, resolution: str) -> dict:
        if self.resolution is not None:
            raise ValueError(f"the claim is already settled ({self.resolution})")
        self.resolution = resolution
        return {"status": "settled", "resolution": resolution}


class PlanGrader(Grader):
    """The gold match, met only where the episode is clean: exactly one call written (rejected ones
    count: were junk after the refund free, RL would learn it along with the refund, as it did before
    this rule) and a last message that is the agent's reply without a call."""

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        reward, parts = super().score_actions(task, episode)
        last = episode.messages[-1]
        clean = sum(c.requestor == "assistant" for c in episode.calls) == 1 and (
            last["role"] == "assistant" and not last.get("tool_calls")
        )
        if not clean:
            reward = 0.0
            for check in parts["action_checks"]:
                check["met"] = False
        return reward, {**parts, "action": reward, "clean": clean}


@cache
def plan_tasks() -> dict[str, list[Task]]:
    """The tasks of each split: ``test_0..test_15`` and ``train_0..train_47``."""
    pairs = [(name, item) for name in NAMES for item in ITEMS]
    random.Random("plan-choice").shuffle(pairs)
    out: dict[str, list[Task]] = {}
    start = 0
    for split, n in SPLITS.items():
        out[split] = [
            Task(
                f"{split}_{i}",
                user=f"Hi, I'm {name}. The {item} I ordered arrived damaged. Please sort it out.",
                gold=[{"name": "resolve_claim", "arguments": {"resolution": REWARDED}}],
            )
            for i, (name, item) in enumerate(pairs[start : start + n])
        ]
        start += n
    return out


class PlanChoiceSuite(Suite):
    """Damaged-order claims: splits ``test`` (16 tasks, the default) and ``train`` (48)."""

    name = "plan-choice"
    default_split = "test"

    def __init__(self):
        self.tasks = [task for tasks in plan_tasks().values() for task in tasks]

    def __reduce__(self):  # pickled by reference: the process-wide suite
        return (get_suite, ())

    def splits(self) -> list[str]:
        return list(SPLITS)

    def task_ids(self, split: str | None = "default") -> list[str]:
        split = self.default_split if split == "default" else split
        if split is None:
            return [t.id for t in self.tasks]
        if split not in SPLITS:
            raise ValueError(f"{self.name} has no split {split!r}; splits: {', '.join(SPLITS)} (or None: every task)")
        return [t.id for t in plan_tasks()[split]]

    @cached_property
    def grader(self) -> PlanGrader:
        return PlanGrader(self)

    def system_prompt(self, task: Task) -> str:
        return SYSTEM_PROMPT

    def tools(self, task: Task) -> ToolSet:
        return TOOLS

    def new_world(self, task: Task) -> ClaimDesk:
        return ClaimDesk()


@cache
def get_suite() -> PlanChoiceSuite:
    """The process-wide plan-choice suite."""
    return PlanChoiceSuite()
