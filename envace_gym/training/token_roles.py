"""An episode as tokens, each with the role of whoever wrote it: the input of trainers that weigh a
sequence's tokens by their author (the ECHO family, a cross-entropy on environment output beside the
policy loss).

The roles are OpenEnv RFC 010's, plus one of this project's:

- ``context``: what nobody trains: the system prompt, the user's turns, the chat template's own text,
  and a response a separate simulator model wrote;
- ``action``: what the policy wrote as the actor (its replies and tool calls, through their end token);
- ``env_output``: the real environment's responses (a tool that ran, or its recording);
- ``warning``: the env's own message about a call it refused (a schema error, a limit);
- ``env_rehearsed``: a tool response the policy wrote itself (rehearsed dynamics).

``env_rehearsed`` is there so that no trainer takes a rehearsal for real output: each exporter below
leaves it out of every environment-output loss (only :func:`role_weights` trains it, and only where it is
given a weight). :data:`ECHO_EXPORTERS` writes the roles under the field names each ECHO trainer reads.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from numbers import Real

from envace_gym.training.tokens import conversation_tokens, rendered

#: the roles, RFC 010's four and ``env_rehearsed``
TOKEN_ROLES = ("context", "action", "env_output", "warning", "env_rehearsed")
#: the role of a tool message by the source of the call it answers (``CallRecord.source``)
SOURCE_ROLES = {"real": "env_output", "replay": "env_output", "rejected": "warning", "rehearsed": "env_rehearsed"}
#: the roles of the rollout rows that :func:`~envace_gym.training.rollout.collect` builds
ROW_ROLES = {"context": "context", "act": "action", "rehearse": "env_rehearsed", "world": "env_output"}


@dataclass
class RoledTokens:
    """Token ids and the role of each (one of :data:`TOKEN_ROLES`); ValueError naming the field where they
    are not (each exporter checks again, so masks are never of another length than ``ids``)."""

    ids: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """ValueError naming the field unless there is one role of :data:`TOKEN_ROLES` for each id."""
        if len(self.roles) != len(self.ids):
            raise ValueError(f"roles has {len(self.roles)} entries for {len(self.ids)} ids; it needs one for each")
        unknown = set(self.roles) - set(TOKEN_ROLES)
        if unknown:
            raise ValueError(f"roles holds unknown token roles {sorted(map(str, unknown))}; roles are {TOKEN_ROLES}")

    def extend(self, ids: list[int], role: str) -> None:
        if role not in TOKEN_ROLES:
            raise ValueError(f"unknown token role {role!r}; roles are {TOKEN_ROLES}")
        self.ids += ids
        self.roles += [role] * len(ids)


def episode_tokens(
    tokenizer, messages: list[dict], tools: list[dict] | None, sources: Mapping[str, str], opening: int = 0
) -> RoledTokens:
    """The episode's conversation as the chat template renders it, each token with its role. ``sources``:
    each tool call's id and who answered it (an episode's ``CallRecord.source``, a run record's
    ``calls[*].source``). ``opening``: how many messages the env opened with (the system prompt, a
    greeting, a recorded history: :func:`opening_length`), context whoever they name as their author. A
    message the template does not render where it renders the conversation (a template that rewrites
    earlier turns), or a response whose id answers more than one tool message (the env gives each call an
    id of its own; a record made otherwise may not), is left ``context``: no token gets a role it may not
    have, and no rehearsal is ever taken for environment output."""
    text = rendered(tokenizer, messages, tools)  # a message of no chat role is refused here
    answers = Counter(str(m.get("tool_call_id")) for m in messages if m["role"] == "tool")
    roles = {j: "action" for j, m in enumerate(messages) if j >= opening and m["role"] == "assistant"}
    for j, m in enumerate(messages[opening:], opening):
        if m["role"] == "tool":
            key = str(m.get("tool_call_id"))
            roles[j] = SOURCE_ROLES.get(sources.get(key, ""), "context") if answers[key] == 1 else "context"
    out = RoledTokens()
    for ids, role in conversation_tokens(tokenizer, text, messages, tools, roles, closed=False):
        out.extend(ids, role)
    return out


def opening_length(episode) -> int:
    """How many messages an :class:`~envace_gym.core.episode.Episode` opened with: the system prompt and the
    suite's opening messages."""
    return 1 + len(episode.suite.opening_messages(episode.task))


def row_tokens(ids: list[int], row_roles: list[int], role_ids: Mapping[str, int]) -> RoledTokens:
    """A rollout row (:class:`~envace_gym.training.rollout.Rollout`: ``ids``, ``roles`` as numbers of
    ``role_ids``) in these roles (:data:`ROW_ROLES`); ValueError naming the field for a role not among them
    or ``row_roles`` of another length than ``ids``."""
    unknown = set(role_ids) - set(ROW_ROLES)
    if unknown:
        raise ValueError(f"role_ids names unknown row roles {sorted(map(str, unknown))}; they are {tuple(ROW_ROLES)}")
    names = {number: ROW_ROLES[name] for name, number in role_ids.items()}
    strays = {r for r in row_roles if r not in names}
    if strays:
        raise ValueError(f"row_roles holds role numbers {sorted(map(str, strays))} that role_ids does not name")
    if len(row_roles) != len(ids):
        raise ValueError(f"row_roles has {len(row_roles)} entries for {len(ids)} ids; it needs one for each")
    return RoledTokens(list(ids), [names[r] for r in row_roles])


