"""BFCL v4 format sensitivity: 200 single-turn entries, each asked in bfcl-eval's 26 prompt formats.

bfcl-eval runs this category for prompting models only. Its system prompt lists the
functions (as Python, XML or JSON) and names the form of the answer: Python calls, a
JSON list, verbose or concise XML, inside ``<TOOLCALL>`` tags or not. So the agent is
shown no tools: it answers in text, which bfcl-eval's decoder for that form reads and
its AST checker scores. A task id is bfcl-eval's, ``format_sensitivity_<n>:<format>:<entry id>``.

The category is not part of the leaderboard's overall: bfcl-eval reports the spread of
the accuracies of the formats (:func:`format_sensitivity_score`).
"""

from __future__ import annotations

import ast
import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from functools import cache, cached_property, lru_cache, partial
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from envace_gym.suites.bfcl import categories, source  # source first: it points bfcl-eval's config at the cache

# isort: split
from bfcl_eval.constants.enums import Language, ReturnFormat
from bfcl_eval.model_handler.utils import (
    ast_parse,
    parse_prompt_variation_params,
    system_prompt_pre_processing_chat_model,
)
from bfcl_eval.utils import (
    extract_prompt_format_from_id,
    get_all_format_sensitivity_configs,
    is_function_calling_format_output,
    load_format_sensitivity_ground_truth_entry,
    load_format_sensitivity_test_cases,
)

from envace_gym.core.episode import Episode, Task
from envace_gym.core.grader import Grader
from envace_gym.core.limits import BudgetExceeded, run_isolated
from envace_gym.core.messages import CLOSE_CALL, OPEN_CALL, format_tool_call
from envace_gym.core.suite import World
from envace_gym.core.tools import ToolSet
from envace_gym.suites.bfcl.single_turn import (
    CHECKER_MODEL,
    NO_TOOL,
    NoBackend,
    SingleTurnSuite,
    _first_choices,
    checker_info,
)

CATEGORY = categories.FORMAT_SENSITIVITY
NO_TOOLS = ToolSet([])
# bfcl-eval's decoders search with regular expressions that backtrack: its JSON one exponentially in
# the objects after commas, and both its JSON and XML ones quadratically in opening brackets or tags.
# An answer whose bound on their steps is over this is decoded in a child process, bounded
DECODE_STEPS = 200_000
DECODE_SECONDS, DECODE_MEMORY = 10.0, 1 << 30
OBJECT_AFTER_COMMA = re.compile(r",\s*\{")
OPEN_TAG, CLOSE_TAG = "<TOOLCALL>", "</TOOLCALL>"
# bfcl-eval evaluates arithmetic in Python answers: at most this many operations, and a value of at most
# this many bits (a larger one, an int over 4,300 digits, is one its checker cannot even print)
MAX_OPERATIONS, MAX_BITS = 100, 4096
XML_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    list: "array",
    dict: "dict",
    type(None): "null",
}


@cache
def cases() -> dict[str, tuple[dict, list]]:
    """bfcl-eval's entries of the category and their ground truths, by id (read once)."""
    entries, truths = load_format_sensitivity_test_cases(), load_format_sensitivity_ground_truth_entry()
    assert all(e["id"].split(":")[-1] == t["id"] for e, t in zip(entries, truths, strict=True))
    return {e["id"]: (e, t["ground_truth"]) for e, t in zip(entries, truths)}


def answer_format(task_id: str) -> tuple[str, bool]:
    """The return format an entry asks for (``python``, ``json``, ``verbose_xml``, ``concise_xml``)
    and whether it goes inside ``<TOOLCALL>`` tags."""
    return_format, tagged, *_ = parse_prompt_variation_params(extract_prompt_format_from_id(task_id))
    return return_format, tagged


@lru_cache(maxsize=256)
def prompt_messages(task_id: str) -> tuple[dict, ...]:
    """The entry's messages with bfcl-eval's system prompt for its format, as its prompting handlers send them."""
    entry, _ = cases()[task_id]
    messages = json.loads(json.dumps(entry["question"][0]))
    return tuple(system_prompt_pre_processing_chat_model(messages, entry["function"], task_id))


def _number(node: ast.AST) -> int | float | None:
    """A numeric literal's value, a sign before it allowed."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(node.operand)
        return None if value is None else -value if isinstance(node.op, ast.USub) else value
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) else None


def _bits(node: ast.AST) -> float | None:
    """A bound on the bits of the value of small arithmetic on literals (0 for a string), None for any
    other expression (bfcl-eval ``eval``s each binary operation)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return 0.0
    if (value := _number(node)) is not None:
        return math.log2(abs(value) + 1)
    if not isinstance(node, ast.BinOp):
        return None
    if isinstance(node.op, ast.Pow):  # a literal base and a small literal exponent
        base, exponent = _number(node.left), _number(node.right)
        if base is None or exponent is None or abs(base) > 10**9 or abs(exponent) > 100:
            return None
        return abs(exponent) * math.log2(abs(base) + 1)
    strings = any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in (node.left, node.right))
    numeric = isinstance(node.op, (ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)) and not strings
    if not (isinstance(node.op, ast.Add) or numeric):
        return None
    left, right = _bits(node.left), _bits(node.right)
    return None if left is None or right is None else left + right + 1  # a sum, product, int quotient, remainder


