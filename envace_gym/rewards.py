"""Terminal rewards and their provenance (``info["reward_source"]``)."""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal, overload

from envace_gym.core.episode import Episode, recording_key
from envace_gym.core.errors import ErrorCode
from envace_gym.core.messages import parse_rehearsal, transcript
from envace_gym.dynamics import get as get_dynamics
from envace_gym.openai_client import ChatEndpoint, ModelServerError
from envace_gym.specs import parse_spec

#: A reward: an episode in, its score (or the score and its parts) out.
RewardFn = Callable[[Episode], float | tuple[float, dict]]


def world_reward(episode: Episode) -> tuple[float, dict]:
    """The grader's real evaluator on the episode's own world."""
    return episode.suite.grader.evaluate(episode.task, episode.world, episode)


def actions_reward(episode: Episode) -> tuple[float, dict]:
    """Match of the episode's calls against the task's gold actions."""
    grader = episode.suite.grader
    grader.require_gold(episode.task)
    return grader.score_actions(episode.task, episode)


def actions_share_reward(episode: Episode) -> tuple[float, dict]:
    """Partial credit: the share of the task's gold actions the episode's calls matched (1 when
    it has none), from :meth:`~envace_gym.core.grader.Grader.score_actions`' ``action_checks``; a grader
    whose match has no per-action checks (BFCL's single-turn verdict) gives its 0 or 1."""
    value, parts = actions_reward(episode)
    checks = parts.get("action_checks")
    if checks is None:
        share = value
    else:
        share = sum(c["met"] for c in checks) / len(checks) if checks else 1.0
    return share, {**parts, "actions_share": share}


def progress_reward(episode: Episode) -> tuple[float, dict]:
    """Partial credit from the transcript and the task alone (no world, so it works under every
    dynamics): the mean of ``actions_share`` and the share of the task's communicate items stated
    (:meth:`~envace_gym.core.grader.Grader.communicate_checks`); ``actions_share`` alone for a task with none.
    It is 1 on an episode that makes every gold call and says every item, below 1 otherwise."""
    share, parts = actions_share_reward(episode)
    checks = episode.suite.grader.communicate_checks(episode.task, episode)
    said = sum(c["met"] for c in checks) / len(checks) if checks else None
    value = share if said is None else (share + said) / 2
    return value, {**parts, "communicate_share": said, "communicate_checks": checks, "progress": value}


def strict_progress_reward(episode: Episode) -> tuple[float, dict]:
    """``progress`` whose calls' share also counts what should not have been called: gold calls
    matched over gold calls plus the agent's executed calls that matched none (``hits / (gold +
    extra)``), since a wrong or extra write fails tau2's database check. Equal to ``progress`` on an
    episode without extra calls, so 1 on a gold episode."""
    progress, parts = progress_reward(episode)
    if parts.get("action_checks") is None:  # a grader without per-call checks (BFCL single-turn): progress
        strict = {"strict_share": parts["actions_share"], "extra_calls": 0, "strict_progress": progress}
        return progress, {**parts, **strict}
    checks = parts["action_checks"]
    hits = sum(c["met"] for c in checks)
    extra = max(0, sum(c.ran and c.requestor == "assistant" for c in episode.calls) - hits)
    share = hits / (len(checks) + extra) if checks or extra else 1.0
    said = parts["communicate_share"]
    value = share if said is None else (share + said) / 2
    return value, {**parts, "strict_share": share, "extra_calls": extra, "strict_progress": value}


def replay_reward(episode: Episode) -> tuple[float, dict]:
    """The episode's calls executed on a fresh world afterwards, then evaluated."""
    return episode.suite.grader.evaluate(episode.task, episode.replayed_world(), episode)


def _assistant_calls(episode: Episode) -> list[list]:
    """The assistant's calls of the episode, grouped by the message that made them (a
    message's calls are one parallel group), each call as ``(name, canonical arguments)``."""
    starts = [i for i, m in enumerate(episode.messages) if m.get("role") == "assistant"]
    groups: dict[int, list] = {}
    for call in episode.calls:
        if call.requestor == "assistant":
            message = starts[bisect.bisect_left(starts, call.position) - 1]
            groups.setdefault(message, []).append(recording_key(call.name, call.arguments))
    return [groups[k] for k in sorted(groups)]


def _gold_groups(episode: Episode) -> list[list]:
    """The task's gold assistant calls grouped by their ``step`` (each its own step without one)."""
    groups: dict = {}
    for i, call in enumerate(episode.suite.grader.gold_calls(episode.task)):
        if call["requestor"] == "assistant":
            groups.setdefault(call.get("step", i), []).append(recording_key(call["name"], call["arguments"]))
    return list(groups.values())


