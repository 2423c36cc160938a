"""What both ways of :mod:`envace_gym.integrations.trl` start from: the dataset of the env's task prompts,
and a tokenizer that can parse tool calls written in envace-gym's tool template."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from envace_gym.chat_template import TOOL_CHAT_TEMPLATE
from envace_gym.wrappers import unwrap

# how transformers' ``parse_response`` reads a message written in TOOL_CHAT_TEMPLATE
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def make_dataset(env_id: str, limit: int | None = None, **make_kwargs: Any):
    """A ``datasets.Dataset`` of the env's tasks (``gym.make(env_id, **make_kwargs)``, the first
    ``limit``): ``prompt``, the opening messages (system prompt, opening turns, the user's first
    message), and ``task_id``.

    The first message of each prompt also carries the ``task_id``: TRL hands a ``rollout_func``
    the prompts alone, and two tasks can open with the same messages.
    """
    from datasets import Dataset

    env = gym.make(env_id, **make_kwargs)
    rows = []
    for task_id in unwrap(env).task_ids[:limit]:
        obs, _ = env.reset(seed=0, options={"task_id": task_id})
        first, *rest = obs["messages"]
        rows.append({"prompt": [{**first, "task_id": task_id}, *rest], "task_id": task_id})
    env.close()
    return Dataset.from_list(rows)


def prepare_tokenizer(tokenizer):
    """``tokenizer``, able to parse tool calls in TRL's tool loop.

    TRL knows the response formats of the common chat templates; this adds the one of
    envace-gym's tool template (:data:`~envace_gym.chat_template.TOOL_CHAT_TEMPLATE`: SmolLM2,
    the tiny test model) when the tokenizer uses it and has none.
    """
    if tokenizer.chat_template == TOOL_CHAT_TEMPLATE and getattr(tokenizer, "response_template", None) is None:
        tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer
