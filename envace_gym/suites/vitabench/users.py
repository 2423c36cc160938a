"""VitaBench users: an offline scripted user and VitaBench's LLM user simulator on any
OpenAI-compatible server."""

from __future__ import annotations

import math
import re

from envace_gym.core.episode import Task
from envace_gym.core.suite import User, UserReply, World
from envace_gym.openai_client import ChatEndpoint
from envace_gym.suites.vitabench.source import LANGUAGE, load

load()

from vita.agent.base import LocalAgent  # noqa: E402
from vita.user.base import OUT_OF_SCOPE, STOP, TRANSFER  # noqa: E402
from vita.user.user_simulator import UserSimulator  # noqa: E402

AGENT_STOP = LocalAgent.STOP_TOKEN
SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")
WORD_RE = re.compile(r"[a-z]{3,}")
FUNCTION_WORDS = frozenset(
    "what which when where would could should shall will like your yours have that this "
    "with want need there their about from into please them they then than the and you "
    "for are can how any our its was has had not but all may one".split()
)
# questions about a time or a place; the cues of a sentence that answers one (a precise cue
# weighs 2, a vague one 1); and the reply when no sentence has a cue
TOPICS = (
    (
        re.compile(r"\b(when|what time|which time|time slot|how soon)\b"),
        (
            (re.compile(r"\d{1,2}(:\d{2})?\s*(am|pm)\b|\b\d{1,2}:\d{2}\b|o'clock"), 2),
            (re.compile(r"\b(morning|afternoon|evening|noon|tonight|tomorrow|today|asap|as soon as)\b"), 1),
        ),
        "I have no preference for the time.",
    ),
    (
        re.compile(r"\b(where|address|which location)\b"),
        (
            (re.compile(r"\b(room|building|street|road|avenue|floor|apartment|unit)\b"), 2),
            (re.compile(r"\b(address|office|home|district|nearby)\b"), 1),
        ),
        "I have no preference for the place.",
    ),
)
NO_PREFERENCE = "I have no preference; please go ahead."


def content_words(text: str) -> set[str]:
    """The words of ``text`` that carry meaning, by their first five letters (so plurals and tenses meet)."""
    return {w[:5] for w in WORD_RE.findall(text.lower()) if w not in FUNCTION_WORDS}


class ScriptedUser(User):
    """A deterministic user built from the task's instructions.

    It opens with the instructions. A question about a time or a place gets the instruction
    sentence, not yet given as an answer, with the strongest cue of one (a clock time, a room
    or street; then the most relevant, then the earliest), else "I have no preference";
    another question gets the unsaid sentence whose shared content words are the most
    distinctive (each weighted by how few sentences hold it; a word that most sentences hold
    does not count), else "I have no preference"; any other message gets a go-ahead. It ends
    the episode,
    saying nothing, when the agent closes with VitaBench's stop token (``###STOP###``), or
    with VitaBench's user stop token after ``max_turns`` replies.
    """

    def __init__(self, task: Task, max_turns: int = 30):
        self.instructions = task.data.instructions.strip()
        self.unsaid = [s for s in SENTENCE_RE.split(self.instructions) if s]
        self.max_turns, self.turns = max_turns, 0

    def opening(self, world: World) -> str:
        return self.instructions

    def reply(self, agent_text: str, world: World) -> UserReply:
        self.turns += 1
        if AGENT_STOP in agent_text:
            return UserReply("", stop=True)
        if self.turns > self.max_turns:
            return UserReply(f"Thank you, that is all. {STOP}", stop=True)
        if "?" not in agent_text:
            return UserReply("Yes, please go ahead.")
        question, relevance = agent_text.lower(), self._relevance(content_words(agent_text))
        for asks, cues, none in TOPICS:
            if asks.search(question):
                found = [sum(w * len(p.findall(s.lower())) for p, w in cues) for s in self.unsaid]
                best = max(range(len(found)), key=lambda i: (found[i], relevance[i], -i), default=None)
                return self._say(self.unsaid[best]) if best is not None and found[best] else UserReply(none)
        best = max(range(len(relevance)), key=lambda i: (relevance[i], -i), default=None)
        return self._say(self.unsaid[best]) if best is not None and relevance[best] > 0 else UserReply(NO_PREFERENCE)

    def _relevance(self, asked: set[str]) -> list[float]:
        """Per unsaid sentence, its shared words with the question, each weighted by how distinctive it
        is among all the instruction sentences (a word that most of them hold weighs nothing)."""
        sentences = [content_words(s) for s in SENTENCE_RE.split(self.instructions) if s]
        df = {w: sum(w in words for words in sentences) for w in asked}
        weight = {w: math.log(len(sentences) / n) for w, n in df.items() if 0 < n <= len(sentences) / 2}
        return [sum(weight.get(w, 0.0) for w in asked & content_words(s)) for s in self.unsaid]

    def _say(self, sentence: str) -> UserReply:
        self.unsaid.remove(sentence)
        return UserReply(sentence)


class LLMUser(User):
    """VitaBench's user simulator: its system prompt with the task's persona and instructions, the
    conversation with roles flipped, through an OpenAI-compatible server.

    As in VitaBench, the user replies to the agent's greeting first, and the episode ends
    without a user turn when the agent closes (``###STOP###``) and when the user says a
    stop, transfer or out-of-scope token. The domains give the user no tools.
    """

    def __init__(
        self,
        task: Task,
        greeting: str,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        timeout: float = 60.0,
        max_retries: int = 3,
        temperature: float = 0.0,
        seed: int | None = None,
    ):
        self.endpoint = ChatEndpoint(base_url, model, api_key, timeout, max_retries)
        simulator = UserSimulator(
            persona=str(task.data.user_scenario.user_profile),
            instructions=str(task.data.instructions),
            language=LANGUAGE,
        )
        self.history = [{"role": "system", "content": simulator.system_prompt}]
        self.sampling = {"temperature": temperature, **({"seed": seed} if seed is not None else {})}
        self.greeting = greeting

    def opening(self, world: World) -> str:
        return self.reply(self.greeting, world).text

    def reply(self, agent_text: str, world: World) -> UserReply:
        if AGENT_STOP in agent_text:
            return UserReply("", stop=True)
        self.history.append({"role": "user", "content": agent_text})
        text = self.endpoint.chat(self.history, **self.sampling).content or ""
        self.history.append({"role": "assistant", "content": text})
        return UserReply(text, stop=any(token in text for token in (STOP, TRANSFER, OUT_OF_SCOPE)))