def tool_f1_reward(episode: Episode) -> tuple[float, dict]:
    """FinMCP-Bench's tool F1: precision and recall of the assistant's tool names against the
    gold calls' names, as multisets (1 when both are empty). :func:`tool_f1_summary` pools
    episodes (micro) or averages them (macro)."""
    made = Counter(name for group in _assistant_calls(episode) for name, _ in group)
    gold = Counter(name for group in _gold_groups(episode) for name, _ in group)
    hits = sum((made & gold).values())
    counts = {"hits": hits, "made": sum(made.values()), "gold": sum(gold.values())}
    parts = {**counts, **_f1(**counts)}
    return parts["f1"], {"tool_f1": parts}


def _f1(hits: float, made: float, gold: float) -> dict:
    precision = hits / made if made else float(not gold)
    recall = hits / gold if gold else float(not made)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def tool_f1_summary(reward_infos: list[dict]) -> dict:
    """Micro (counts pooled over episodes) and macro (per-episode scores averaged) tool
    precision, recall and F1 from episodes' ``reward_info`` of the ``tool_f1`` reward."""
    parts = [info["tool_f1"] for info in reward_infos]
    if not parts:
        raise ValueError("tool_f1_summary needs at least one episode scored with reward='tool_f1'")
    pooled = {k: sum(p[k] for p in parts) for k in ("hits", "made", "gold")}
    macro = {k: sum(p[k] for p in parts) / len(parts) for k in ("precision", "recall", "f1")}
    return {"micro": _f1(**pooled), "macro": macro, "episodes": len(parts)}


def call_match_reward(episode: Episode) -> tuple[float, dict]:
    """FinMCP-Bench's exact match (EMR): 1 when the assistant's call groups equal the gold
    steps one for one, in order, each group the same calls (names and arguments) in any order."""
    made, gold = _assistant_calls(episode), _gold_groups(episode)
    matched = 0
    for made_group, gold_group in zip(made, gold):
        if Counter(made_group) != Counter(gold_group):
            break
        matched += 1
    exact = float(matched == len(made) == len(gold))
    return exact, {
        "call_match": {"exact": exact, "matched_steps": matched, "steps": len(gold), "made_groups": len(made)}
    }


REWARDS: dict[str, RewardFn] = {
    "world": world_reward,
    "actions": actions_reward,
    "actions_share": actions_share_reward,
    "progress": progress_reward,
    "strict_progress": strict_progress_reward,
    "replay": replay_reward,
    "tool_f1": tool_f1_reward,
    "call_match": call_match_reward,
}

JUDGE_INSTRUCTION = (
    "You grade one episode of an assistant that works with tools. You are given what the task "
    "required and the episode's messages. Reply with one JSON object and nothing else: "
    '{"score": a number from 0 (failed) to 1 (fully done), "reason": one short sentence}.'
)


class JudgeReward:
    """An LLM judge on any OpenAI-compatible server (``reward="judge:MODEL@BASE_URL"``).

    The judge sees the grader's success criteria and the episode (system prompt left
    out); its reply is data: one bounded JSON object whose ``score`` must be a number
    in [0, 1], else the reward is 0 with a ``malformed_judgement`` error. ``endpoint``
    options (``timeout``, ``max_retries``, ``max_reply_bytes``) go to the
    :class:`~envace_gym.openai_client.ChatEndpoint`, and may be given in the spec:
    ``judge:MODEL@BASE_URL?timeout=10&max_retries=1``. A server that cannot be reached
    or answers badly raises :class:`~envace_gym.openai_client.ModelServerError`.
    """

    __name__ = "judge"

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str = "EMPTY",
        max_chars: int = 48_000,
        max_tokens: int = 256,
        **endpoint,
    ):
        self.endpoint = ChatEndpoint(base_url, model, api_key, **endpoint)
        self.max_chars, self.max_tokens = max_chars, max_tokens

    @classmethod
    def from_spec(cls, spec: str) -> JudgeReward:
        model, base_url, options = parse_spec(spec, "judge:")
        return cls(model, base_url, **options)

    def __call__(self, episode: Episode) -> tuple[float, dict]:
        prompt = (
            f"What the task required:\n{episode.suite.grader.criteria(episode.task)}\n\n"
            f"The episode:\n{transcript(episode.messages[1:])[-self.max_chars :]}"
        )
        reply = self.endpoint.chat(
            [{"role": "system", "content": JUDGE_INSTRUCTION}, {"role": "user", "content": prompt}],
            temperature=0.0,
            max_tokens=self.max_tokens,
        )
        text = reply.content or ""
        value, error = parse_rehearsal(text)
        score = value.get("score") if isinstance(value, dict) else None
        if (
            error is not None
            or isinstance(score, bool)
            or not isinstance(score, (int, float))
            or not 0.0 <= score <= 1.0
        ):
            message = error.message if error else "the judge's reply has no 'score' in [0, 1]"
            return 0.0, {"error": {"code": str(ErrorCode.MALFORMED_JUDGEMENT), "message": message}, "reply": text[:500]}
        return float(score), {
            "judge": {"score": float(score), "reason": str(value.get("reason", ""))[:500], "model": self.endpoint.model}
        }


#: Judges named by a ``PREFIX:MODEL@BASE_URL`` spec, by prefix; a suite's package may add its own.
SPEC_REWARDS: dict[str, Callable[[str], RewardFn]] = {"judge": JudgeReward.from_spec}


@overload
def default_reward(
    suite, dynamics: str, tasks: Sequence, purpose: Literal["episode"] = ..., judge: RewardFn | None = ...
) -> str | RewardFn: ...
@overload
def default_reward(
    suite, dynamics: str, tasks: Sequence, purpose: Literal["run", "train"], judge: RewardFn | None = ...
) -> str | RewardFn | None: ...
def default_reward(
    suite, dynamics: str, tasks: Sequence, purpose: str = "episode", judge: RewardFn | None = None
) -> str | RewardFn | None:
    """The reward where none is given: the one place this is decided (the env, ``run``, ``train`` and
    ``eval`` ask here). ``tasks``: the tasks it will score. By ``purpose``:

    - ``"train"``: ``strict_progress`` where every task has gold (partial credit: an all-or-nothing
      reward rarely varies within a group);
    - ``"run"``: ``replay`` where something other than the world answers the calls, the suite can rebuild
      its world here and every task has gold: the world's own evaluation of the calls after the fact,
      so the mean means what a real run's ``world`` reward means; else ``"episode"``'s where it is the
      same for every task (all have gold, or none has);
    - ``"episode"``: the dynamics' default, or for a task without gold ``judge`` (default: the suite's
      own, where it has one).

    For ``"train"`` and ``"run"``, None leaves the choice to each episode (``"episode"``)."""
    if purpose not in ("episode", "run", "train"):
        raise ValueError(f"unknown purpose {purpose!r}: episode, run or train")
    golds = [suite.grader.has_gold(t) for t in tasks]
    gold = all(golds)
    if purpose == "train":
        return "strict_progress" if gold else None
    if purpose == "run":
        if gold and not get_dynamics(dynamics).all_real and suite.private_worlds:
            return "replay"
        if gold != any(golds):  # some tasks have gold, some not: each episode's own
            return None
    if not gold:
        judge = judge if judge is not None else suite.grader.judge_reward()
    return judge if judge is not None and not gold else get_dynamics(dynamics).default_reward


def resolve_reward(reward: str | RewardFn | None) -> str | RewardFn | None:
    """A reward as the env keeps it: ``judge:MODEL@URL`` becomes a :class:`JudgeReward` (and
    another prefix of :data:`SPEC_REWARDS` its judge)."""
    if isinstance(reward, str):
        prefix, colon, _ = reward.partition(":")
        if colon and prefix in SPEC_REWARDS:
            return SPEC_REWARDS[prefix](reward)
    return reward


def score_episode(reward: str | RewardFn, episode: Episode, info: dict) -> float:
    """An ended episode's terminal reward; its source, parts and ``ended_by`` go into ``info``. A reward
    that fails (a judge that cannot be reached, a failing evaluator, a value that is not a finite number)
    scores 0 with the failure in ``info["error"]``, after what ended the episode."""
    value = 0.0
    try:
        value, info["reward_source"], info["reward_info"] = compute_reward(reward, episode)
    except Exception as e:
        info["reward_source"], info["reward_info"] = getattr(reward, "__name__", reward), {}
        failure = str(e) if isinstance(e, ModelServerError) else f"{type(e).__name__}: {e}"
        info["error"] = f"{info['error']}; the reward failed too: {failure}" if info.get("error") else failure
    info["ended_by"] = episode.ended_by
    return value


def check_reward(reward: str | RewardFn, dynamics: str) -> None:
    if callable(reward):
        return
    if reward not in REWARDS:
        raise ValueError(
            f"unknown reward {reward!r}; use one of {sorted(REWARDS)}, 'judge:MODEL@BASE_URL' or a callable"
        )
    if reward == "world" and not get_dynamics(dynamics).all_real:
        raise ValueError(
            f"reward='world' reads the real world, which {dynamics!r} dynamics never "
            "touch; use reward='replay' or 'actions'"
        )


def compute_reward(reward: str | RewardFn, episode: Episode) -> tuple[float, str, dict]:
    """``(value, source, parts)`` for a finished episode; a value that is not a finite number is a ValueError."""
    source = reward if isinstance(reward, str) else getattr(reward, "__name__", "callable")
    if episode.truncated:
        return 0.0, source, {"note": "episode truncated before it ended"}
    out = (REWARDS[reward] if isinstance(reward, str) else reward)(episode)
    value, parts = out if isinstance(out, tuple) else (out, {})
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"the reward {source!r} is not a finite number: {value}")
    return value, source, parts
