"""The envace agent loop under verl 0.9.1 (run in .venv-verl by tests/integrations/test_verl.py; argv[1]: a tiny
model), then the estimator's checks of untrusted batches and against verl's GRPO (these need no model; one process
for all, as verl's import is most of its time).

Each check prints one JSON line; the test reads them. A server manager backed by the tiny model (greedy,
so deterministic) serves the loop; the project's own ``collect`` with the same model is the reference.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import warnings

import gymnasium as gym
import numpy as np
import torch
from omegaconf import OmegaConf
from scripted import ScriptedAgent, ServerManager, oracle_replies
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

import envace_gym  # noqa: F401
from envace_gym.agents.hf import HFAgent
from envace_gym.integrations import verl as envace_verl
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


def batch_checks():
    """The estimator, as verl calls it, on a batch with one thing wrong: a non-finite reward leaves its row
    out (the rest equal the batch without it), anything malformed is a ValueError."""
    from verl import DataProto
    from verl.trainer.ppo import core_algos, ray_trainer

    estimator = core_algos.get_adv_estimator_fn(envace_verl.ESTIMATOR)
    c, a, r = ROLE_IDS["context"], ROLE_IDS["act"], ROLE_IDS["rehearse"]

    def batch():
        roles = [[c, a, a, r], [c, a, r, r], [c, a, a], [c, a, r, c]]
        return {
            "token_level_rewards": torch.tensor([[0, 0, 0, 1.0], [0, 0, 0, 0.5], [0, 0, 0, 0], [0, 0, 0, 0.25]]),
            "response_mask": torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 0], [0, 1, 1, 0]]).float(),
            "index": np.array(["g0", "g0", "g0", "g1"], dtype=object),
            "envace_roles": np.array(roles, dtype=object),
            "envace_generations": np.array([{"act": 2, "rehearse": 1}] * 3 + [{"act": 1}], dtype=object),
        }

    def call(b):
        fields = ("envace_roles", "envace_generations")
        non_tensor = {k: b[k] for k in fields if k in b}
        return estimator(b["token_level_rewards"], b["response_mask"], b["index"], {}, non_tensor)[0]

    def without(b, row):
        return {k: v[[i for i in range(len(v)) if i != row]] for k, v in b.items()}

    def set_row(field, row, value):
        def change(b):
            b[field][row] = value

        return change

    def resize(field, n):
        def change(b):
            b[field] = b[field][:n] if n <= len(b[field]) else np.concatenate([b[field], b[field][-1:]])

        return change

    for case, value in [("nan reward", float("nan")), ("inf reward", float("inf"))]:
        b = batch()
        b["token_level_rewards"][1, 3] = value
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = call(b)
        want = call(without(batch(), 1))
        emit(
            check="batch",
            case=case,
            error=None,
            finite=bool(got.isfinite().all()),
            left_out=bool((got[1] == 0).all()),
            rest=bool(torch.allclose(got[[0, 2, 3]], want) and want.abs().sum() > 0),
            warned=[str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
        )
    cases = {
        "index short": resize("index", 3),
        "envace_roles short": resize("envace_roles", 3),
        "envace_generations long": resize("envace_generations", 5),
        "response_mask short": resize("response_mask", 3),
        "index row missing": set_row("index", 2, None),
        "envace_roles row missing": set_row("envace_roles", 2, None),
        "envace_generations row missing": set_row("envace_generations", 2, None),
        "envace_roles row too long": set_row("envace_roles", 0, [c, a, a, r, r]),
        "envace_roles row not roles": set_row("envace_roles", 0, [c, a, 7]),
        "envace_generations key missing": lambda b: b.pop("envace_generations"),
    }
    for case, change in cases.items():
        b = batch()
        change(b)
        try:
            call(b)
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        emit(check="batch", case=case, error=error)
    # through verl's own compute_advantage, once install ran: a batch without verl's group uid
    envace_verl.install()
    b = batch()
    data = DataProto.from_dict(
        tensors={k: b[k] for k in ("token_level_rewards", "response_mask")},
        non_tensors={k: b[k] for k in ("envace_roles", "envace_generations")},
    )
    try:
        ray_trainer.compute_advantage(data, envace_verl.ESTIMATOR, config={})
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    emit(check="batch", case="uid key missing", error=error)


def grpo_checks():
    """The estimator beside verl's own GRPO outcome advantage, on act-only rows: groups of several
    distinct rewards (equal without the std division, and with it but for verl's sample std against the
    estimator's population std), a group whose rewards are all 0.9, and a one-sample group."""
    from verl.trainer.ppo import core_algos

    c, a = ROLE_IDS["context"], ROLE_IDS["act"]
    groups = {"g0": [1.0, 0.0, 0.5, 0.25], "g1": [0.3, 0.7], "equal": [0.9, 0.9, 0.9], "single": [0.8]}
    index = np.array([g for g, rewards in groups.items() for _ in rewards], dtype=object)
    rewards = torch.tensor([r for rs in groups.values() for r in rs])
    token_rewards = torch.zeros(len(rewards), 3)
    token_rewards[:, -1] = rewards
    mask = torch.tensor([[0.0, 1.0, 1.0]] * len(rewards))
    roles = np.array([[c, a, a]] * len(rewards), dtype=object)
    gens = np.array([{"act": 1}] * len(rewards), dtype=object)
    for norm in (False, True):
        ours, _ = envace_verl.role_advantages(token_rewards, mask, index, roles, gens, "episode", norm)
        theirs, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=token_rewards, response_mask=mask, index=index, norm_adv_by_std_in_grpo=norm
        )
        agree = []
        for g in ("g0", "g1"):
            rows = torch.tensor(index == g)
            n = int(rows.sum())
            factor = math.sqrt(n / (n - 1)) if norm else 1.0  # sample std over population std
            agree.append(bool(torch.allclose(ours[rows], theirs[rows] * factor, rtol=1e-4, atol=1e-6)))
        equal, single = torch.tensor(index == "equal"), torch.tensor(index == "single")
        emit(
            check="grpo",
            case=f"grpo norm={norm}",
            groups_agree=agree,
            equal=ours[equal][:, 1:].flatten().tolist(),
            verl_equal=theirs[equal][:, 1:].flatten().tolist(),
            single=ours[single][:, 1:].flatten().tolist(),
            verl_single=theirs[single][:, 1:].flatten().tolist(),
        )


asyncio.run(main())
batch_checks()
grpo_checks()
