"""tau2 users: a deterministic scripted user and an LLM user on any OpenAI-compatible server."""

from __future__ import annotations

import json
import re

from tau2.utils.utils import DATA_DIR

from envace_gym.core.episode import CallRecord, Task
from envace_gym.core.messages import ToolCall, assistant_message, tool_message
from envace_gym.core.suite import User, UserReply, World
from envace_gym.openai_client import ChatEndpoint

GREETING = "Hi! How can I help you today?"  # the agent's opening, as in tau2


def scenario_parts(task: Task) -> tuple[str, str]:
    """The user scenario's reason for the call and the info the user knows."""
    instructions = task.data.user_scenario.instructions
    if isinstance(instructions, str):
        return instructions, ""
    return instructions.reason_for_call or "", instructions.known_info or ""


# what tau2's scenario tells its simulator about the agent or how to behave, which no user says aloud
META = re.compile(r"\b(agent|reveal|mention|make sure|insist|upfront|when asked|respond)", re.I)
ASIDE = r"\s*\([^()]*\b(?:agent|reveal|mention)[^()]*\)"
META_ASIDE = re.compile(rf"(?<=[.!?]){ASIDE}\.?|{ASIDE}", re.I)  # after a sentence's end, its own end goes too
SECOND_PERSON = re.compile(
    r"\b(you(?:'re|\s+are|\s+aren't|\s+were|\s+weren't|'ve|'d|'ll|(?=\s+(?:name|mobile|reservation)\b))?"
    r"|yours(?:elf)?|your)\b",
    re.I,
)
FIRST_PERSON = {
    "you're": "I'm",
    "you are": "I am",
    "you aren't": "I'm not",
    "you were": "I was",
    "you weren't": "I wasn't",
    "you've": "I've",
    "you'd": "I'd",
    "you'll": "I'll",
    "yourself": "myself",
    "yours": "mine",
    "your": "my",
}
# a "you" after one of these is an object: "me"; elsewhere a subject: "I"
OBJECT_AFTER = frozenset(
    "to for with at on about from of by than into let lets help helps helped tell tells told give gives gave ask asks "
    "asked allow allows allowed save saves saved upgrade upgrades show shows showed send sends sent thank call calls "
    "called cause causes caused provide provides provided offer offers offered charge charges charged".split()
)


def first_person(text: str) -> str:
    """tau2's words to its user simulator, in the second person, as the user says them.

    >>> first_person("You are Mei. Your order came, and the store allows you to return what you've got.")
    "I am Mei. My order came, and the store allows me to return what I've got."
    """

    def swap(m: re.Match) -> str:
        said = " ".join(m[0].lower().split())
        if said == "you" and re.match(r"\s+(name|mobile|reservation)\b", text[m.end() :], re.I):
            said = "my"  # tau2's own typo: "You name is ..."
        elif said == "you":
            before = re.search(r"(\w+)\W*$", text[: m.start()])
            said = "me" if before and before[1].lower() in OBJECT_AFTER else "I"
        else:
            said = FIRST_PERSON[said]
        return said[0].upper() + said[1:] if m[0][0].isupper() else said

    return SECOND_PERSON.sub(swap, text)


def spoken(text: str) -> str:
    """What a user says of tau2's scenario text: its sentences in the first person, those about the agent or how
    to behave left out (the first one kept if that leaves none)."""
    sentences = [s.lstrip(". ") for s in re.split(r"(?<=[.!?])\s+", " ".join(META_ASIDE.sub("", text).split()))]
    sentences = [s for s in sentences if s]
    return first_person(" ".join([s for s in sentences if not META.search(s)] or sentences[:1]))


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
        str(response.error.code) if response.error else None,
        response.native,
    )


class ScriptedUser(User):
    """A deterministic user built from the task's scenario.

    It opens with the reason for the call and the known info, in the first person (:func:`spoken`: tau2 writes
    them to its simulator, "You want to ..."), answers identity
    questions with the known info and confirmation questions with yes, performs
    the task's user-side actions (telecom) when the agent names them (at most
    ``max_calls_per_message`` of them per message, found in one pass), and ends
    with tau2's stop token when the agent says it is done (``###STOP###``), after
    ``max_turns`` replies, or after ``max_idle`` replies in a row that had nothing to
    answer ("Is there anything else you need from me?"), so an agent that never
    closes does not loop until the turn limit.
    """

    def __init__(self, suite, task: Task, max_turns: int = 30, max_calls_per_message: int = 8, max_idle: int = 5):
        self.reason, self.known = map(spoken, scenario_parts(task))  # in the first person, as a user speaks
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
        records: list[CallRecord] = []
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
