"""VitaBench's rubric evaluation as a reward (source ``vitabench``), on any OpenAI-compatible judge.

The evaluator is VitaBench's own ``TrajectoryEvaluator.calculate_reward``: its
sliding-window prompt (windows of 10 messages overlapping by 2), rubric states carried
from window to window, its lenient parse of the judge's per-rubric list (``json_repair``),
and reward 1 only when every rubric is met. Only the model call is envace-gym's: in a
thread where a :class:`VitaBenchReward` is judging, the evaluator's ``generate`` sends its
messages to the judge's :class:`~envace_gym.openai_client.ChatEndpoint`, and its progress prints
are kept quiet; everywhere else VitaBench's evaluator runs as it always does. With ``structured=1``
the request also carries the reply's format, VitaBench's per-rubric list, as a JSON schema
(``response_format``), which a server with structured outputs (vLLM's) holds the judge to: a small
judge then replies with verdicts it would otherwise not write.
"""

from __future__ import annotations

import builtins
import threading

from envace_gym.core.episode import Episode
from envace_gym.core.errors import ErrorCode
from envace_gym.openai_client import ChatEndpoint
from envace_gym.specs import parse_spec
from envace_gym.suites.vitabench.source import LANGUAGE, judge_options, load

load()

from vita.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage  # noqa: E402
from vita.data_model.tasks import RewardType  # noqa: E402
from vita.evaluator import evaluator_traj  # noqa: E402
from vita.evaluator.evaluator_traj import TrajectoryEvaluator  # noqa: E402
from vita.utils.llm_utils import format_messages  # noqa: E402
from vita.utils.utils import evaluator_extracter  # noqa: E402

_local = threading.local()
_vita_generate = evaluator_traj.generate

#: The longest judge reply that is parsed (characters): VitaBench's verdict lists (25 rubrics at most in
#: its task files) are a few KB, and its lenient parse (``json_repair``) takes time quadratic in the reply.
MAX_VERDICT_CHARS = 32_000
#: The most brackets and quotes (``[{"'``) a parsed reply may hold: the parse's quadratic term, which a
#: reply under :data:`MAX_VERDICT_CHARS` made of them alone would still make a minute long.
MAX_VERDICT_MARKS = 2_048
_MARKS = frozenset("[{\"'")
#: A verdict's fields as VitaBench's prompt asks for them, and the type each must have when present.
_VERDICT_FIELDS = {"rubric_idx": str, "justification": str, "meetExpectation": bool}


class MalformedJudgement(ValueError):
    """The judge's reply to one window is not a list of per-rubric verdicts."""

    def __init__(self, judge: str, window: int, reply: str, why: str = "is not a list of rubric verdicts"):
        super().__init__(f"judge {judge}: its reply to window {window} {why}")
        self.reply = reply


def _verdicts_fault(text: str) -> str | None:
    """Why ``text`` is no list of verdicts VitaBench's evaluator can take, or None; it is bounded
    (:data:`MAX_VERDICT_CHARS`, :data:`MAX_VERDICT_MARKS`) before VitaBench's lenient parse sees it."""
    if len(text) > MAX_VERDICT_CHARS:
        return f"is {len(text)} characters, over the {MAX_VERDICT_CHARS} that are parsed"
    if sum(c in _MARKS for c in text) > MAX_VERDICT_MARKS:
        return f"holds over {MAX_VERDICT_MARKS} brackets and quotes, more than are parsed"
    try:
        verdicts = evaluator_extracter(text)
    except (ValueError, RecursionError):
        verdicts = None
    if not isinstance(verdicts, list) or not all(isinstance(v, dict) for v in verdicts):
        return "is not a list of rubric verdicts"
    for i, verdict in enumerate(verdicts):
        for field, kind in _VERDICT_FIELDS.items():
            if field in verdict and not isinstance(verdict[field], kind):
                return f"gives verdict {i} a {field} of {verdict[field]!r:.40}, not a {kind.__name__}"
    return None


def _generate(model, messages, **kwargs):
    judge = getattr(_local, "judge", None)
    return judge.ask(messages) if judge is not None else _vita_generate(model, messages, **kwargs)


def _print(*args, **kwargs):
    if getattr(_local, "judge", None) is None:
        builtins.print(*args, **kwargs)


evaluator_traj.generate, evaluator_traj.print = _generate, _print


def verdict_format(keys: list[str]) -> dict:
    """The reply VitaBench's prompt asks for, a verdict for each rubric (``keys``: VitaBench's ``rubric_N``),
    as a ``response_format``."""
    verdict = {
        "type": "object",
        "properties": {
            "rubric_idx": {"enum": keys},
            "justification": {"type": "string"},
            "meetExpectation": {"type": "boolean"},
        },
        "required": ["rubric_idx", "justification", "meetExpectation"],
        "additionalProperties": False,
    }
    schema = {"type": "array", "items": verdict, "minItems": len(keys), "maxItems": len(keys)}
    return {"type": "json_schema", "json_schema": {"name": "rubric_verdicts", "schema": schema}}


