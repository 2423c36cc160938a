"""Learning, not just running: on EnvACE/tau2-mock-gen-v0 a tiny model learns to call tools from
gold episodes (SFT), and GRPO under rehearsed dynamics raises its training reward. On
EnvACE/plan-choice-v0, whose optimum is known, a warm start that picks the rewarded plan about half the
time must learn to pick it nine times in ten: through `train` (the project's GRPO) and through TRL's
GRPOTrainer (the project's TRL integration)."""

import json
import os
import statistics

import gymnasium as gym
import pytest
import torch
from training_configs import grpo_config

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.hf import HFAgent
from envace_gym.fixtures import tiny_model
from envace_gym.play.loop import run_episodes
from envace_gym.play.records import write_record
from envace_gym.training import SFT, SFTConfig, TrainConfig, Trainer
from envace_gym.training.checkpoint import latest
from envace_gym.training.held_out import held_out

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


PLAN = "EnvACE/plan-choice-v0"
PLAN_TOKENS, PLAN_TURNS = 24, 3
SFT_STEPS = 120  # enough for valid calls nearly always, the plan still a coin flip


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread: the machine's cores are shared, and two threads that wait on each other are slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def plan_warm(tmp_path_factory, one_thread):
    """A tiny model SFT-trained on the noisy oracle's episodes of the train split, half of which take the
    wrong plan (``p=0.5``): a warm start that writes valid calls and picks either plan."""
    folder = tmp_path_factory.mktemp("plan-choice")
    model = tiny_model(folder / "init", env_id=PLAN)
    env = gym.make(PLAN, split="train", dynamics="real", max_turns=PLAN_TURNS)
    noisy = agents.load("noisy-oracle", env=env, p=0.5, seed=0)
    episodes = folder / "noisy.jsonl"
    with episodes.open("w") as f:
        for record in run_episodes(env, noisy, env.unwrapped.task_ids, repeats=4):
            write_record(f, record)
    sft = SFT(
        SFTConfig(
            model=f"hf:{model}",
            env_id=PLAN,
            source=str(episodes),
            out=str(folder / "sft"),
            steps=SFT_STEPS,
            batch=8,
            minibatch=8,
            lr=3e-3,
            save_every=0,
            tensorboard=False,
        )
    )
    sft.train()
    return latest(folder / "sft")


def rewarded_share(path, model=None, episodes: int = 64, seed: int = 1) -> float:
    """The share of sampled episodes (temperature 1, as training samples) on the held-out tasks that
    take the rewarded plan, in the real env: of the model at ``path``, or ``model`` with its tokenizer."""
    envs = [gym.make(PLAN, split="test", dynamics="real", max_turns=PLAN_TURNS) for _ in range(16)]
    agent = HFAgent(path, model=model, max_new_tokens=PLAN_TOKENS, temperature=1.0, seed=seed, batch_size=16)
    tasks = envs[0].unwrapped.task_ids
    records = list(run_episodes(envs, agent, tasks, seed=seed, repeats=episodes // len(tasks)))
    return statistics.fmean(r["reward"] for r in records)


@pytest.mark.slow
def test_train_learns_the_rewarded_plan(plan_warm, tmp_path):
    """`envace-gym train` under real dynamics turns the warm start's coin flip into the rewarded plan."""
    from typer.testing import CliRunner

    from envace_gym.cli import app

    before = rewarded_share(plan_warm)
    options = {
        "--model": f"hf:{plan_warm}",
        "--env": PLAN,
        "--dynamics": "real",
        "--steps": "16",
        "--group-size": "8",
        "--tasks-per-step": "2",
        "--lr": "3e-4",
        "--max-new-tokens": str(PLAN_TOKENS),
        "--max-turns": str(PLAN_TURNS),
        "--eval-every": "0",
        "--save-every": "0",
        "--stop-after-flat-steps": "0",  # a group that all chose the refund is learnt, not stalled
        "--out": str(tmp_path / "grpo"),
    }
    result = CliRunner().invoke(app, ["train", "--no-tensorboard", *(x for kv in options.items() for x in kv)])
    assert result.exit_code == 0, result.output
    rewards = [json.loads(line)["reward"] for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    after = rewarded_share(latest(tmp_path / "grpo"))
    print(f"rewarded share: warm start {before:.2f}, after GRPO {after:.2f}; training reward by step {rewards}")
    assert 0.2 <= before <= 0.8 and after >= 0.9


@pytest.mark.slow
def test_trl_grpo_learns_the_rewarded_plan(plan_warm, tmp_path):
    """TRL's GRPOTrainer, through the project's EpisodeRollout, learns the same choice from the same warm start."""
    pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[trl]'")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from envace_gym.integrations.trl import EpisodeRollout, episode_reward, make_dataset

    tokenizer = AutoTokenizer.from_pretrained(plan_warm)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(plan_warm),
        processing_class=tokenizer,
        args=grpo_config(  # 2 tasks x 8 episodes, one update a step
            tmp_path / "trl",
            per_device_train_batch_size=16,
            num_generations=8,
            max_steps=16,
            learning_rate=1e-3,
            max_completion_length=PLAN_TOKENS,
        ),
        train_dataset=make_dataset(PLAN, split="train"),
        rollout_func=EpisodeRollout(PLAN, split="train", dynamics="real", max_turns=PLAN_TURNS),
        reward_funcs=episode_reward,
    )
    before = rewarded_share(plan_warm, trainer.model)
    trainer.train()
    rewards = [
        log["rewards/episode_reward/mean"] for log in trainer.state.log_history if "rewards/episode_reward/mean" in log
    ]
    trainer.model.eval()
    after = rewarded_share(plan_warm, trainer.model)
    print(f"rewarded share: warm start {before:.2f}, after TRL GRPO {after:.2f}; training reward by step {rewards}")
    assert 0.2 <= before <= 0.8 and after >= 0.9
