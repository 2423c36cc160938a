"""``environment_factory``: TRL's own tool loop over an envace-gym env, each tool a method of a class made
for the env, each call one env step answered within ``step``."""

from __future__ import annotations

import inspect
import json
import keyword
import re
import warnings
from types import GenericAlias
from typing import Any, Literal, Union

import gymnasium as gym

from envace_gym.core.messages import assistant_message
from envace_gym.dynamics import DYNAMICS
from envace_gym.wrappers import unwrap

# dynamics whose tool responses come out of ``step`` itself, so out of TRL's tool loop
TOOL_LOOP_DYNAMICS = tuple(name for name, d in DYNAMICS.items() if not d.rehearses)

_TYPES: dict[object, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}


class EnvironmentTools:
    """One episode of an envace-gym env as a TRL environment; :func:`environment_factory`
    makes the subclass of a given env, with one method per tool. ``env`` is the env itself
    (its ``unwrapped.episode`` holds the conversation and calls the env saw)."""

    _env_id: str
    _make_kwargs: dict
    _schemas: list[dict]

    def __init__(self):
        self.env = gym.make(self._env_id, **self._make_kwargs)
        self._reward: float | None = None

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> None:
        """Start the episode of the dataset row's ``task_id`` (a random task if None); the row's
        ``prompt`` holds its opening messages, so nothing is appended to them."""
        self.env.reset(seed=seed, options={} if task_id is None else {"task_id": task_id})
        if unwrap(self.env).tools.schemas != self._schemas:
            raise ValueError(
                f"task {task_id!r} of {self._env_id} has other tools than its first task; "
                "environment_factory needs one tool set: use EpisodeRollout"
            )
        self._reward = None

    def get_reward(self) -> float:
        """The env's terminal reward. TRL's tool loop is over when this is called: an episode
        still running ends here (``ended_by="agent_done"``) and is scored as it stands."""
        if self._reward is None:
            self._reward, info = unwrap(self.env).finish("agent_done")
            if "error" in info:  # as in step: a failing evaluator or judge scores 0
                warnings.warn(f"task {info['task_id']}: scored 0: {info['error']}", stacklevel=2)
        return self._reward

    def _reply(self, text: str) -> None:
        """The message that ended TRL's tool loop, added to the episode if it is still running."""
        episode = unwrap(self.env).episode
        assert episode is not None  # TRL's tool loop runs in an episode
        if episode.ended_by is None and text:
            episode.messages.append(assistant_message(text, []))

    def _call(self, name: str, arguments: dict) -> str:
        """One act step holding this call; its response (a tool error included) for TRL."""
        action = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
        }
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            self._reward = reward
        message = obs["messages"][-1]
        if message["role"] != "tool":  # the episode failed: TRL answers the call with this error
            raise RuntimeError(info.get("error") or "the episode has ended")
        return message["content"]


def environment_factory(env_id: str, **make_kwargs: Any) -> type[EnvironmentTools]:
    """The class to pass as ``GRPOTrainer(environment_factory=...)``: each instance plays episodes
    of ``gym.make(env_id, **make_kwargs)``, its public methods are exactly the suite's tools
    (``reset`` and ``get_reward`` aside), and each tool call is one act step of the env.

    The env must answer calls within ``step`` (dynamics ``real``, ``replay`` or ``simulated``)
    and have one tool set for all its tasks (tau2's domains, the mock-gen tasks).
    """
    probe = unwrap(gym.make(env_id, **make_kwargs))
    if probe.suite.one_step:
        raise ValueError(
            f"{env_id} is single-turn (its calls are scored, never run): give GRPOTrainer a reward "
            "function that steps the env with the completion, or use EpisodeRollout"
        )
    if probe.dynamics not in TOOL_LOOP_DYNAMICS:
        raise ValueError(
            f"environment_factory needs dynamics in {TOOL_LOOP_DYNAMICS}, not {probe.dynamics!r}: TRL's "
            "tool loop masks tool responses out of the loss; train rehearsal with EpisodeRollout"
        )
    methods = {}
    for schema in probe.tools.schemas:
        name = schema["function"]["name"]
        if name.startswith("_") or name in ("reset", "get_reward", "env"):
            raise ValueError(f"tool {name!r} of {env_id} cannot be a TRL environment method")
        methods[name] = _tool_method(schema["function"])
    namespace = {"_env_id": env_id, "_make_kwargs": make_kwargs, "_schemas": probe.tools.schemas, **methods}
    # TRL logs the reward under the class name
    return type(re.sub(r"\W+", "_", env_id.rpartition("/")[2]), (EnvironmentTools,), namespace)


