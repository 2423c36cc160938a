"""The envace agent loop under verl 0.9.1 (run in .venv-verl by tests/test_verl.py; argv[1]: a tiny model).

Each check prints one JSON line; the test reads them. A server manager backed by the tiny model (greedy,
so deterministic) serves the loop; the project's own ``collect`` with the same model is the reference.
"""

from __future__ import annotations

import asyncio
import json
import sys

import gymnasium as gym
import numpy as np
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

import envace_gym  # noqa: F401
from envace_gym.agents.hf import HFAgent
from envace_gym.integrations import verl as envace_verl
from envace_gym.testing import ScriptedAgent, ServerManager, oracle_replies
from envace_gym.training.grpo import ROLE_IDS, token_advantages
from envace_gym.training.rollout import collect

MODEL = sys.argv[1]
RESPONSE_LENGTH = 4096


class Hostile:
    def __init__(self, reply):
        self.reply = reply

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def make_loop(server, tokenizer):
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": 4096, "response_length": RESPONSE_LENGTH, "multi_turn": {}},
                "model": {"path": MODEL, "tokenizer_path": MODEL},
            },
            "data": {"apply_chat_template_kwargs": {}},
        }
    )
    return envace_verl.EnvACEAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )


def emit(**fields):
    print(json.dumps(fields), flush=True)


async def main():
    model = HFAgent(MODEL, max_new_tokens=24)
    tokenizer = model.tokenizer
    outputs, rows = [], []
    # the tiny model (what it writes, greedy) and the oracle's replies (tool calls, so rehearse turns too)
    cases = [("model", "EnvACE/tau2-mock-office-v0", d) for d in ("real", "rehearsed")] + [
        ("oracle", env_id, d)
        for env_id in ("EnvACE/tau2-mock-office-v0", "EnvACE/bfcl-multi-turn-base-v0")
        for d in ("real", "rehearsed")
    ]
    for source, env_id, dynamics in cases:
        env_kwargs = {"dynamics": dynamics, "max_turns": 3 if source == "model" else 30}
        env = gym.make(env_id, **env_kwargs)
        task_id, seed = env.unwrapped.task_ids[0], 7
        if source == "model":
            agent, server = model, model
        else:
            texts = oracle_replies(env_id, env_kwargs, task_id, seed)
            agent, server = ScriptedAgent(tokenizer, texts), ScriptedAgent(tokenizer, texts)
        (row,) = collect(agent, [env], [task_id], 1, seed)
        spec = {"env_id": env_id, "task_id": task_id, "seed": seed, "env_kwargs": env_kwargs}
        params = {"temperature": 0.0, "max_tokens": 24 if source == "model" else 4096}
        out = await make_loop(ServerManager(server), tokenizer).run(params, extra_info=spec)
        start = len(out.prompt_ids)
        emit(
            check="agreement",
            case=f"{source} {env_id} {dynamics}",
            ids=out.prompt_ids + out.response_ids == row.ids,
            roles=out.extra_fields["envace_roles"] == row.roles[start:],
            mask=out.response_mask == [int(r != ROLE_IDS["context"]) for r in row.roles[start:]],
            logprobs=bool(np.allclose(out.response_logprobs, row.logprobs[start:], atol=1e-5)),
            prompt_untrained=all(r == ROLE_IDS["context"] for r in row.roles[:start]),
            rehearse_tokens=row.roles.count(ROLE_IDS["rehearse"]),
            reward=[out.reward_score, row.reward],
            reward_info=out.extra_fields["reward_info"] == row.info["reward_info"],
            error=out.extra_fields["envace_info"]["error"],
            lengths=[len(out.prompt_ids) + len(out.response_ids), len(row.ids)],
        )
        outputs.append(out)
        rows.append(row)

    # hostile or failing server managers end the episode with their error; the loop goes on
    spec = {"env_id": "EnvACE/tau2-mock-office-v0", "task_id": "test_0", "env_kwargs": {"max_turns": 2}}
    for label, reply in [
        ("raises", ConnectionError("the server went away")),
        ("out of vocabulary", TokenOutput(token_ids=[10**9], log_probs=[0.0])),
        ("no log-probs", TokenOutput(token_ids=[5, 6], log_probs=None)),
        ("nan log-prob", TokenOutput(token_ids=[5], log_probs=[float("nan")])),
        ("empty", TokenOutput(token_ids=[], log_probs=[])),
    ]:
        out = await make_loop(Hostile(reply), tokenizer).run({"max_tokens": 24}, extra_info=spec)
        emit(
            check="hostile",
            case=label,
            error=out.extra_fields["envace_info"]["error"],
            reward=out.reward_score,
            trained=sum(out.response_mask),
        )

    # role-wise advantages over verl's layout equal the project's Trainer's over its rows
    outputs, rows = outputs[2:], rows[2:]  # the oracle's four: both roles, rewards that differ within groups
    uids = np.array(["g0", "g0", "g1", "g1"], dtype=object)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25])
    width = max(len(o.response_ids) for o in outputs)
    token_rewards = torch.zeros(len(outputs), width)
    mask = torch.zeros(len(outputs), width)
    for b, o in enumerate(outputs):
        n = len(o.response_ids)
        token_rewards[b, n - 1], mask[b, :n] = rewards[b], torch.tensor(o.response_mask, dtype=torch.float)
    roles = np.array([o.extra_fields["envace_roles"] for o in outputs], dtype=object)
    gens = np.array([o.extra_fields["envace_generations"] for o in outputs], dtype=object)
    for baseline in ("episode", "row"):
        got, _ = envace_verl.role_advantages(token_rewards, mask, uids, roles, gens, baseline, scale=True)
        full = max(len(r.ids) for r in rows)
        role_rows = torch.tensor([r.roles + [0] * (full - len(r.roles)) for r in rows])
        counts = {k: torch.tensor([r.generations[k] for r in rows]) for k in ("act", "rehearse")}
        want = token_advantages(rewards, torch.tensor([0, 0, 1, 1]), role_rows, counts, baseline, True)
        same = all(
            torch.allclose(got[b, : len(o.response_ids)], want[b, len(o.prompt_ids) : len(rows[b].ids)])
            for b, o in enumerate(outputs)
        )
        emit(check="advantages", case=baseline, same=same, nonzero=bool(got.abs().sum() > 0))

    # the hook: verl's own compute_advantage, asked for the envace estimator, gives the same
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    envace_verl.install()
    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": mask},
        non_tensors={"uid": uids, "envace_roles": roles, "envace_generations": gens},
    )
    data = ray_trainer.compute_advantage(data, envace_verl.ESTIMATOR, config={"norm_adv_by_std_in_grpo": True})
    got, _ = envace_verl.role_advantages(token_rewards, mask, uids, roles, gens, "episode", True)
    emit(check="hook", same=bool(torch.allclose(data.batch["advantages"], got)))


asyncio.run(main())
