"""tau2 users: a deterministic scripted user and an LLM user on any OpenAI-compatible server."""

from __future__ import annotations

import json
import re

from tau2.utils.utils import DATA_DIR

from envace_gym.episode import CallRecord, Task
from envace_gym.messages import ToolCall, assistant_message, tool_message
from envace_gym.openai_client import ChatEndpoint
from envace_gym.suite import User, UserReply, World

GREETING = "Hi! How can I help you today?"  # the agent's opening, as in tau2


def scenario_parts(task: Task) -> tuple[str, str]:
    """The user scenario's reason for the call and the info the user knows."""
    instructions = task.data.user_scenario.instructions
    if isinstance(instructions, str):
        return instructions, ""
    return instructions.reason_for_call or "", instructions.known_info or ""


USER_STOP, USER_TRANSFER, USER_OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
GUIDELINES_DIR = DATA_DIR / "tau2" / "user_simulator"
CONFIRM_RE = re.compile(r"\b(confirm|proceed|go ahead|would you like|shall i|do you want|yes or no|\(yes\))\b", re.I)
IDENTITY_RE = re.compile(
    r"\b(email|name|zip|user ?id|phone|verify|authenticat|identif|order id|"
    r"reservation|account)\b",
    re.I,
)


def _run_user_call(world: World, call_id: str, name: str, arguments: dict) -> CallRecord:
    response = world.execute(name, arguments, requestor="user")
    return CallRecord(
        call_id,
        name,
        arguments,
        "user",
        "real",
        response.content,
        response.error and str(response.error.code),
        response.native,
    )


class ScriptedUser(User):
    """A deterministic user built from the task's scenario.

    It opens with the reason for the call and the known info, answers identity
    questions with the known info and confirmation questions with yes, performs
    the task's user-side actions (telecom) when the agent names them (at most
    ``max_calls_per_message`` of them per message, found in one pass), and ends
    with tau2's stop token when the agent says it is done (``###STOP###``), after
    ``max_turns`` replies, or after ``max_idle`` replies in a row that had nothing to
    answer ("Is there anything else you need from me?"), so an agent that never
    closes does not loop until the turn limit.
    """

    def __init__(self, suite, task: Task, max_turns: int = 30, max_calls_per_message: int = 8, max_idle: int = 5):
        self.reason, self.known = scenario_parts(task)
        self.tools = suite.user_toolset
        self.pending = [c for c in suite.grader.gold_calls(task) if c["requestor"] == "user"]
        self.max_turns, self.turns = max_turns, 0
        self.max_idle, self.idle = max_idle, 0
        self.max_calls_per_message = max_calls_per_message
        if self.tools is not None:  # one pass over a message finds every name; the longest wins
            forms = {form: name for name in self.tools.names for form in (name, name.replace("_", " "))}
            self._names = forms
            self._mention = re.compile(
                r"(?<!\w)(?:" + "|".join(map(re.escape, sorted(forms, key=len, reverse=True))) + r")(?!\w)"
            )

    def opening(self, world: World) -> str:
        return " ".join(p for p in (self.reason, self.known) if p).strip() or "I need some help."

    def reply(self, agent_text: str, world: World) -> UserReply:
        self.turns += 1
        if USER_STOP in agent_text or self.turns > self.max_turns:
            return UserReply(f"Thank you, that is all. {USER_STOP}", stop=True)
        calls = self._requested_calls(agent_text, world)
        self.idle += 1
        if calls:
            done = "; ".join(f"{c.name} returned {c.content}" for c in calls)
            reply = UserReply(f"I did that on my phone: {done}", calls=calls)
        elif CONFIRM_RE.search(agent_text):
            reply = UserReply("Yes, please go ahead.")
        elif IDENTITY_RE.search(agent_text) and self.known:
            reply = UserReply(self.known)
        elif self.idle >= self.max_idle:
            return UserReply(f"I have nothing more to add, thank you. {USER_STOP}", stop=True)
        else:
            return UserReply("Okay. Is there anything else you need from me?")
        self.idle = 0
        return reply

    def _requested_calls(self, text: str, world: World) -> list[CallRecord]:
        if self.tools is None:
            return []
        records = []
        for name in self._mentioned(text.lower()):
            gold = next((c for c in self.pending if c["name"] == name), None)
            if gold is not None:
                self.pending.remove(gold)
                arguments = gold["arguments"]
            elif not self.tools.by_name[name].get("required"):
                arguments = {}
            else:
                continue
            records.append(_run_user_call(world, f"user_call_{self.turns}_{len(records)}", name, arguments))
        return records

    def _mentioned(self, text: str) -> list[str]:
        """User tool names in ``text`` (as ``a_b`` or ``a b``), in order, at most the per-message cap."""
        found = []
        for m in self._mention.finditer(text):
            found.append(self._names[m[0]])
            if len(found) >= self.max_calls_per_message:
                break
        return found


class LLMUser(User):
    """tau2's user simulation (its guidelines and scenario prompt) through an OpenAI-compatible server.

    In telecom the user model gets the phone's user tools; its calls are
    validated against their schemas and executed on the world, as in tau2.
    """

    def __init__(
        self,
        suite,
        task: Task,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        timeout: float = 60.0,
        max_retries: int = 3,
        temperature: float = 0.0,
        seed: int | None = None,
        max_tool_rounds: int = 10,
        max_calls_per_message: int = 8,
    ):
        self.endpoint = ChatEndpoint(base_url, model, api_key, timeout, max_retries)
        self.tools = suite.user_toolset
        guidelines = (
            GUIDELINES_DIR / ("simulation_guidelines_tools.md" if self.tools else "simulation_guidelines.md")
        ).read_text()
        system = f"{guidelines}\n\n<scenario>\n{task.data.user_scenario}\n</scenario>"
        self.history = [{"role": "system", "content": system}]
        self.sampling = {"temperature": temperature}
        if seed is not None:
            self.sampling["seed"] = seed
        self.max_tool_rounds, self.turns = max_tool_rounds, 0
        self.max_calls_per_message = max_calls_per_message

    def opening(self, world: World) -> str:
        return self.reply(GREETING, world).text

    def reply(self, agent_text: str, world: World) -> UserReply:
        self.history.append({"role": "user", "content": agent_text})
        records: list[CallRecord] = []
        extra = {"tools": self.tools.schemas} if self.tools else {}
        for _ in range(self.max_tool_rounds):
            self.turns += 1
            message = self.endpoint.chat(self.history, **self.sampling, **extra)
            raw_calls = (message.tool_calls or [])[: self.max_calls_per_message]
            calls = [ToolCall(c.id, c.function.name, {}) for c in raw_calls]
            for call, raw in zip(calls, raw_calls):
                try:
                    call.arguments = json.loads(raw.function.arguments or "{}")
                except ValueError:
                    call.arguments = {"__unparsed__": raw.function.arguments}
            text = message.content or ""
            self.history.append(assistant_message(text, calls))
            if not calls:
                stop = any(t in text for t in (USER_STOP, USER_TRANSFER, USER_OUT_OF_SCOPE))
                return UserReply(text, stop=stop, calls=records)
            for call in calls:
                error = self.tools.check(call)
                record = (
                    CallRecord(call.id, call.name, call.arguments, "user", "rejected", error.content(), str(error.code))
                    if error
                    else _run_user_call(world, call.id, call.name, call.arguments)
                )
                records.append(record)
                self.history.append(tool_message(call, record.content))
        return UserReply(text or "...", calls=records)