def vita_trajectory(episode: Episode) -> list:
    """The episode (after its system prompt) as VitaBench's messages; a tool message carries
    VitaBench's own result text where the world answered, else the episode's content."""
    records = {c.position: c for c in episode.calls if c.requestor == "assistant"}
    out = []
    for i, m in enumerate(episode.messages[1:], start=1):
        if m["role"] == "assistant":
            calls = [
                ToolCall(
                    id=c["id"],
                    name=c["function"]["name"],
                    arguments=c["function"]["arguments"] if isinstance(c["function"]["arguments"], dict) else {},
                )
                for c in m.get("tool_calls", [])
            ]
            out.append(AssistantMessage(role="assistant", content=m.get("content") or None, tool_calls=calls or None))
        elif m["role"] == "user":
            out.append(UserMessage(role="user", content=m["content"]))
        elif m["role"] == "tool":
            record = records.get(i)
            native = record.native if record is not None and isinstance(record.native, str) else m["content"]
            out.append(
                ToolMessage(id=m["tool_call_id"], name=m["name"], role="tool", content=native, requestor="assistant")
            )
    return out


class VitaBenchReward:
    """VitaBench's rubric judge on any OpenAI-compatible server (``reward="vitabench:MODEL@BASE_URL"``,
    with the ``timeout``, ``max_retries`` and ``max_reply_bytes`` options of a ``judge:`` spec, and
    ``max_tokens`` and ``structured``: ``vitabench:MODEL@BASE_URL?structured=1&max_tokens=512``).

    ``reward_info`` holds each rubric's verdict, the share met (``rubrics_met``), the number of
    windows and the model. A reply that is not a list of verdicts (a boolean ``meetExpectation`` each),
    or one over :data:`MAX_VERDICT_CHARS` or :data:`MAX_VERDICT_MARKS`, gives 0 with a
    ``malformed_judgement`` error naming the judge; a server that cannot be reached raises
    :class:`~envace_gym.openai_client.ModelServerError` (the env keeps the episode and reports it).
    """

    __name__ = "vitabench"

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str = "EMPTY",
        temperature: float = 0.0,
        max_tokens: int | None = None,
        structured: bool = False,
        **endpoint,
    ):
        self.endpoint = ChatEndpoint(base_url, model, api_key, **endpoint)
        self.sampling = {"temperature": temperature, **({"max_tokens": max_tokens} if max_tokens else {})}
        self.structured = bool(structured)

    @classmethod
    def from_spec(cls, spec: str) -> VitaBenchReward:
        spec, own = judge_options(spec)
        model, base_url, options = parse_spec(spec, "vitabench:")
        return cls(model, base_url, **options, **own)

    def ask(self, messages: list) -> AssistantMessage:
        """One window's judgement (VitaBench's evaluator calls it as its ``generate``)."""
        _local.windows += 1
        extra = {"response_format": _local.format} if _local.format else {}
        text = self.endpoint.chat(format_messages(messages), **self.sampling, **extra).content or ""
        fault = _verdicts_fault(text)
        if fault is not None:
            raise MalformedJudgement(f"{self.endpoint.model}@{self.endpoint.base_url}", _local.windows, text, fault)
        return AssistantMessage(role="assistant", content=text)

    def __call__(self, episode: Episode) -> tuple[float, dict]:
        criteria = episode.task.data.evaluation_criteria
        keys = list(TrajectoryEvaluator._initialize_rubric_states(criteria)) if self.structured and criteria else []
        _local.judge, _local.windows, _local.format = self, 0, verdict_format(keys) if keys else None
        try:
            result = TrajectoryEvaluator.calculate_reward(
                task=episode.task.data,
                full_trajectory=vita_trajectory(episode),
                final_state={},
                llm_evaluator=self.endpoint.model,
                llm_args_evaluator={},
                language=LANGUAGE,
            )
        except MalformedJudgement as e:
            return 0.0, {
                "error": {"code": str(ErrorCode.MALFORMED_JUDGEMENT), "message": str(e)},
                "reply": e.reply[:500],
            }
        finally:
            _local.judge = None
        rubrics = [
            {"rubric": c.nl_rubric, "met": bool(c.met), "justification": c.justification}
            for c in result.nl_rubrics or []
        ]
        share = (result.reward_breakdown or {}).get(RewardType.NL_ASSERTION, result.reward)
        return float(result.reward), {
            "rubrics": rubrics,
            "rubrics_met": share,
            "windows": (result.info or {}).get("num_windows", 0),
            "model": self.endpoint.model,
        }
