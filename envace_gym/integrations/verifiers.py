"""EnvACE in verifiers (its v1 API, verifiers 0.4.0): any envace suite as a verifiers taskset.

- :class:`EnvACETaskset` yields a task per task of a suite's split: a registered id (``EnvACE/*``, or
  ``MODULE:ID`` / ``PATH.py:ID`` for an MCP suite a module registers) or a FinMCP-Bench file, played under
  the dynamics its config names (``real``, ``rehearsed``, ``mixed``, ``adaptive``, ...).
- :class:`EnvACEEnv` plays each task as one episode of the envace env, host-side, as verifiers' own
  OpenEnv and TextArena envs do: the env's observations are the model's user turns and each reply is the
  env's action, all in one conversation (one trace). Tools are listed in the system prompt and called
  with ``<tool_call>`` blocks; tool responses come back as ``<tool_response>`` user turns (the project's
  chat format, :data:`~envace_gym.chat_template.TOOL_CHAT_TEMPLATE`). Where the policy answers a call
  (rehearsed, mixed, adaptive, shadow), a rehearse turn is a user turn asking for that call's response,
  in the same conversation. ``trace.info["envace_roles"]`` gives each model turn's role (``act`` or
  ``rehearse``), in the order of the trace's sampled messages.
- :class:`EnvACETask` scores a trace with the env's own terminal reward (``envace_reward``); the numeric
  parts of its ``reward_info`` and the turns of each role are metrics.
- :class:`EnvACEHarness` is the in-process chat loop that asks the model for one reply a turn, through
  verifiers' interception (so every call is on the trace): no program, runtime or tool server of its own.

verifiers finds a taskset by the name of the package that exports it: publish a suite as a package whose
``__all__`` exports a subclass of :class:`EnvACETaskset` with these classes (``environments/`` holds one).
verifiers is optional: this module imports it, in verifiers' own environment (``make setup`` builds
``.venv-verifiers``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any, SupportsFloat

import gymnasium as gym
import httpx
import verifiers.v1 as vf
from pydantic import Field, model_validator
from verifiers.v1.dialects.chat import message_to_wire

from envace_gym import registration
from envace_gym.core.messages import dumps_safe, format_tool_call
from envace_gym.dynamics import check_dynamics
from envace_gym.rehearse_prompts import SIMULATOR_INSTRUCTION
from envace_gym.wrappers import unwrap

#: gym.make keywords the taskset sets itself
OWN_KWARGS = ("dynamics", "split", "task_ids")


class EnvACEConfig(vf.TasksetConfig):
    """Which suite, split and dynamics (``--env.taskset.*``)."""

    env_id: str | None = None
    """A registered id (``EnvACE/tau2-retail-v0``), or ``MODULE:ID`` / ``PATH.py:ID`` (the module registers
    ID: an MCP suite). Give this or ``finmcp``."""
    finmcp: str | None = None
    """A FinMCP-Bench file, its tasks played offline on their recordings."""
    split: str | None = "default"
    """The suite's split (``default``: the id's own; None: every task)."""
    task_ids: list[str] | None = None
    """Only these tasks (of every split)."""
    dynamics: str = "real"
    """Who answers the tool calls: ``real``, ``rehearsed``, ``mixed``, ``adaptive``, ``shadow``, ..."""
    seed: int = Field(0, ge=0)
    """The first task's episode seed (then +1 a task, as ``envace-gym run`` seeds its episodes)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """More of ``gym.make``'s keywords: reward, user, max_turns, p_real, simulator, ..."""

    @model_validator(mode="after")
    def _check(self) -> EnvACEConfig:
        if (self.env_id is None) == (self.finmcp is None):
            raise ValueError("give env_id (a registered id, MODULE:ID or PATH.py:ID) or finmcp (a file), not both")
        own = sorted(set(OWN_KWARGS) & set(self.env_kwargs))
        if own:
            raise ValueError(f"env_kwargs: give {', '.join(own)} as the taskset's own fields")
        if self.env_kwargs.get("rehearsal_format", "inline") != "inline":
            raise ValueError("env_kwargs: rehearse turns are asked in the conversation (rehearsal_format='inline')")
        check_dynamics(self.dynamics, self.env_kwargs.get("simulator"))
        return self


class EnvACEData(vf.TaskData):
    """One episode: the task (``id``), where it comes from and how it is played."""

    env_id: str | None
    finmcp: str | None
    split: str | None
    seed: int
    dynamics: str
    env_kwargs: dict[str, Any]


class EnvACETask(vf.Task[EnvACEData]):
    """An envace episode, scored by the env."""

    @vf.reward(weight=1.0)
    async def envace_reward(self, trace: vf.Trace) -> float:
        """The env's terminal reward (0 for an episode that did not end in the env)."""
        return float(trace.info.get("envace", {}).get("reward", 0.0))

    @vf.metric
    async def envace(self, trace: vf.Trace) -> dict[str, float]:
        """The reward's numeric parts (``reward_info``) and the model turns of each role."""
        episode = trace.info.get("envace", {})
        parts = {
            f"reward_info/{k}": float(v)
            for k, v in (episode.get("reward_info") or {}).items()
            if isinstance(v, (int, float))
        }
        roles = trace.info.get("envace_roles", [])
        return {**parts, "act_turns": float(roles.count("act")), "rehearse_turns": float(roles.count("rehearse"))}


