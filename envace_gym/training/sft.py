"""Role-masked SFT warm start on recorded real episodes, in ``train``'s token layout.

An episode is a ``run`` record (:func:`envace_gym.play.loop.run_episode`: ``messages``,
``tools``, ``opening_messages``, ``real_call_ids``). It becomes the token sequence an
inline-rehearsal rollout of it would be (:func:`envace_gym.training.rollout.collect`): the
agent's assistant messages are ``act`` tokens, the tool messages the real world
answered are ``rehearse`` tokens, everything else (system prompt, the suite's opening,
user turns, template text, rehearsed or rejected tool responses) is context. The loss
is the token-mean next-token NLL of each role, summed over the roles trained; the
loop, checkpoints and metrics are :class:`~envace_gym.training.loop.TrainingLoop`'s, as GRPO's are.
"""

from __future__ import annotations

import dataclasses
import math
import time
from functools import cached_property
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envace_gym import agents
from envace_gym.agents.prompting import render_prompt
from envace_gym.core.messages import MAX_JSON_DEPTH, json_depth
from envace_gym.play.loop import run_episodes
from envace_gym.play.records import rows
from envace_gym.spaces import CHAT_ROLES, TURN_ROLES
from envace_gym.training.config import SFTConfig
from envace_gym.training.grpo import token_logprobs
from envace_gym.training.loop import TrainingLoop
from envace_gym.training.policy import Policy
from envace_gym.training.tokens import ROLE_IDS, conversation_tokens
from envace_gym.wrappers import unwrap

Sequence = tuple[list[int], list[int]]  # token ids and their roles (ROLE_IDS)


def episode_tokens(tokenizer, record: dict) -> Sequence:
    """The ids and roles of one ``run`` record's episode, as :func:`~envace_gym.training.rollout.collect` tags them
    (:func:`~envace_gym.training.tokens.conversation_tokens`).

    After the opening (context), an assistant message is ``act`` from where the generation
    prompt ends through the end-of-turn token; a tool message of a real call is ``rehearse``
    from where its content begins through the template's closing of it (the stop string
    of an inline rehearsal); the text in between is context, as the deltas a rollout appends.
    """
    messages, tools, real = record["messages"], record["tools"], set(record["real_call_ids"])
    roles = {
        i: "act" if m["role"] == "assistant" else "rehearse"
        for i, m in enumerate(messages)
        if i >= record["opening_messages"]
        and (m["role"] == "assistant" or (m["role"] == "tool" and m["tool_call_id"] in real))
    }
    text, _ = render_prompt(tokenizer, {"role": "act", "messages": messages, "tools": tools})
    pieces = conversation_tokens(tokenizer, text, messages, tools, roles, strict=True, trailing=False)
    return [i for ids, _ in pieces for i in ids], [ROLE_IDS[role] for ids, role in pieces for _ in ids]


def gold_episodes(
    env_id: str, split: str | None, max_episodes: int | None = None, seed: int = 0, **env_kwargs
) -> list[dict]:
    """``run`` records of the oracle on the first ``max_episodes`` tasks of ``split``, under real dynamics."""
    env = gym.make(env_id, split=split, dynamics="real", **env_kwargs)
    task_ids = unwrap(env).task_ids[:max_episodes]
    return list(run_episodes(env, agents.load("oracle", env=env), task_ids, seed=seed))


def load_episodes(path: str | Path, max_episodes: int | None = None) -> list[dict]:
    """The records of a ``run`` output (JSONL, read by :func:`~envace_gym.play.records.rows`: a bad line is a
    ValueError naming the file and line), each checked (:func:`check_record`: a bad record is a ValueError
    naming the file and the episode)."""
    try:
        records = rows(path)[:max_episodes]
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    for number, record in enumerate(records, 1):
        try:
            check_record(record)
        except ValueError as e:
            raise ValueError(f"{path} episode {number}: {e}") from None
    return records


def check_record(record) -> dict:
    """``record`` if it holds a transcript ``episode_tokens`` can lay out, else a ValueError saying why."""
    if not isinstance(record, dict):
        raise ValueError("a record must be a JSON object")
    if "messages" not in record:
        raise ValueError("the record has no messages; write it with this version's `envace-gym run`")
    messages, tools = record["messages"], record.get("tools")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ValueError("'messages' must be a list of message objects")
    for i, m in enumerate(messages):
        if m.get("role") not in CHAT_ROLES:
            raise ValueError(f"message {i} has role {str(m.get('role'))[:40]!r}; roles are {', '.join(CHAT_ROLES)}")
        calls = m.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(map(_is_call, calls))):
            raise ValueError(
                f"message {i}'s 'tool_calls' must be a list of {{'function': {{'name': text, "
                f"'arguments': object (at most {MAX_JSON_DEPTH} levels deep) or text}}}} objects"
            )
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError("the record has no 'tools' list (the tool specs the episode was played with)")
    opening = record.get("opening_messages")
    if isinstance(opening, bool) or not isinstance(opening, int) or not 0 <= opening < len(messages):
        raise ValueError(
            f"'opening_messages' must be an index into its {len(messages)} messages, got {str(opening)[:40]}"
        )
    if not isinstance(record.get("real_call_ids"), list):
        raise ValueError("the record has no 'real_call_ids' list")
    return record