def _arithmetic(node: ast.AST) -> bool:
    """Whether a Python expression is small arithmetic on literals, its value at most ``MAX_BITS`` bits."""
    bits = _bits(node)
    return bits is not None and bits <= MAX_BITS


def _tagged_body(text: str) -> str | None:
    """What the first ``<TOOLCALL>`` tag closed after it holds, as bfcl-eval's lazy pattern finds it,
    in one scan (the pattern takes quadratic time over unclosed tags); None without one."""
    start = text.find(OPEN_TAG)
    end = -1 if start == -1 else text.find(CLOSE_TAG, start + len(OPEN_TAG))
    return None if end == -1 else text[start + len(OPEN_TAG) : end]


def decoder_input(text: str, tagged: bool) -> str | None:
    """The text bfcl-eval's decoder for a format parses (None where it finds no ``<TOOLCALL>`` tag):
    the answer stripped, in brackets, then what its tag holds."""
    text = text.strip("`\n ")
    text = ("" if text.startswith("[") else "[") + text + ("" if text.endswith("]") else "]")
    if not tagged:
        return text
    body = _tagged_body(text)
    return None if body is None else body.strip()


def unsafe_expression(text: str, tagged: bool) -> str | None:
    """The first binary operation in a Python-form answer that is not small arithmetic on literals
    (all of it past ``MAX_OPERATIONS`` operations), found as bfcl-eval's decoder finds the expression;
    None if there is none."""
    body = decoder_input(text, tagged)
    if body is None:
        return None
    body = body.strip().strip("'")
    try:
        tree = ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None  # bfcl-eval's decoder fails on it before it evaluates anything
    operations = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp)]
    try:
        too_many = len(operations) > MAX_OPERATIONS
        unsafe = operations[0] if too_many else next((n for n in operations if not _arithmetic(n)), None)
    except RecursionError:  # a deep chain of signs
        unsafe = operations[0]
    return None if unsafe is None else (ast.get_source_segment(body, unsafe) or "")[:200]


def decode_steps(text: str, return_format: str) -> int:
    """A bound on the steps bfcl-eval's regular expressions take on a decoder's input: its JSON
    decoder's tries each ``[``, then for each of those each subset of the objects after commas, each
    over the text; its XML decoders' each ``<functions>`` tag."""
    if return_format == "json":
        objects = sum(1 for _ in OBJECT_AFTER_COMMA.finditer(text))
        return (text.count("[") + 1) * len(text) << min(objects, 64)
    if return_format.endswith("xml"):
        return (text.count("<functions>") + 1) * len(text)
    return 0


def verdict(task_id: str, text: str) -> dict:
    """bfcl-eval's verdict on an answer's text: its prompting decoder for the entry's format, then its
    AST checker on the entry's own category (as its format-sensitivity runner scores it)."""
    entry, truth = cases()[task_id]
    return_format, tagged = answer_format(task_id)
    failed = {"valid": False, "error_type": "ast_decoder:decoder_failed"}
    body = decoder_input(text, tagged)
    if body is None:
        return failed | {"error": [f"Invalid syntax. Failed to decode AST. No {OPEN_TAG} tag found."]}
    if return_format == "python" and (expression := unsafe_expression(text, tagged)):
        return failed | {"error": [f"envace-gym evaluates only small arithmetic on literals, not {expression!r}"]}
    decode = partial(ast_parse, body, ReturnFormat(return_format))
    try:
        if decode_steps(body, return_format) > DECODE_STEPS:
            decoded = run_isolated(decode, DECODE_SECONDS, DECODE_MEMORY)
        else:
            decoded = decode()
    except BudgetExceeded:
        return failed | {"error": [f"decoding ran past {DECODE_SECONDS} s"]}
    except Exception as e:
        return failed | {"error": [f"Invalid syntax. Failed to decode AST. {type(e).__name__}: {e}"[:500]]}
    if not is_function_calling_format_output(decoded):
        return {"valid": False, "error_type": "ast_decoder:decoder_wrong_output_format"}
    result = source.ast_checker()(
        entry["function"], decoded, truth, Language.PYTHON, task_id.split(":")[-1], CHECKER_MODEL
    )
    return checker_info(result)


def _xml_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else value if isinstance(value, str) else repr(value)


