"""The envace agent loop's cost per episode against verl's own tool agent loop (verl 0.9.1).

Both loops play the same gold episodes of ``EnvACE/tau2-mock-office-v0`` (the oracle's replies on
the test tasks that are one user request: tool calls, then a closing message) under real dynamics,
through the same fake server manager, which answers each generation with the next gold reply's
tokens at once. verl's loop gets the suite's tools as verl tools that run each call on the task's
world with the project's own bounded ``execute``; the envace loop runs the env (its user, its
checks, its reward). The time is the loop's own: rendering, tokenizing, parsing, running the tools.
Episodes run one at a time, the two loops alternating, ``--repeats`` rounds; the median per episode
is reported, with the ratio (target: at most 1.2x).

    .venv-verl/bin/python benchmarks/verl_loop.py     # make setup builds .venv-verl
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.dataset.rl_dataset import RLHFDataset

import envace_gym  # noqa: F401
from envace_gym.agents.hf import HFAgent
from envace_gym.core.response import execute
from envace_gym.fixtures import tiny_model
from envace_gym.integrations.verl import EnvACEAgentLoop

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))  # the scripted agent the tests play too
from scripted import ScriptedAgent, ServerManager, oracle_replies  # noqa: E402

ENV_ID = "EnvACE/tau2-mock-office-v0"


class WorldTool(BaseTool):
    """One of the suite's tools for verl's loop: runs on the world of the episode being played."""

    def __init__(self, schema: dict, episode: dict):
        super().__init__({}, OpenAIFunctionToolSchema.model_validate(schema))
        self.episode = episode

    async def execute(self, instance_id, parameters, **kwargs):
        suite, world, limits = self.episode["suite"], self.episode["world"], self.episode["limits"]
        return ToolResponse(text=execute(suite, world, self.name, parameters, limits).content), 0.0, {}


def config(model: str):
    multi_turn = {
        "max_user_turns": None,
        "max_assistant_turns": None,
        "max_parallel_calls": 16,
        "max_tool_response_length": 1 << 20,
        "tool_response_truncate_side": "middle",
        "format": "hermes",
    }
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 8192,
                    "response_length": 8192,
                    "full_determinism": False,
                    "multi_turn": multi_turn,
                },
                "model": {"path": model, "tokenizer_path": model},
            },
            "data": {"apply_chat_template_kwargs": {}},
        }
    )


def loop_kwargs(cfg, server, tokenizer) -> dict:
    return dict(
        trainer_config=DictConfigWrap(cfg),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
    )


def episodes(limit: int) -> list[tuple[str, list[str]]]:
    """Test tasks whose gold is one request: every reply but the last makes tool calls."""
    env = gym.make(ENV_ID, split="test")
    out = []
    for task_id in env.unwrapped.task_ids:
        texts = oracle_replies(ENV_ID, {"split": "test", "dynamics": "real"}, task_id, 0)
        if all("<tool_call>" in t for t in texts[:-1]) and "<tool_call>" not in texts[-1]:
            out.append((task_id, texts))
        if len(out) == limit:
            break
    return out


async def main(args) -> dict:
    model = tiny_model(
        Path(tempfile.mkdtemp()) / "tiny"
    )  # its tokenizer learnt retail, not office: no rendering favoured
    tokenizer = HFAgent(str(model)).tokenizer
    cfg = config(str(model))
    env = gym.make(ENV_ID, split="test", dynamics="real").unwrapped
    gold = episodes(args.episodes)
    playing: dict = {"suite": env.suite, "limits": env.limits}
    with contextlib.redirect_stdout(io.StringIO()):  # verl's tools print their schemas
        tools = ToolListWrap([WorldTool(schema, playing) for schema in env.tools.schemas])
    params = {"temperature": 1.0, "max_tokens": 4096}
    envace = EnvACEAgentLoop(**loop_kwargs(cfg, ServerManager(ScriptedAgent(tokenizer, [])), tokenizer))
    times: dict[str, list[float]] = {"envace": [], "verl": []}
    tokens: dict[str, list[int]] = {"envace": [], "verl": []}
    for round_ in range(args.repeats):
        for task_id, texts in gold:
            outs = {}
            for name in ("envace", "verl") if round_ % 2 == 0 else ("verl", "envace"):
                server = ServerManager(ScriptedAgent(tokenizer, texts))
                start = time.perf_counter()
                if name == "envace":
                    envace.server_manager = server
                    spec = {"env_id": ENV_ID, "task_id": task_id, "env_kwargs": {"split": "test", "dynamics": "real"}}
                    outs[name] = await envace.run(params, extra_info=spec)
                else:
                    task = env.suite.task(task_id)
                    playing["world"] = env.suite.new_world(task)
                    obs, _ = env.reset(seed=0, options={"task_id": task_id})
                    loop = ToolAgentLoop(**loop_kwargs(cfg, server, tokenizer), tools=tools)
                    outs[name] = await loop.run(params, raw_prompt=obs["messages"])
                times[name].append(time.perf_counter() - start)
            assert outs["envace"].extra_fields["envace_info"]["error"] is None, outs["envace"].extra_fields
            for name, out in outs.items():
                tokens[name].append(len(out.prompt_ids) + len(out.response_ids))
    envace_ms, verl_ms = (statistics.median(times[k]) * 1e3 for k in ("envace", "verl"))
    return {
        "env_id": ENV_ID,
        "episodes": len(gold),
        "repeats": args.repeats,
        "envace_ms": round(envace_ms, 2),
        "verl_tool_agent_ms": round(verl_ms, 2),
        "ratio": round(envace_ms / verl_ms, 2),
        # the same episodes: the sequences differ only in how the tool schemas are printed (verl's own
        # schema model reorders their keys and drops defaults)
        "tokens_per_episode": {k: round(statistics.fmean(v)) for k, v in tokens.items()},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=1))
