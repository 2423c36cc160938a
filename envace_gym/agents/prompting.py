"""Observation to prompt text, and the base of the token-level agents (hf, vllm)."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field

from envace_gym.agents.base import Agent

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


class TokenAgent(Agent):
    """An agent that generates from token ids; ``tokenizer`` renders its prompts."""

    tokenizer = None

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
