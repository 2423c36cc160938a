"""bfcl-eval's own verdicts on envace-gym episodes (its multi-turn checker and its AST path).

bfcl-eval re-executes call strings with ``eval``: here that only ever sees
strings this module writes from schema-checked JSON arguments.
"""

from __future__ import annotations

import itertools

from bfcl_eval.constants.enums import Language  # noqa: E402
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils  # noqa: E402
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker  # noqa: E402
from bfcl_eval.model_handler.utils import default_decode_ast_prompting  # noqa: E402

from envace_gym.suites.bfcl import source
from envace_gym.suites.bfcl.schemas import tool_name

_run = itertools.count()


def call_text(name: str, arguments: dict) -> str:
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def decoded_turns(episode) -> list[list[list[str]]]:
    """The episode's calls in bfcl-eval's decoded form: turns of steps of call strings."""
    turns: list[list[list[str]]] = []
    for message in episode.messages:
        if message["role"] == "user":
            turns.append([])
        elif message["role"] == "assistant" and message.get("tool_calls"):
            turns[-1].append(
                [call_text(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
            )
    return turns


def multi_turn_verdict(category: str, episode) -> dict:
    """bfcl-eval's ``multi_turn_checker`` on the episode (its instance cache cleaned after)."""
    entry = dict(source.entries(category)[episode.task.id])
    model = f"envace_reference_{next(_run)}"
    turns = decoded_turns(episode)
    gold = source.answers(category)[episode.task.id]
    try:
        if len(turns) != len(gold):
            return {"valid": False, "error_type": "multi_turn:force_terminated"}
        return multi_turn_checker(turns, gold, entry, category, model)
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model)]:
            del vars(multi_turn_utils)[key]


def single_turn_verdict(category: str, episode) -> bool:
    """bfcl-eval's path for a prompting model: decode the Python call text, then its checker."""
    entry = source.entries(category)[episode.task.id]
    names = {tool_name(d["name"]): d["name"] for d in entry["function"]}
    calls = [c for c in episode.calls if c.error != "malformed_call"]
    text = "[" + ", ".join(call_text(names.get(c.name, c.name), c.arguments) for c in calls) + "]"
    try:
        decoded = default_decode_ast_prompting(text) if calls else []
    except Exception:
        decoded = []
    has_call = bool(decoded)
    if "irrelevance" in category:
        return not has_call
    if "relevance" in category:
        return has_call
    result = source.ast_checker()(
        entry["function"], decoded, source.answers(category)[episode.task.id], Language.PYTHON, category, "reference"
    )
    return result["valid"]
