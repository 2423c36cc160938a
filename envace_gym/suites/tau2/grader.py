"""tau2's evaluation as a grader: its reward basis (database, assertions, actions, what was said)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from tau2.data_model.message import ToolCall as Tau2ToolCall
from tau2.data_model.tasks import RewardType

from envace_gym.core.episode import Episode, Task
from envace_gym.core.grader import Grader, unmet_arguments
from envace_gym.core.messages import format_tool_call
from envace_gym.core.state import model_diff
from envace_gym.core.suite import World
from envace_gym.suites.tau2.users import scenario_parts

if TYPE_CHECKING:
    from envace_gym.suites.tau2.suite import Tau2Suite, Tau2World

AGENT_STOP = "###STOP###"


class Tau2Grader(Grader):
    """Scores a tau2 domain's episodes as tau2 does, against the task's evaluation criteria
    (:meth:`~envace_gym.suites.tau2.suite.Tau2Suite.gold_actions` and its gold world)."""

    suite: Tau2Suite

    def __init__(self, suite: Tau2Suite):
        super().__init__(suite)
        self._gold_dumps: dict[str, tuple[dict, dict]] = {}  # task id -> dumps of its gold world's items

    def gold_calls(self, task: Task) -> list[dict]:
        return [
            {"name": a.name, "arguments": a.arguments, "requestor": a.requestor} for a in self.suite.gold_actions(task)
        ]

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        """tau2's action check: each gold action met by some call (``compare_with_tool_call``); one not met
        whose tool was called names the compared arguments that differ in ``unmet``."""
        predicted = [
            Tau2ToolCall(id=c.id, name=c.name, arguments=c.arguments, requestor=c.requestor)
            for c in episode.calls
            if c.ran
        ]
        checks = []
        for a in self.suite.gold_actions(task):  # tau2's own verdict (its == holds 22 and 22.0 equal)
            check = {
                "action": a.name,
                "arguments": a.arguments,
                "met": any(a.compare_with_tool_call(p) for p in predicted),
            }
            near = [  # the arguments tau2 compared that differ, for the nearest call of the name
                unmet_arguments(
                    a.arguments, p.arguments, p.arguments.keys() if a.compare_args is None else a.compare_args
                )
                for p in predicted
                if p.name == a.name
            ]
            if not check["met"] and near:
                check["unmet"] = min(near, key=len)
            checks.append(check)
        reward = 1.0 if all(c["met"] for c in checks) else 0.0
        return reward, {"action": reward, "action_checks": checks}

    def evaluate(self, task: Task, world: World, episode: Episode) -> tuple[float, dict]:
        criteria = task.data.evaluation_criteria
        if criteria is None:
            return 1.0, {"note": "no evaluation criteria"}
        basis = set(criteria.reward_basis)
        reward = 1.0
        info: dict[str, Any] = {"reward_basis": sorted(b.value for b in basis)}
        if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
            db_reward, assertion_reward = self._env_checks(task, cast("Tau2World", world), info)  # the suite's
            if RewardType.DB in basis:
                reward *= db_reward
            if RewardType.ENV_ASSERTION in basis:
                reward *= assertion_reward
        if RewardType.ACTION in basis:
            action_reward, action_info = self.score_actions(task, episode)
            info.update(action_info)
            reward *= action_reward
        if RewardType.COMMUNICATE in basis:
            checks = self.communicate_checks(task, episode)
            info["communicate"] = 1.0 if all(c["met"] for c in checks) else 0.0
            info["communicate_checks"] = checks
            reward *= info["communicate"]
        if RewardType.NL_ASSERTION in basis:
            info["note"] = "NL assertions need an LLM judge and are not part of this reward"
        return reward, info

    def _env_checks(self, task: Task, world: Tau2World, info: dict) -> tuple[float, float]:
        criteria = task.data.evaluation_criteria
        if criteria.actions is None and criteria.env_assertions is None:
            info.update(db=1.0, db_diff=[])
            return 1.0, 1.0
        gold = self.suite.gold_world(task).env
        dumps = self._gold_dumps.setdefault(task.id, ({}, {}))  # the gold world never changes
        diff = model_diff(world.env.tools.db, gold.tools.db, dumps[0])
        if gold.user_tools is not None:
            diff += [f"user.{d}" for d in model_diff(world.env.user_tools.db, gold.user_tools.db, dumps[1])]
        db_reward = 0.0 if diff else 1.0
        checks = []
        # assertions may sync tools: they run on a fork, so the episode's world stays as it was
        if criteria.env_assertions:
            probe = world.fork().env
            for assertion in criteria.env_assertions:
                try:
                    met = probe.run_env_assertion(assertion, raise_assertion_error=False)
                except Exception as e:
                    met, assertion = False, assertion.model_copy(update={"message": str(e)})
                checks.append({"func_name": assertion.func_name, "arguments": assertion.arguments, "met": met})
        assertion_reward = 1.0 if all(c["met"] for c in checks) else 0.0
        info.update(db=db_reward, db_diff=diff[:20], env_assertion=assertion_reward, env_assertions=checks)
        return db_reward, assertion_reward

    def criteria(self, task: Task) -> str:
        """The scenario, tau2's natural-language assertions, what must be said, and the gold calls."""
        reason, known = scenario_parts(task)
        criteria = task.data.evaluation_criteria
        parts = [f"The user's request: {reason} {known}".rstrip(), super().criteria(task)]
        if criteria and criteria.nl_assertions:
            parts.append("It must also satisfy:\n" + "\n".join(f"- {a}" for a in criteria.nl_assertions))
        if self.suite.communicate_info(task):
            parts.append("The assistant must tell the user: " + "; ".join(self.suite.communicate_info(task)))
        return "\n\n".join(parts)

    def communicate_checks(self, task: Task, episode: Episode) -> list[dict]:
        """tau2's COMMUNICATE check per item: said (case-insensitive, commas ignored) in an assistant message."""
        texts = [
            m["content"].lower().replace(",", "")
            for m in episode.messages
            if m["role"] == "assistant" and isinstance(m.get("content"), str)
        ]
        return [{"info": s, "met": any(s.lower() in t for t in texts)} for s in self.suite.communicate_info(task)]

    def oracle_plan(self, task: Task) -> list[Any]:
        """Each gold action (a user-side one asked of the user), then what must be said, and the stop token
        (or, when the gold ends with a transfer, what must be said before it)."""
        actions = self.suite.gold_actions(task)
        plan: list[Any] = []
        for a in actions:
            if a.requestor == "assistant":
                plan.append(format_tool_call(a.name, a.arguments))
            else:
                plan.append(f"Please do this on your phone: {a.name} with arguments {json.dumps(a.arguments)}.")
        info = self.suite.communicate_info(task)
        summary = ("To sum up: " + "; ".join(info) + ".") if info else "Your request is complete."
        if plan and actions[-1].name == self.suite.transfer_tool:
            plan.insert(len(plan) - 1, summary)
        else:
            plan.append(f"{summary} {AGENT_STOP}")
        return plan