def answer_text(calls: list[tuple[str, dict]], return_format: str, tagged: bool) -> str:
    """Calls (BFCL names, argument values) written in one of bfcl-eval's return formats."""
    if return_format == "python":
        body = "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls) + "]"
    elif return_format == "json":
        body = json.dumps([{"function": n, "parameters": a} for n, a in calls])
    else:
        verbose = return_format == "verbose_xml"
        functions = []
        for name, arguments in calls:
            params = []
            for key, value in arguments.items():
                kind, text = XML_TYPES.get(type(value), "string"), _xml_value(value)
                if verbose:
                    params.append(f"<param name={quoteattr(key)} value={quoteattr(text)} type={quoteattr(kind)}/>")
                else:
                    params.append(f"<param name={quoteattr(key)} type={quoteattr(kind)}>{escape(text)}</param>")
            inner = f"<params>{''.join(params)}</params>" if verbose else "".join(params)
            functions.append(f"<function name={quoteattr(name)}>{inner}</function>")
        body = f"<functions>{''.join(functions)}</functions>"
    return f"<TOOLCALL>{body}</TOOLCALL>" if tagged else body


class FormatSensitivitySuite(SingleTurnSuite):
    """The category's 5,200 entries. Build it with :func:`format_sensitivity_suite`."""

    def __reduce__(self):
        return format_sensitivity_suite, ()

    def __init__(self):
        self.category = self.name = CATEGORY
        self._raw = {task_id: entry for task_id, (entry, _) in cases().items()}
        self._toolsets = {}

    def tools(self, task: Task) -> ToolSet:
        """None: the functions are in the system prompt, in the entry's format."""
        return NO_TOOLS

    def _messages(self, task: Task) -> list[dict]:
        return list(prompt_messages(task.id))

    def system_prompt(self, task: Task) -> str:
        """bfcl-eval's prompt for the entry's format, the entry's own system message after it."""
        return self._messages(task)[0]["content"]

    @cached_property
    def grader(self) -> FormatSensitivityGrader:  # type: ignore[override]
        return FormatSensitivityGrader(self)


class FormatSensitivityGrader(Grader):
    """bfcl-eval's verdict on the answer's text, and the gold calls written in the entry's format."""

    def evaluate(self, task: Task, world: World, episode: Episode) -> tuple[float, dict]:
        """The verdict on the agent's text. The env takes ``<tool_call>`` blocks (not a format asked
        for) out of it: they go back, at its end, for the decoder to read as bfcl-eval's would, a
        malformed one as the agent wrote it."""
        message: dict = next((m for m in reversed(episode.messages) if m["role"] == "assistant"), {})
        text = (message.get("content") or "") + "".join(
            f"{OPEN_CALL}{c['text']}{CLOSE_CALL}"
            if "text" in c
            else format_tool_call(c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls") or []
        )
        result = verdict(task.id, text)
        return float(result["valid"]), result

    def score_actions(self, task: Task, episode: Episode) -> tuple[float, dict]:
        return self.evaluate(task, NoBackend(), episode)

    def gold_calls(self, task: Task) -> list[dict]:
        """The first acceptable value of every parameter, under BFCL's function names."""
        _, truth = cases()[task.id]
        calls = [next(iter(answer.items())) for answer in truth]
        return [{"name": n, "arguments": _first_choices(p), "requestor": "assistant"} for n, p in calls]

    def oracle_plan(self, task: Task) -> list[Any]:
        calls = [(c["name"], c["arguments"]) for c in self.gold_calls(task)]
        return [answer_text(calls, *answer_format(task.id)) if calls else NO_TOOL]


@cache
def format_sensitivity_suite() -> FormatSensitivitySuite:
    """The process-wide suite of the category (its entries are read once)."""
    return FormatSensitivitySuite()


def format_sensitivity_score(rewards_by_task: Mapping[str, float | Sequence[float]]) -> dict:
    """bfcl-eval's format-sensitivity report from each task's reward(s), on a 0-100 scale.

    As its format-sensitivity runner computes it: the accuracy of each format played, then over
    those formats the largest difference (``max_delta``), the sample variance and standard
    deviation (``variance``, ``std``), each rounded to 2 places, 0 with fewer than two formats.
    Its leaderboard's table shows ``max_delta``, ``std`` and every format's accuracy in the order
    of ``get_all_format_sensitivity_configs`` (``None`` here, "N/A" there, for a format not
    played); ``accuracy``, over all tasks, is only in its score file. None of it is in the overall.
    """
    correct: dict[str, float] = {}
    total: dict[str, int] = {}
    for task_id, rewards in rewards_by_task.items():
        config = extract_prompt_format_from_id(task_id)
        for reward in [rewards] if isinstance(rewards, (int, float)) else rewards:
            correct[config] = correct.get(config, 0.0) + reward
            total[config] = total.get(config, 0) + 1
    accuracies = {config: correct[config] / total[config] for config in total}
    values = list(accuracies.values())
    spread = len(values) > 1
    return {
        "accuracy": 100 * sum(correct.values()) / sum(total.values()) if total else None,
        "max_delta": round((max(values) - min(values)) * 100, 2) if spread else 0.0,
        "variance": round(statistics.variance(values) * 100**2, 2) if spread else 0.0,
        "std": round(statistics.stdev(values) * 100, 2) if spread else 0.0,
        "configs": {c: 100 * accuracies[c] if c in accuracies else None for c in get_all_format_sensitivity_configs()},
    }
