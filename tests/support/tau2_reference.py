"""tau2's own evaluator on an envace-gym episode, for agreement tests and the benchmark."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage  # noqa: E402
from tau2.data_model.simulation import SimulationRun, TerminationReason  # noqa: E402
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # noqa: E402


def tau2_messages(episode) -> list:
    """The episode as tau2 messages: calls that passed validation, with tau2's own response text.

    (Tasks with a recorded message history, found only in the mock domain, are not covered.)
    """
    by_id = {c.id: c for c in episode.calls if c.requestor == "assistant"}
    user_calls: dict[int, list] = {}
    for c in episode.calls:
        if c.requestor == "user" and c.ran:
            user_calls.setdefault(c.position, []).append(c)
    out = []
    for i, m in enumerate(episode.messages):
        for c in user_calls.get(i, []):
            out.append(
                UserMessage(
                    role="user", tool_calls=[ToolCall(id=c.id, name=c.name, arguments=c.arguments, requestor="user")]
                )
            )
            out.append(ToolMessage(id=c.id, role="tool", content=c.native, requestor="user"))
        if m["role"] == "assistant":
            calls = [by_id[t["id"]] for t in m.get("tool_calls", []) if by_id[t["id"]].ran]
            if not calls and not m.get("content"):
                continue
            out.append(
                AssistantMessage(
                    role="assistant",
                    content=m.get("content") or None,
                    tool_calls=[ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in calls] or None,
                )
            )
            for c in calls:
                out.append(ToolMessage(id=c.id, role="tool", content=c.native, requestor="assistant"))
        elif m["role"] == "user":
            out.append(UserMessage(role="user", content=m["content"]))
    return out


def tau2_reward(episode) -> float:
    """tau2's ``evaluate_simulation`` (type ALL) on the episode."""
    reason = {
        "user_stop": TerminationReason.USER_STOP,
        "transfer": TerminationReason.AGENT_STOP,
        "max_turns": TerminationReason.MAX_STEPS,
    }.get(episode.ended_by, TerminationReason.AGENT_ERROR)
    run = SimulationRun(
        id="x",
        task_id=episode.task.id,
        start_time="",
        end_time="",
        duration=0.0,
        termination_reason=reason,
        messages=tau2_messages(episode),
    )
    result = evaluate_simulation(
        simulation=run,
        task=episode.task.data,
        evaluation_type=EvaluationType.ALL,
        solo_mode=False,
        domain=episode.suite.domain,
    )
    return result.reward