def final_reply(completions: list, environments: list, **_: Any) -> list[None]:
    """A reward function with no reward of its own, for ``reward_funcs`` beside
    :func:`environment_factory`: it gives each rollout's environment the rollout's last assistant
    message (the reply without a tool call that ended TRL's tool loop; TRL runs ``reward_funcs``
    before the environments' ``get_reward``), so that the episode scored holds what the agent
    told the user (tau2's COMMUNICATE checks read it)."""
    for completion, environment in zip(completions, environments):
        if completion and completion[-1].get("role") == "assistant":
            environment._reply(completion[-1].get("content") or "")
    return [None] * len(completions)


def _tool_method(function: dict):
    """A method calling the tool ``function`` (an OpenAI function schema), with the signature and
    Google docstring from which transformers renders that schema back.

    A parameter whose schema a type hint cannot carry (an object with properties, a ``$ref``) gets
    its JSON Schema, references resolved, in its description. Arguments are not checked here: the
    env validates every call.
    """
    name = function["name"]
    parameters = function.get("parameters") or {}
    definitions = parameters.get("$defs") or {}
    required = set(parameters.get("required") or [])

    def tool(self, **arguments):
        return self._call(name, arguments)

    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    lines = []
    for key, schema in (parameters.get("properties") or {}).items():
        if not key.isidentifier() or keyword.iskeyword(key):
            raise ValueError(f"parameter {key!r} of tool {name!r} is not a Python name: use EpisodeRollout")
        hint, exact = _hint(schema)
        default = inspect.Parameter.empty if key in required else None
        signature.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        text = " ".join(str(schema.get("description") or key).split())
        if not exact:
            text += " JSON Schema: " + json.dumps(
                _resolved({k: v for k, v in schema.items() if k != "description"}, definitions)
            )
        lines.append(f"    {key}: {text}")
    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]  # read by inspect; not in typeshed
    tool.__annotations__ = {p.name: p.annotation for p in signature[1:]}
    tool.__doc__ = (function.get("description") or name) + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
    return tool


def _hint(schema: Any) -> tuple[Any, bool]:
    """The type hint that transformers renders as ``schema``, and whether it renders its structure
    whole (nested objects with properties it cannot)."""
    if not isinstance(schema, dict):
        return Any, True
    if "$ref" in schema:
        return Any, False
    enum = schema.get("enum")
    if enum and all(isinstance(v, (str, int, float, bool, type(None))) for v in enum):
        return Literal[tuple(enum)], True
    options = schema.get("anyOf") or schema.get("oneOf")
    kind = schema.get("type")
    if isinstance(kind, list):
        options = [{**schema, "type": k} for k in kind]
    if options:
        hints = [_hint(option) for option in options]
        return Union[tuple(h for h, _ in hints)], all(exact for _, exact in hints)  # noqa: UP007 (built at run time)
    if kind == "array":
        inner, exact = _hint(schema.get("items"))
        return GenericAlias(list, (inner,)), exact
    if kind == "object":
        extra = schema.get("additionalProperties")
        inner, exact = _hint(extra) if isinstance(extra, dict) else (Any, True)
        return GenericAlias(dict, (str, inner)), exact and not schema.get("properties")
    return _TYPES.get(kind, Any), True


def _resolved(schema: Any, definitions: dict) -> Any:
    """``schema`` with its ``#/$defs/...`` references replaced by their definitions, titles dropped."""
    if isinstance(schema, list):
        return [_resolved(s, definitions) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in definitions:
        return _resolved(definitions[ref[8:]], definitions)
    return {k: _resolved(v, definitions) for k, v in schema.items() if k != "title"}
