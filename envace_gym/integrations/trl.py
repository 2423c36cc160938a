"""envace-gym envs in TRL's ``GRPOTrainer`` (``pip install 'envace-gym[trl]'``), two ways.

- ``environment_factory=environment_factory(ENV_ID)``: TRL runs its own tool loop. The
  class exposes exactly the suite's tools as methods, their schemas rendered from the
  suite's JSON Schemas, and each call is one env step answered by the env (``real``,
  ``replay`` or ``simulated`` dynamics). ``get_reward`` ends the episode and scores it with
  the env's reward; with ``reward_funcs=[final_reply]`` the episode first gets the message
  that ended the rollout, which TRL shows no environment. TRL masks tool responses out of
  the loss and ends a rollout at the first message without a tool call: no user turns, no
  rehearse turns.
- ``rollout_func=EpisodeRollout(ENV_ID)`` with ``reward_funcs=episode_reward``: every
  prompt is a whole episode, played by :func:`envace_gym.training.rollout.collect` with the
  trainer's model: user turns, and rehearse turns under any dynamics. Act and rehearse
  tokens are trainable (``env_mask``), what the env, the user and the template add is not;
  logprobs are the sampler's.

Both take their prompts from :func:`make_dataset`. Example::

    from trl import GRPOConfig, GRPOTrainer
    from envace_gym.integrations.trl import EpisodeRollout, episode_reward, make_dataset

    env_id = "EnvACE/tau2-mock-gen-v0"
    trainer = GRPOTrainer(model=path, args=GRPOConfig(...), train_dataset=make_dataset(env_id, split="train"),
                          rollout_func=EpisodeRollout(env_id, split="train", dynamics="rehearsed"),
                          reward_funcs=episode_reward)
"""

from __future__ import annotations

import inspect
import json
import keyword
import re
import warnings
from types import GenericAlias
from typing import Any, Literal, Union

import gymnasium as gym

from envace_gym.agents.hf import HFAgent
from envace_gym.chat_template import TOOL_CHAT_TEMPLATE
from envace_gym.core.messages import assistant_message
from envace_gym.dynamics import DYNAMICS
from envace_gym.spaces import TURN_ROLES
from envace_gym.training.grpo import ROLE_IDS, token_advantages
from envace_gym.training.rollout import collect
from envace_gym.wrappers import unwrap

# dynamics whose tool responses come out of ``step`` itself, so out of TRL's tool loop
TOOL_LOOP_DYNAMICS = tuple(name for name, d in DYNAMICS.items() if not d.rehearses)

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

_TYPES: dict[object, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}


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


class EpisodeRollout:
    """A ``rollout_func`` for TRL's GRPOTrainer: each prompt (a row of :func:`make_dataset`) is
    one whole episode of ``gym.make(env_id, **make_kwargs)``, played by
    :func:`~envace_gym.training.rollout.collect` with the trainer's model at its temperature and top-p.

    It returns ``prompt_ids`` (the tokens before the first generation), ``completion_ids`` (the
    rest of the episode), the sampler's ``logprobs``, ``env_mask`` (1 on the tokens of
    ``roles``: act and rehearse generations; 0 on what the env, the user and the chat template
    add) and ``episode_reward``, which :func:`episode_reward` hands to TRL. Each generation gets
    at most ``max_new_tokens`` (default: the trainer's ``max_completion_length``); the env's
    ``max_turns`` bounds the episode (TRL does not cut what a ``rollout_func`` returns to its
    ``max_completion_length``). Rehearsal must be ``inline`` (one row per episode); env seeds
    are ``seed`` on, one per episode.
    """

    def __init__(
        self,
        env_id: str,
        max_new_tokens: int | None = None,
        roles: tuple[str, ...] = ("act", "rehearse"),
        seed: int = 0,
        **make_kwargs: Any,
    ):
        self.env_id, self.make_kwargs = env_id, make_kwargs
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.trained = {ROLE_IDS[role] for role in roles}
        self._calls = 0
        self._envs = [gym.make(env_id, **make_kwargs)]
        if unwrap(self._envs[0]).rehearsal_format != "inline":
            raise ValueError("EpisodeRollout needs rehearsal_format='inline': TRL trains one row per episode")

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        from trl.models import unwrap_model_for_generation

        task_ids = [_task_id(prompt) for prompt in prompts]
        while len(self._envs) < len(prompts):
            self._envs.append(gym.make(self.env_id, **self.make_kwargs))
        accelerator = trainer.accelerator  # a distinct seed for every episode of every call and process
        seed = self.seed + len(prompts) * (self._calls * accelerator.num_processes + accelerator.process_index)
        self._calls += 1
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model:
            training = model.training
            try:
                agent = HFAgent(
                    getattr(model, "name_or_path", "trl"),
                    model=model,
                    tokenizer=trainer.processing_class,
                    device=str(accelerator.device),
                    max_new_tokens=self.max_new_tokens or trainer.args.max_completion_length,
                    temperature=trainer.temperature,
                    top_p=trainer.top_p,
                    seed=None,
                )
                rollouts = collect(agent, self._envs[: len(prompts)], task_ids, 1, seed)
            finally:
                model.train(training)
        out: dict[str, list] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "env_mask": [],
            "episode_reward": [],
            "envace_roles": [],  # each completion token's role (ROLE_IDS), for RoleWiseGRPOTrainer
            "envace_generations": [],
        }
        for r in rollouts:
            start = next(k for k, role in enumerate(r.roles) if role != ROLE_IDS["context"])
            out["prompt_ids"].append(r.ids[:start])
            out["completion_ids"].append(r.ids[start:])
            out["logprobs"].append(r.logprobs[start:])
            out["env_mask"].append([int(role in self.trained) for role in r.roles[start:]])
            out["episode_reward"].append(r.reward)
            out["envace_roles"].append(r.roles[start:])
            out["envace_generations"].append(dict(r.generations))
        return out


