"""The one tokenizer of episodes by role: a rendered conversation cut where each message's prompt ends,
each piece tokenized with the role of whoever wrote it. SFT's rows (:func:`~envace_gym.training.sft.episode_tokens`),
GRPO's rollouts (:func:`~envace_gym.training.rollout.collect`, its world rows) and the token-role exports
(:func:`~envace_gym.training.token_roles.episode_tokens`) all tokenize here.

The role vocabularies: a chat message's role is one of :data:`~envace_gym.spaces.CHAT_ROLES`, a turn's
(an observation's, a trained role) one of :data:`~envace_gym.spaces.TURN_ROLES`, a training row's token
one of :data:`ROLE_IDS`, an exported token one of :data:`~envace_gym.training.token_roles.TOKEN_ROLES` (RFC 010's).
"""

from __future__ import annotations

from collections.abc import Mapping

from envace_gym.agents.prompting import defused, defused_tools, render_prompt

#: a training row's token roles, as the numbers the rows hold: the TURN_ROLES generated, ``world``
#: (the real responses the world-model loss trains) and ``context`` (everything else)
ROLE_IDS = {"context": 0, "act": 1, "rehearse": 2, "world": 3}

Pieces = list[tuple[list[int], str]]  # token ids and the role of each run of them, in order


def tokenize(tokenizer, text: str) -> list[int]:
    """The ids of ``text``, with no special token added (the template wrote its own)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def rendered(tokenizer, messages: list[dict], tools: list[dict] | None) -> str:
    """The conversation as the chat template renders it, control tokens defused, no generation prompt."""
    return tokenizer.apply_chat_template(
        defused(tokenizer, messages), tools=defused_tools(tokenizer, tools), tokenize=False
    )


def message_prompt(tokenizer, messages: list[dict], tools: list[dict] | None, j: int) -> tuple[str, str | None]:
    """The prompt that message ``j`` answers and its stop string
    (:func:`~envace_gym.agents.prompting.render_prompt`): the act prompt before an assistant message, the
    inline rehearse prompt (its call pending) before a tool message."""
    m = messages[j]
    if m["role"] == "tool":
        call = {"id": m.get("tool_call_id"), "name": m.get("name")}  # all an inline prompt shows of the call
        return render_prompt(
            tokenizer, {"role": "rehearse", "messages": messages[:j], "tools": tools, "tool_call": call}
        )
    return render_prompt(tokenizer, {"role": "act", "messages": messages[:j], "tools": tools, "tool_call": None})


def conversation_tokens(
    tokenizer,
    text: str,
    messages: list[dict],
    tools: list[dict] | None,
    roles: Mapping[int, str],
    closed: bool = True,
    strict: bool = False,
    trailing: bool = True,
) -> Pieces:
    """``text`` (``messages`` rendered, :func:`rendered` or a prompt of them) tokenized with message ``j``
    in ``roles[j]`` and the rest ``context``. A message's tokens start where its prompt
    (:func:`message_prompt`) ends; an assistant message's run through the end-of-turn token, a tool
    message's through its content, and with ``closed`` through the string that closes it (an inline
    rehearsal's stop string). A message not rendered there (a template that rewrites earlier turns, a
    response not as written) is left context, or with ``strict`` a ValueError naming it; ``trailing``:
    whether the text after the last such message is kept."""
    eos = tokenizer.eos_token or ""
    clean = defused(tokenizer, messages)
    spans: list[tuple[int, int, str]] = []
    for j in sorted(roles):
        prompt, stop = message_prompt(tokenizer, messages, tools, j)
        start, end = len(prompt), -1
        if text.startswith(prompt) and start >= (spans[-1][1] if spans else 0):
            if clean[j]["role"] == "assistant":
                at = text.find(eos, start) if eos else -1
                end = at + len(eos) if at >= 0 else -1
            elif text.startswith(content := clean[j]["content"], start):
                end = start + len(content)
                closing = (stop or eos) if closed else ""
                at = text.find(closing, end) if closing else end
                end = at + len(closing) if at >= 0 and not text[end:at].strip() else -1
        if end >= 0:
            spans.append((start, end, roles[j]))
        elif strict:
            raise ValueError(f"the chat template does not render message {j} where its prompt ends")
    pieces: Pieces = []
    done = 0
    for start, end, role in spans:
        pieces += [(tokenize(tokenizer, text[done:start]), "context"), (tokenize(tokenizer, text[start:end]), role)]
        done = end
    return pieces + [(tokenize(tokenizer, text[done:]), "context")] if trailing else pieces


def context_delta(text: str, closing: str | None, prompt: str, eos: str) -> str:
    """The text of ``prompt`` that a row holding ``text`` (the last prompt rendered) and the generation
    after it does not hold yet: a rollout's context between two generations.

    The last generation was appended as sampled; the template re-renders it, so the delta starts
    where the template closes that message: after the first terminator (``closing``, the stop string,
    or None for eos) following ``text``. ``closing`` "": the last generation left the row, so the
    rendered text goes on where ``text`` ends.
    """
    if not text:
        return prompt
    if closing == "":
        return prompt[len(text) :]
    if not prompt.startswith(text):
        raise ValueError("the chat template does not render conversations prefix-stably")
    end = closing or eos
    at = prompt.find(end, len(text))
    if at < 0:
        raise ValueError(f"the rendered prompt does not close the last generation with {end!r}")
    return prompt[at + len(end) :] if closing else prompt[at:]