@functools.cache
def gym_id(env_id: str | None, finmcp: str | None) -> str:
    """The Gymnasium id of a taskset's suite: its module imported, or its FinMCP file registered (once a
    process)."""
    return registration.register_finmcp(finmcp) if finmcp else registration.resolve_env(str(env_id))


class EnvACETaskset(vf.Taskset[EnvACETask, EnvACEConfig]):
    """A task per task of the suite's split (or of ``task_ids``), in the suite's order."""

    def load(self) -> Iterator[EnvACETask]:
        config = self.config
        env = gym_id(config.env_id, config.finmcp)
        if config.task_ids:
            split, task_ids = None, [str(t) for t in config.task_ids]
        else:
            split, task_ids = registration.suite(env, config.split)[1:]
        for i, task_id in enumerate(task_ids):
            data = EnvACEData(
                id=task_id,
                name=f"{env}#{task_id}",
                env_id=config.env_id,
                finmcp=config.finmcp,
                split=split,
                seed=config.seed + i,
                dynamics=config.dynamics,
                env_kwargs=config.env_kwargs,
            )
            yield EnvACETask(data, config.task)


class EnvACEHarness(vf.Harness[vf.HarnessConfig]):
    """One chat completion a turn, in process, through the interception ``endpoint``: the conversation
    (the trace's messages and the env's new turn) in, the model's reply on the trace."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        async with httpx.AsyncClient(timeout=None) as http:
            reply = await http.post(
                f"{endpoint.rstrip('/')}/chat/completions",
                json={"model": ctx.model, "messages": messages},
                headers={"Authorization": f"Bearer {secret}"},
            )
        if reply.is_error:
            return vf.ProgramResult(exit_code=1, stdout="", stderr=f"{reply.status_code}: {reply.text[-2000:]}")
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def tools_text(tools: list[dict]) -> str:
    """The tool list and the call format, as the project's chat template writes them in a system prompt."""
    listed = "".join(f"{dumps_safe(t)}\n" for t in tools)
    return (
        "# Tools\nYou may call one or more functions. Their signatures:\n"
        f"<tools>\n{listed}</tools>\nCall a function by writing\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def rehearse_text(call: dict) -> str:
    """A rehearse turn's request: write the pending ``call``'s response."""
    return f"{SIMULATOR_INSTRUCTION}\n\n## Call to answer\n{format_tool_call(call['name'], call['arguments'])}"


def chat_message(message: dict) -> dict:
    """An env message as a turn of the conversation: a tool response is a ``<tool_response>`` user turn,
    an assistant's tool calls ``<tool_call>`` blocks."""
    if message["role"] == "tool":
        return {"role": "user", "content": f"<tool_response>\n{message['content']}\n</tool_response>"}
    if message["role"] == "assistant":
        calls = [
            format_tool_call(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []
        ]
        return {"role": "assistant", "content": "\n".join(p for p in [message.get("content") or "", *calls] if p)}
    return {"role": message["role"], "content": message.get("content") or ""}


def turn_messages(obs: dict, shown: int, tools: list[dict] | None) -> list[dict]:
    """The user turn for observation ``obs`` of which the model has seen the first ``shown`` messages:
    the env's new messages (not the assistant's, which are the model's own replies, on the trace), the
    tools where they changed (``tools``: those shown; None before the first turn), and on a rehearse turn
    the request for the pending call's response."""
    new = obs["messages"][shown:]
    out = [chat_message(m) for m in new if not shown or m["role"] != "assistant"]
    if tools is None and out and out[0]["role"] == "system":
        out[0]["content"] = f"{out[0]['content']}\n\n{tools_text(obs['tools'])}"
    elif obs["tools"] != tools:
        out.append({"role": "user", "content": f"The tools have changed.\n{tools_text(obs['tools'])}"})
    if obs["role"] == "rehearse":
        out.append({"role": "user", "content": rehearse_text(obs["tool_call"])})
    return out


class EnvACEEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The policy: it acts, and rehearses where the dynamics ask it to (``--env.agent.*``). Its harness runs
    in this process, so its runtime is a local one, not verifiers' default remote sandbox."""


class EnvACEEnv(vf.Env[EnvACEEnvConfig]):
    """Plays a task as an episode of the envace env (see the module's docstring). Envs are made once per
    distinct suite settings and reused by later episodes."""

    def __init__(self, config: EnvACEEnvConfig) -> None:
        super().__init__(config)
        self._idle: dict[str, list[gym.Env]] = {}

    def _make(self, data: EnvACEData) -> tuple[str, gym.Env]:
        key = data.model_dump_json(include={"env_id", "finmcp", "split", "env_kwargs"})
        if self._idle.get(key):
            return key, self._idle[key].pop()
        kwargs = {"split": data.split, "dynamics": data.dynamics, "rehearsal_format": "inline", **data.env_kwargs}
        return key, gym.make(gym_id(data.env_id, data.finmcp), **kwargs)

    async def run(self, task: EnvACETask, agents: vf.Agents) -> None:
        key, env = await asyncio.to_thread(self._make, task.data)
        try:
            await self._play(env, task, agents.agent)
        finally:
            self._idle.setdefault(key, []).append(env)

    async def _play(self, env: gym.Env, task: EnvACETask, agent: vf.Agent) -> None:
        data = task.data
        options = {"task_id": data.id, "dynamics": data.dynamics}
        obs, info = await asyncio.to_thread(env.reset, seed=data.seed, options=options)
        roles: list[str] = []
        reward: SupportsFloat = 0.0
        shown, tools, done = 0, None, False
        async with agent.interaction(task) as interaction:
            while not done:
                turn = turn_messages(obs, shown, tools)
                shown, tools = len(obs["messages"]), obs["tools"]
                segment = await interaction.turn(turn)
                if segment.terminated:  # a limit of verifiers' (max_turns, tokens) ended the exchange
                    reward, info = unwrap(env).finish()
                    break
                roles.append(obs["role"])
                obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, segment.last_reply)
                done = terminated or truncated
            trace, episode = interaction.trace, unwrap(env).episode
            trace.info["envace_roles"] = roles
            trace.info["envace"] = {
                "reward": float(reward),
                "ended_by": episode.ended_by if episode else None,
                "reward_source": info.get("reward_source"),
                "reward_info": info.get("reward_info") or {},
                "error": info.get("error"),
            }

    async def stop(self) -> None:
        for envs in self._idle.values():
            for env in envs:
                env.close()
        self._idle.clear()


__all__ = ["EnvACEConfig", "EnvACEData", "EnvACEEnv", "EnvACEHarness", "EnvACETask", "EnvACETaskset"]
