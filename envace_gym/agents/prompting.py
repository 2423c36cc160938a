"""Observation to prompt text, and the base of the token-level agents (hf, vllm)."""

from __future__ import annotations

import re
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

from envace_gym.agents.base import Agent
from envace_gym.spaces import CHAT_ROLES

SENTINEL = "\x00ENVACE_TOOL_RESPONSE\x00"
ZERO_WIDTH_SPACE = "\u200b"


@dataclass
class Generation:
    """One sampled completion, with what training needs."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def is_inline_rehearsal(obs: dict) -> bool:
    """A rehearse turn whose prompt is the conversation itself (it ends with the pending call)."""
    return obs["role"] == "rehearse" and obs["messages"][-1]["role"] in ("assistant", "tool")


def _control_tokens(tokenizer) -> re.Pattern | None:
    """A pattern of the tokenizer's special and added tokens (``<|im_start|>``, ``<tool_call>``)."""
    if hasattr(tokenizer, "_envace_control_tokens"):
        return tokenizer._envace_control_tokens
    tokens = set(getattr(tokenizer, "all_special_tokens", []))
    tokens |= {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values()}
    longest = sorted((t for t in tokens if len(t) > 1), key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, longest))) if longest else None
    try:
        tokenizer._envace_control_tokens = pattern
    except AttributeError:
        pass
    return pattern


def _clean(pattern: re.Pattern, value: Any) -> Any:
    if isinstance(value, str):
        return pattern.sub(lambda m: m[0][0] + ZERO_WIDTH_SPACE + m[0][1:], value)
    if isinstance(value, dict):
        return {_clean(pattern, k): _clean(pattern, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(pattern, v) for v in value]
    return value


def defused(tokenizer, messages: list[dict]) -> list[dict]:
    """``messages`` with every control token inside their text broken by a zero-width space.

    Messages hold text written by models, users and tools; rendered and tokenized as
    they are, a ``<|im_start|>`` inside one would open a forged turn. Only the chat
    template itself writes control tokens into a prompt. A role outside
    :data:`~envace_gym.spaces.CHAT_ROLES`
    (a record's forged ``role``) is refused with a ValueError.
    """
    for i, m in enumerate(messages):
        if m.get("role") not in CHAT_ROLES:
            raise ValueError(f"message {i} has role {str(m.get('role'))[:40]!r}; roles are {', '.join(CHAT_ROLES)}")
    pattern = _control_tokens(tokenizer)
    if pattern is None:
        return messages
    return [{k: v if k == "role" else _clean(pattern, v) for k, v in m.items()} for m in messages]


def defused_tools(tokenizer, tools: list[dict] | None) -> list[dict] | None:
    """``tools`` (names, descriptions, parameter names, enum values: every string a server or task
    file wrote) with control tokens broken as :func:`defused` breaks them. An env's tool list is
    the same object from step to step, so the last few are cached by identity."""
    pattern = _control_tokens(tokenizer)
    if pattern is None or not tools:
        return tools
    cache = tokenizer.__dict__.setdefault("_envace_defused_tools", {})
    hit = cache.get(id(tools))
    if hit is None or hit[0] is not tools:
        if len(cache) >= 32:
            cache.clear()
        hit = cache[id(tools)] = (tools, _clean(pattern, tools))  # holding ``tools`` keeps its id unique
    return hit[1]


def render_prompt(tokenizer, obs: dict) -> tuple[str, str | None]:
    """The prompt text for ``obs`` and the string that ends its completion (None: end of turn).

    An inline rehearsal is rendered as the conversation plus a tool message and cut
    where that message's content begins, so the model writes the response exactly
    where the chat template puts one; it ends where the template closes it. Control
    tokens inside the messages and the tool specs are defused first (:func:`defused`,
    :func:`defused_tools`).
    """
    tools = defused_tools(tokenizer, obs["tools"] or None)
    messages = defused(tokenizer, obs["messages"])
    if not is_inline_rehearsal(obs):
        return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False), None
    pending = {
        "role": "tool",
        "tool_call_id": obs["tool_call"]["id"],
        "name": obs["tool_call"]["name"],
        "content": SENTINEL,
    }
    text = tokenizer.apply_chat_template(messages + [pending], tools=tools, tokenize=False)
    prefix, _, suffix = text.rpartition(SENTINEL)  # the last one: a message may hold the sentinel too
    closing = suffix.strip().split("\n")[0]
    if tokenizer.eos_token:
        closing = closing.split(tokenizer.eos_token)[0]
    return prefix, closing.strip() or None


def completion(
    tokenizer, eos: set[int], prompt_ids: list[int], ids: list[int], logprobs, stop: str | None
) -> Generation:
    """A sampled row as a :class:`Generation`: cut after its first end-of-sequence token or, with a
    ``stop`` string, after the token that completes it (what follows is padding); its text without
    the end token and the stop string. ``logprobs`` (a list or a tensor) is cut alike."""
    n = next((k + 1 for k, t in enumerate(ids) if t in eos), len(ids))
    if stop:
        n = next((k for k in range(1, n + 1) if stop in tokenizer.decode(ids[:k])), n)
    text = tokenizer.decode([t for t in ids[:n] if t not in eos], skip_special_tokens=False)
    if stop and stop in text:
        text = text[: text.index(stop)]
    return Generation(text.strip(), list(prompt_ids), list(ids[:n]), [float(p) for p in logprobs[:n]])


class TokenAgent(Agent):
    """An agent that generates from token ids; ``tokenizer`` renders its prompts."""

    tokenizer: Any = None  # a Hugging Face tokenizer, or one like it (vLLM's)

    def act(self, obs: dict) -> str:
        return self.generate([obs])[0].text

    def act_batch(self, observations: list[dict]) -> list[str]:
        return [g.text for g in self.generate(observations)]

    def generate(self, observations: list[dict]) -> list[Generation]:
        rendered = [render_prompt(self.tokenizer, obs) for obs in observations]
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p, _ in rendered]
        return self.generate_ids(ids, [stop for _, stop in rendered])

    @abstractmethod
    def generate_ids(self, prompts: list[list[int]], stops: list[str | None]) -> list[Generation]:
        """Generate from token ids (token in, token out); ``stops[i]`` ends row i (None: end of turn)."""