def episode_reward(episode_reward: list[float], **_: Any) -> list[float]:
    """The reward function to pair with :class:`EpisodeRollout`: each episode's terminal reward."""
    return list(episode_reward)


def _task_id(prompt: Any) -> str:
    task_id = prompt[0].get("task_id") if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) else None
    if task_id is None:
        raise ValueError(
            "EpisodeRollout reads the task id from the prompt's first message: "
            "build the dataset with envace_gym.integrations.trl.make_dataset"
        )
    return str(task_id)


def _role_wise_trainer() -> type:
    """:class:`RoleWiseGRPOTrainer`, built on first use so that this module needs no TRL to import."""
    import torch
    from trl import GRPOTrainer

    class RoleWiseGRPOTrainer(GRPOTrainer):
        """TRL's ``GRPOTrainer`` with the project's role-wise advantages: with
        :class:`EpisodeRollout`, an episode's act tokens and its rehearse tokens each get the
        advantage against their own role's baseline in the group
        (:func:`~envace_gym.training.grpo.token_advantages`, ``baseline`` ``episode`` or ``row``,
        scaled unless ``scale_rewards="none"``), as ``(B, T)`` advantages, which TRL's loss takes.
        Groups must not be split across processes: it runs in one process."""

        def __init__(self, *args: Any, baseline: str = "episode", **kwargs: Any):
            super().__init__(*args, **kwargs)
            if self.accelerator.num_processes > 1:
                raise ValueError("RoleWiseGRPOTrainer computes a group's baselines in one process: run one")
            self.role_baseline = baseline

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            if any("envace_roles" not in row for row in inputs):
                raise ValueError("RoleWiseGRPOTrainer needs rollout_func=EpisodeRollout(...): it gives the roles")
            width = output["completion_ids"].shape[1]
            roles = torch.tensor([(row["envace_roles"] + [0] * width)[:width] for row in inputs])
            rewards = torch.tensor([float(row["episode_reward"]) for row in inputs])
            size = self.num_generations if self.model.training else self.num_generations_eval
            groups = torch.arange(len(inputs)) // size
            counts = {role: torch.tensor([row["envace_generations"][role] for row in inputs]) for role in TURN_ROLES}
            scale = self.scale_rewards != "none"
            advantages = token_advantages(rewards, groups, roles, counts, self.role_baseline, scale)
            output["advantages"] = (advantages * output["completion_mask"].cpu()).to(output["advantages"].device)
            return output

    return RoleWiseGRPOTrainer


def __getattr__(name: str):
    if name == "RoleWiseGRPOTrainer":  # built on first use, so the module alone needs no TRL
        cls = globals()["RoleWiseGRPOTrainer"] = _role_wise_trainer()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
