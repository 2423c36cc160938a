"""Observation to prompt text, shared by the token-level agents (hf, vllm)."""

from __future__ import annotations

from dataclasses import dataclass, field

SENTINEL = "\x00ENVACE_TOOL_RESPONSE\x00"


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


def render_prompt(tokenizer, obs: dict) -> tuple[str, str | None]:
    """The prompt text for ``obs`` and the string that ends its completion (None: end of turn).

    An inline rehearsal is rendered as the conversation plus a tool message and cut
    where that message's content begins, so the model writes the response exactly
    where the chat template puts one; it ends where the template closes it.
    """
    tools = obs["tools"] or None
    if not is_inline_rehearsal(obs):
        return tokenizer.apply_chat_template(obs["messages"], tools=tools, add_generation_prompt=True,
                                             tokenize=False), None
    pending = {"role": "tool", "tool_call_id": obs["tool_call"]["id"], "name": obs["tool_call"]["name"],
               "content": SENTINEL}
    text = tokenizer.apply_chat_template(obs["messages"] + [pending], tools=tools, tokenize=False)
    prefix, _, suffix = text.partition(SENTINEL)
    closing = suffix.strip().split("\n")[0]
    if tokenizer.eos_token:
        closing = closing.split(tokenizer.eos_token)[0]
    return prefix, closing.strip() or None
