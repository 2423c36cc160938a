"""VitaBench users: an offline scripted user and VitaBench's LLM user simulator on any
OpenAI-compatible server."""

from __future__ import annotations

import re

from envace_gym.endpoint import ChatEndpoint
from envace_gym.envs.vitabench.source import LANGUAGE, load
from envace_gym.suite import Task, User, UserReply, World

load()

from vita.agent.base import LocalAgent  # noqa: E402
from vita.user.base import OUT_OF_SCOPE, STOP, TRANSFER  # noqa: E402
from vita.user.user_simulator import UserSimulator  # noqa: E402

AGENT_STOP = LocalAgent.STOP_TOKEN
SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")
WORD_RE = re.compile(r"[a-z]{4,}")
FUNCTION_WORDS = frozenset("what which when where would could should shall will like your yours have that this "
                           "with want need there their about from into please them they then than".split())


def content_words(text: str) -> set[str]:
    """The words of ``text`` that carry meaning, by their first five letters (so plurals and tenses meet)."""
    return {w[:5] for w in WORD_RE.findall(text.lower()) if w not in FUNCTION_WORDS}


class ScriptedUser(User):
    """A deterministic user built from the task's instructions.

    It opens with the instructions; a question gets the instruction sentence, not yet given
    as an answer, that shares the most content words with it (the earliest of equals),
    any other message, and a question that shares none, a go-ahead. It ends the episode,
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
        if "?" in agent_text and self.unsaid:
            asked = content_words(agent_text)
            sentence = max(self.unsaid, key=lambda s: len(asked & content_words(s)))
            if asked & content_words(sentence):
                self.unsaid.remove(sentence)
                return UserReply(sentence)
        return UserReply("Yes, please go ahead.")


class LLMUser(User):
    """VitaBench's user simulator: its system prompt with the task's persona and instructions, the
    conversation with roles flipped, through an OpenAI-compatible server.

    As in VitaBench, the user replies to the agent's greeting first, and the episode ends
    without a user turn when the agent closes (``###STOP###``) and when the user says a
    stop, transfer or out-of-scope token. The domains give the user no tools.
    """

    def __init__(self, task: Task, greeting: str, base_url: str, model: str, api_key: str = "EMPTY",
                 timeout: float = 60.0, max_retries: int = 3, temperature: float = 0.0, seed: int | None = None):
        self.endpoint = ChatEndpoint(base_url, model, api_key, timeout, max_retries)
        simulator = UserSimulator(persona=str(task.data.user_scenario.user_profile),
                                  instructions=str(task.data.instructions), language=LANGUAGE)
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
