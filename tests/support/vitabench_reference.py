"""VitaBench's own side of the VitaBench tests: its environment answering a fixed list of calls
(run as a script, in a process where no envace-gym code is loaded), and an episode as VitaBench's
trajectory, for its own evaluator.

As a script it reads ``[[domain, task_id, calls], ...]`` as JSON on stdin and writes, for each,
the ``{"content", "error"}`` of every call as VitaBench's ``Environment.get_response`` answers it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys

ORDER_ID = re.compile(r"\bO[TI][0-9a-f]{10}\b")  # VitaBench's order, booking and reservation ids
LATEST = "$latest"  # an argument that stands for the latest id in the earlier responses


def resolve(arguments: dict, earlier: list[str]) -> dict:
    """``arguments`` with :data:`LATEST` replaced by the latest id found in the ``earlier`` responses."""
    ids = [i for text in earlier for i in ORDER_ID.findall(text)]
    return {k: (ids[-1] if v == LATEST and ids else v) for k, v in arguments.items()}


def normalized(text: str, seen: dict) -> str:
    """``text`` with each id named by its order of first appearance (ids hash the clock)."""
    return ORDER_ID.sub(lambda m: f"<id{seen.setdefault(m[0], len(seen))}>", text)


def vita_messages(episode) -> list:
    """The recorded episode as VitaBench's trajectory: greeting, user, assistant and tool messages,
    each tool message with the text VitaBench's environment gave (the call's ``native``)."""
    from vita.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    natives = {c.id: c.native for c in episode.calls}
    out = []
    for m in episode.messages:
        if m["role"] == "user":
            out.append(UserMessage(role="user", content=m["content"]))
        elif m["role"] == "tool":
            out.append(
                ToolMessage(id=m["tool_call_id"], name=m["name"], role="tool", content=natives[m["tool_call_id"]])
            )
        elif m["role"] == "assistant":
            calls = [
                ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                for c in m.get("tool_calls", [])
            ]
            out.append(AssistantMessage(role="assistant", content=m["content"] or None, tool_calls=calls or None))
    return out


def _fresh_tables() -> None:
    """VitaBench's class tables as a new thread finds them: a lone episode."""
    from vita.data_model.thread_safe_base import ThreadSafeBase

    stack = list(ThreadSafeBase.__subclasses__())
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        for table in ("_global_instances", "_polymorphic_instances"):
            vars(cls).get(table, {}).clear()


def answer(domain: str, task_id: str, calls: list) -> list[dict]:
    from vita.data_model.message import ToolCall

    module = importlib.import_module(f"vita.domains.{domain}.environment")
    task = next(t for t in module.get_tasks("english") if t.id == task_id)
    _fresh_tables()
    env = module.get_environment(task.environment, "english")
    out = []
    for i, (name, arguments) in enumerate(calls):
        message = env.get_response(
            ToolCall(id=str(i), name=name, arguments=resolve(arguments, [o["content"] for o in out]))
        )
        out.append({"content": message.content, "error": message.error})
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.environ["VITABENCH_ROOT"], "src"))
    sys.stderr = open(os.devnull, "w")  # get_response prints each exception's traceback
    jobs = json.load(sys.stdin)
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # vita.config prints its models on import
    results = [answer(*job) for job in jobs]
    real_stdout.write(json.dumps(results))