def _is_call(call) -> bool:
    """Whether ``call`` is a tool call as the chat template renders it, its arguments nested no
    deeper than the env accepts them."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return False
    arguments = function.get("arguments")
    return isinstance(arguments, str) or (isinstance(arguments, dict) and json_depth(arguments) <= MAX_JSON_DEPTH)


def role_nll(model, sequences: list[Sequence], pad_id: int) -> dict[str, tuple[torch.Tensor, int]]:
    """Summed next-token NLL (the model's training forward, temperature 1) and token count of each role."""
    width = max(len(ids) for ids, _ in sequences)
    ids = torch.tensor([s + [pad_id] * (width - len(s)) for s, _ in sequences])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s, _ in sequences])
    roles = torch.tensor([r + [ROLE_IDS["context"]] * (width - len(r)) for _, r in sequences])
    device = next(model.parameters()).device
    nll = -token_logprobs(model, ids.to(device), mask.to(device)).cpu()
    return {role: (nll[roles == ROLE_IDS[role]].sum(), int((roles == ROLE_IDS[role]).sum())) for role in TURN_ROLES}


def held_out_loss(model, sequences: list[Sequence], pad_id: int, batch: int = 4) -> dict[str, float | None]:
    """Per-token NLL of each role over ``sequences`` (None for a role they lack)."""
    sums = {role: [0.0, 0] for role in TURN_ROLES}
    with torch.no_grad():
        for at in range(0, len(sequences), batch):
            for role, (total, count) in role_nll(model, sequences[at : at + batch], pad_id).items():
                sums[role][0] += total.item()
                sums[role][1] += count
    return {role: total / count if count else None for role, (total, count) in sums.items()}


class SFT(TrainingLoop):
    """Next-token training of both roles on recorded real episodes.

    Its :class:`~envace_gym.training.policy.Policy` holds the model (LoRA included), the
    optimizer and linear schedule; the loop, the metrics (``metrics.jsonl``, TensorBoard,
    ``metrics.png``) and the checkpoints (``step-N``, loadable as ``hf:OUT/step-N``) are
    :class:`~envace_gym.training.loop.TrainingLoop`'s, as GRPO's are. A step is one update on
    ``batch`` episodes of a fixed shuffled order (the data cursor).
    """

    def __init__(self, config: SFTConfig):
        if config.source == "gold":
            records = gold_episodes(config.env_id, config.split, config.max_episodes, config.seed, **config.env_kwargs)
        else:
            records = load_episodes(config.source, config.max_episodes)
        if not records:
            raise ValueError(f"no episodes to train on in {config.source}")
        steps = config.steps if config.steps is not None else config.epochs * math.ceil(len(records) / config.batch)
        config = dataclasses.replace(config, steps=steps)  # a copy: the caller's config keeps its None
        self.cfg, self.out = config, Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.play_settings: dict = {}  # SFT plays no episode: a checkpoint keeps the players' defaults
        self.policy = Policy(
            config.model,
            seed=config.seed,
            lr=config.lr,
            steps=steps,
            lora_rank=config.lora_rank,
            gradient_checkpointing=config.gradient_checkpointing,
        )
        self.sequences = [self._sequence(r, i) for i, r in enumerate(records)]
        self.order = list(np.random.default_rng(config.seed).permutation(len(self.sequences)))
        self.step, self.cursor = 0, 0

    def _sequence(self, record: dict, index: int) -> Sequence:
        """One episode's tokens, cut at ``max_tokens``; a record that cannot be laid out is one
        ValueError naming it."""
        try:
            ids, roles = episode_tokens(self.tokenizer, check_record(record))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"{self.cfg.source} episode {index + 1} (task {str(record.get('task_id'))[:40]}): {str(e)[:300]}"
            ) from None
        return ids[: self.cfg.max_tokens], roles[: self.cfg.max_tokens]

    @cached_property
    def eval_sequences(self) -> list[Sequence]:
        records = gold_episodes(
            self.cfg.env_id, self.cfg.eval_split, self.cfg.eval_tasks, self.cfg.seed, **self.cfg.env_kwargs
        )
        return [episode_tokens(self.tokenizer, r) for r in records]

    def train_step(self) -> dict:
        start = time.perf_counter()
        cfg, n = self.cfg, len(self.sequences)
        rows = [self.sequences[self.order[(self.cursor + i) % n]] for i in range(min(cfg.batch, n))]
        self.cursor += len(rows)
        counts = {role: sum(r.count(ROLE_IDS[role]) for _, r in rows) for role in TURN_ROLES}
        trained = [role for role in cfg.roles if counts[role]]
        sums = dict.fromkeys(TURN_ROLES, 0.0)
        policy = self.policy
        policy.train_model.train()
        policy.optimizer.zero_grad()
        for at in range(0, len(rows), cfg.minibatch):
            parts = role_nll(policy.train_model, rows[at : at + cfg.minibatch], self.tokenizer.pad_token_id)
            for role in TURN_ROLES:
                sums[role] += parts[role][0].item()
            if trained:  # the batch's token mean of each trained role, accumulated over minibatches
                policy.accelerator.backward(sum(parts[role][0] / counts[role] for role in trained))
        policy.accelerator.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], 1.0)
        policy.optimizer.step()
        lr = policy.scheduler.get_last_lr()[0]
        policy.scheduler.step()
        self.step += 1
        tokens = sum(len(ids) for ids, _ in rows)
        record: dict[str, Any] = {
            "step": self.step,
            "episodes": len(rows),
            "tokens": tokens,
            "tokens_per_s": tokens / (time.perf_counter() - start),
            "lr": lr,
        }
        for role in TURN_ROLES:
            record[f"loss/{role}"] = sums[role] / counts[role] if counts[role] else None
            record[f"tokens/{role}"] = counts[role]
        return record

    def evaluate(self) -> dict:
        """Per-token loss of each role on the oracle's real episodes of ``eval_tasks`` held-out tasks."""
        self.model.eval()
        losses = held_out_loss(self.model, self.eval_sequences, self.tokenizer.pad_token_id)
        return {f"eval/loss/{role}": value for role, value in losses.items()}