def echo_mask(tokens: RoledTokens, start: int = 0) -> list[int]:
    """verl-recipe echo's ``aux_token_loss_mask`` over the tokens from ``start`` (its response): 1 on the
    tokens its auxiliary cross-entropy trains, the real environment's output, 0 elsewhere (a rehearsal
    included)."""
    return [int(role == "env_output") for role in _from(tokens, start)]


def trl_env_mask(tokens: RoledTokens, start: int = 0) -> list[int]:
    """TRL ``GRPOTrainer``'s ``env_mask`` over the completion (the tokens from ``start``): 1 on the
    policy's own tokens, actions and rehearsals, which its loss trains; 0 on what the environment, the
    user and the template wrote."""
    return [int(role in ("action", "env_rehearsed")) for role in _from(tokens, start)]


def _from(tokens: RoledTokens, start: int) -> list[str]:
    """The roles from ``start``, once ``tokens`` and ``start`` are checked (ValueError naming the field)."""
    tokens.check()
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= len(tokens.ids):
        raise ValueError(f"start must be a whole number from 0 to {len(tokens.ids)} (the ids), got {start!r}")
    return tokens.roles[start:]


def prime_rl_echo(tokens: RoledTokens, alpha: float = 0.1) -> dict[str, list]:
    """prime-rl's ECHO (``algorithm.type = "echo"``) over a sample's tokens: ``ce_weights``, the per-token
    weight of its ``ce`` loss (``alpha``, its ``roles.tool.alpha`` default, on the real environment's
    output; 0 elsewhere), and ``echo_filter_mask``, the keep-mask its echo ``filter`` returns for the
    sample: prime-rl picks tokens by chat role, and a rehearsed or refused call's response is a ``tool``
    message too; this mask keeps only ``env_output``. ``alpha``: a finite number above 0 (ValueError)."""
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha must be a finite number above 0, got {alpha!r}")
    real = [role == "env_output" for role in _from(tokens, 0)]
    return {"ce_weights": [float(alpha) if keep else 0.0 for keep in real], "echo_filter_mask": real}


def verl_echo(tokens: RoledTokens, start: int = 0) -> dict[str, list[int]]:
    """verl-recipe echo's field of its agent loop output (``EchoAgentLoopOutput``) over the response (the
    tokens from ``start``): ``aux_token_loss_mask`` (:func:`echo_mask`)."""
    return {"aux_token_loss_mask": echo_mask(tokens, start)}


def rllm_echo(tokens: RoledTokens, start: int = 0) -> dict[str, list[int]]:
    """rLLM's ECHO (``adv_estimator=echo``, its ``env_prediction`` term) over the response (the tokens
    from ``start``): ``action_mask``, the policy's own tokens that its policy loss trains, and
    ``obs_mask``, the observation tokens of its cross-entropy: the real environment's output only."""
    return {"action_mask": trl_env_mask(tokens, start), "obs_mask": echo_mask(tokens, start)}


def trl_echo(tokens: RoledTokens, start: int = 0, observation: bool | None = None) -> dict[str, list[int]]:
    """TRL ``GRPOTrainer``'s fields of a ``rollout_func`` over the completion (the tokens from ``start``):
    ``env_mask`` (:func:`trl_env_mask`) and ``tool_observation_mask``, the tokens of TRL's tool-observation
    loss (``GRPOConfig.tool_observation_loss_weight``): the real environment's output. ``observation``:
    whether to export ``tool_observation_mask``; None: where the installed TRL knows the field
    (:func:`trl_knows_tool_observation`)."""
    out = {"env_mask": trl_env_mask(tokens, start)}
    if observation or (observation is None and trl_knows_tool_observation()):
        out["tool_observation_mask"] = echo_mask(tokens, start)
    return out


@cache
def trl_knows_tool_observation() -> bool:
    """Whether the installed TRL's ``GRPOConfig`` has ``tool_observation_loss_weight`` (TRL's pull request
    5832; TRL 1.16 has not); False without TRL."""
    try:
        from trl import GRPOConfig
    except ImportError:
        return False
    return "tool_observation_loss_weight" in {f.name for f in fields(GRPOConfig)}


#: each ECHO trainer's exporter, by the trainer's name
ECHO_EXPORTERS = {"prime-rl": prime_rl_echo, "verl-recipe": verl_echo, "rllm": rllm_echo, "trl": trl_echo}


def role_weights(tokens: RoledTokens, weights: Mapping[str, float]) -> list[float]:
    """A per-token loss weight by role, for role-weighted losses (prime-rl's, verifiers'): e.g.
    ``{"action": 1.0, "env_output": 0.1}``; a role not named weighs 0, so a rehearsal is trained only
    where ``env_rehearsed`` is given a weight of its own. Each weight is a finite number (ValueError naming
    the role otherwise)."""
    tokens.check()
    unknown = set(weights) - set(TOKEN_ROLES)
    if unknown:
        raise ValueError(f"unknown token roles {sorted(map(str, unknown))}; roles are {TOKEN_ROLES}")
    for role, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, Real) or not math.isfinite(weight):
            raise ValueError(f"weights[{role!r}] must be a finite number, got {weight!r}")
    return [float(weights.get(role, 0.0)) for role in tokens.roles]
