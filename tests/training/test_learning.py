"""Learning, not just running: on EnvACE/tau2-mock-gen-v0 a tiny model learns to call tools from
gold episodes (SFT), and GRPO under rehearsed dynamics raises its training reward."""

import statistics

import gymnasium as gym
import pytest
import torch

import envace_gym  # noqa: F401
from envace_gym.agents.hf import HFAgent
from envace_gym.fixtures import tiny_model
from envace_gym.training import SFT, SFTConfig, TrainConfig, Trainer
from envace_gym.training.checkpoint import latest
from envace_gym.training.evaluation import held_out

ENV = "EnvACE/tau2-mock-gen-v0"
NEW_TOKENS, MAX_TURNS = 32, 5


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny model whose tokenizer is trained on the suite's episodes (about 110 tokens each)."""
    return tiny_model(tmp_path_factory.mktemp("mock-gen-tiny"), env_id=ENV)


@pytest.mark.slow
def test_sft_then_grpo_learn(model, tmp_path):
    torch.manual_seed(0)
    test_env = gym.make(ENV, split="test", dynamics="real", max_turns=MAX_TURNS)
    tasks = test_env.unwrapped.task_ids[:6]

    def valid_calls(policy):  # greedy, on held-out tasks in the real env
        agent = HFAgent(model, model=policy.model, tokenizer=policy.tokenizer, max_new_tokens=NEW_TOKENS)
        return held_out(test_env, agent, tasks)["valid_calls"]

    sft = SFT(
        SFTConfig(
            model=f"hf:{model}",
            env_id=ENV,
            out=str(tmp_path / "sft"),
            max_episodes=64,
            batch=8,
            minibatch=8,
            steps=150,
            lr=3e-3,
            save_every=0,
            tensorboard=False,
        )
    )
    before = valid_calls(sft)
    sft.train()
    after = valid_calls(sft)
    print(f"held-out valid-call rate: before SFT {before:.2f}, after {after:.2f}")
    assert before == 0.0 and after >= 0.2

    # GRPO on two fixed training tasks, rewarded with the share of gold actions matched
    train_tasks = ["train_0", "train_1"]
    grpo = Trainer(
        TrainConfig(
            model=f"hf:{latest(tmp_path / 'sft')}",
            env_id=ENV,
            out=str(tmp_path / "grpo"),
            reward="actions_share",
            group_size=8,
            tasks_per_step=2,
            steps=6,
            lr=3e-4,
            max_new_tokens=NEW_TOKENS,
            max_turns=MAX_TURNS,
            eval_every=0,
            save_every=0,
            tensorboard=False,
            env_kwargs={"task_ids": train_tasks},
            seed=0,
        )
    )
    rewards = [record["reward"] for record in grpo.train()]
    print(f"GRPO training reward by step: {rewards}")
    assert statistics.fmean(rewards[1:]) > rewards[0]
