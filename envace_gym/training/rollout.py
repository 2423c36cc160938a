"""Rollouts for training: groups of episodes, stepped together, token in and token out.

With inline rehearsal an episode is one token sequence. Generations are sampled
from that sequence's ids and appended as sampled, tagged ``act`` or
``rehearse`` with their sampler log-probs; what the env, the user and the
template add in between is tokenized as a delta of the rendered prompt and
tagged ``context``. The trainer therefore learns on exactly the sampled tokens.
With prompted rehearsal (the EnvACE paper's layout) every rehearse generation is
a row of its own, its simulator prompt as context; the episode's conversation
row holds the act tokens and sees the rehearsed responses as context.

Where the world answers a call the policy rehearsed (``shadow`` dynamics, the shadow calls of
``adaptive``), the sequence holds what the episode holds: the world's answer, as context. The rehearsal
leaves the row unless it is that answer word for word, so no later token is sampled from, or credited
to, a response the episode never saw.

With ``world_targets`` every episode that ran real tool calls gets one more row: its
conversation with the real responses written where an inline rehearsal would write
them, tagged ``world`` (the targets of the world-model loss), the rest context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gymnasium as gym

from envace_gym.agents.prompting import is_inline_rehearsal, render_prompt
from envace_gym.training.tokens import ROLE_IDS, context_delta, conversation_tokens, tokenize

if TYPE_CHECKING:
    from envace_gym.play.distributed import EnvPool


@dataclass
class Rollout:
    """One episode as a training row."""

    task_id: str
    group: int
    episode: int = 0  # which episode of the batch this row belongs to
    ids: list[int] = field(default_factory=list)
    roles: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    generations: dict[str, int] = field(default_factory=lambda: {"act": 0, "rehearse": 0})
    reward: float = 0.0
    info: dict = field(default_factory=dict)
    _text: str = ""  # the rendered prompt text that ``ids`` stands for
    _closing: str | None = None  # how the last generation ended (eos or a stop string); "": nothing follows _text

    def extend(self, ids: list[int], role: str, logprobs: list[float] | None = None) -> None:
        self.ids += ids
        self.roles += [ROLE_IDS[role]] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


def answered_otherwise(call_id: str, info: dict) -> bool:
    """Whether the world answered the call just rehearsed, and with other content than the rehearsal."""
    calls = info.get("tool_calls", ())
    return any(c["id"] == call_id and "rehearsed" in c and c["real"] != c["rehearsed"] for c in calls)


def reset_all(envs, requests: list[tuple[int, dict]]) -> list[tuple[dict, dict]]:
    """Reset env ``i`` with the ``i``-th ``(seed, options)``: in turn, or all at once where ``envs`` can
    (an :class:`~envace_gym.play.distributed.EnvPool` of Ray actors)."""
    if hasattr(envs, "reset_many"):
        return envs.reset_many(requests)
    return [env.reset(seed=seed, options=options) for env, (seed, options) in zip(envs, requests)]


def step_all(envs, actions: list[tuple[int, str]]) -> list[tuple]:
    """``envs[i].step(text)`` for each ``(i, text)``: in turn, or all at once where ``envs`` can."""
    if hasattr(envs, "step_many"):
        return envs.step_many(actions)
    return [envs[i].step(text) for i, text in actions]


def world_row(tok, rollout: Rollout, obs: dict, real_ids: set[str]) -> Rollout | None:
    """The episode's conversation (its final observation ``obs``) with the content of each tool message
    answering a call in ``real_ids``, through the string that closes an inline rehearsal, tagged
    ``world``: each where the model writes its rehearsal of that call
    (:func:`~envace_gym.training.tokens.conversation_tokens`). None when no response fits (a chat template
    that renders the conversation differently at that point, tools that changed)."""
    messages = obs["messages"]
    real = {j: "world" for j, m in enumerate(messages) if m["role"] == "tool" and m.get("tool_call_id") in real_ids}
    pieces = conversation_tokens(tok, render_prompt(tok, obs)[0], messages, obs["tools"], real)
    if len(pieces) == 1:  # the context alone
        return None
    row = Rollout(task_id=rollout.task_id, group=rollout.group, episode=rollout.episode)
    for ids, role in pieces:
        row.extend(ids, role)
    row.reward, row.info = rollout.reward, rollout.info
    return row


def collect(
    agent,
    envs: list[gym.Env] | EnvPool,
    task_ids: list[str],
    group_size: int,
    seed: int = 0,
    world_targets: bool = False,
    skip_world: Callable[[str, dict], bool] | None = None,
) -> list[Rollout]:
    """Play ``group_size`` episodes of every task (one env each), generations batched across envs.

    ``envs`` may also be an :class:`~envace_gym.play.distributed.EnvPool`: the envs live in Ray actors and
    each round's steps run there in parallel (users, judges, slow tools), generation staying here.
    Returns the conversation row of every episode (in task order), then the rows of
    prompted rehearse generations, if any, then with ``world_targets`` the :func:`world_row` of
    every episode that ran real calls (inline rehearsal only). An episode that ended with an error (a model
    server of the judge, the user or a simulator failed) has it in ``info["error"]``, and each episode's
    ``info["real_calls"]`` counts the calls the world answered. ``skip_world(name, arguments)`` leaves a real
    response out of the world row (the gated world-model loss); ``info["world"]`` counts those trained and
    those skipped.
    """
    assert len(envs) == len(task_ids) * group_size, "one env per episode"
    tok = agent.tokenizer
    rollouts = [
        Rollout(task_id=t, group=g, episode=g * group_size + k)
        for g, t in enumerate(task_ids)
        for k in range(group_size)
    ]
    extra: list[Rollout] = []
    real_ids: list[set[str]] = [set() for _ in rollouts]  # the ids of each episode's calls the world answered
    skipped: list[set[str]] = [set() for _ in rollouts]  # those of them left out of its world row
    worlds: list[Rollout] = []
    observations = [
        obs for obs, _ in reset_all(envs, [(seed + i, {"task_id": r.task_id}) for i, r in enumerate(rollouts)])
    ]
    active = list(range(len(envs)))
    while active:
        prompts, stops, rows = [], [], []
        for i in active:
            obs = observations[i]
            text, stop = render_prompt(tok, obs)
            if obs["role"] == "rehearse" and not is_inline_rehearsal(obs):
                row = Rollout(task_id=rollouts[i].task_id, group=rollouts[i].group, episode=rollouts[i].episode)
                row.extend(tokenize(tok, text), "context")
                extra.append(row)
            else:
                row = rollouts[i]
                row.extend(tokenize(tok, context_delta(row._text, row._closing, text, tok.eos_token)), "context")
                row._text = text
            rows.append(row)
            prompts.append(list(row.ids))
            stops.append(stop)
        gens = agent.generate_ids(prompts, stops)
        still = []
        steps = step_all(envs, [(i, gen.text) for i, gen in zip(active, gens)])
        for i, row, gen, stop, step in zip(active, rows, gens, stops, steps):
            role = observations[i]["role"]
            row.extend(gen.completion_ids, role, gen.logprobs)
            row.generations[role] += 1
            closing = stop if stop else tok.eos_token
            row._closing = closing if closing in tok.decode(gen.completion_ids[-8:]) else None
            obs, reward, terminated, truncated, info = step
            if (
                row is rollouts[i]
                and role == "rehearse"
                and answered_otherwise(observations[i]["tool_call"]["id"], info)
            ):
                kept = len(row.ids) - len(gen.completion_ids)
                del row.ids[kept:], row.roles[kept:], row.logprobs[kept:]
                row.generations["rehearse"] -= 1
                row._closing = ""
            observations[i] = obs
            real = [c for c in info.get("tool_calls", ()) if c["source"] == "real"]
            real_ids[i] |= {c["id"] for c in real}
            skipped[i] |= {c["id"] for c in real if skip_world and skip_world(c["name"], c["arguments"])}
            if terminated or truncated:
                r = rollouts[i]
                keys = ("ended_by", "reward_source", "reward_info", "turn", "error")
                r.reward, r.info = reward, {k: info.get(k) for k in keys}
                trained = real_ids[i] - skipped[i]
                r.info["real_calls"] = len(real_ids[i])
                r.info["world"] = {"trained": len(trained), "skipped_faithful": len(skipped[i])}
                for other in extra:
                    if other.episode == r.episode:
                        other.reward, other.info = r.reward, r.info
                if world_targets and trained:
                    world = world_row(tok, r, obs, trained)
                    if world is not None:
                        worlds.append(world)
            else:
                still.append(i)
        active = still
    return rollouts + extra + worlds
