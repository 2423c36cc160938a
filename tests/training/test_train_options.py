"""The trainer's precision and memory options on CPU: bf16, gradient checkpointing, token budgets."""

import pytest
import torch

from envace_gym.training import TrainConfig, Trainer, grpo_loss, token_logprobs
from envace_gym.training.grpo import ROLE_IDS
from envace_gym.training.trainer import minibatches


def _model(tiny, **kwargs):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny, **kwargs)


def test_gradient_checkpointing_gives_the_same_gradients(tiny):
    ids = torch.randint(10, 200, (2, 40))
    mask = torch.ones_like(ids)
    grads = []
    for checkpointing in (False, True):
        model = _model(tiny).train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        token_logprobs(model, ids, mask).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_bf16_autocast_learns_the_toy_objective(tiny):
    """Under bf16 autocast, updates raise the log-probs of positive-advantage act tokens."""
    model = _model(tiny)
    ids = torch.randint(10, 200, (2, 24))
    mask, roles = torch.ones_like(ids), torch.zeros_like(ids)
    roles[:, 6:18] = ROLE_IDS["act"]
    advantages = torch.ones(2, 24)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def act_logprob():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return token_logprobs(model, ids, mask).float()[roles == ROLE_IDS["act"]].mean().item()

    before = act_logprob()
    for _ in range(5):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logprobs = token_logprobs(model, ids, mask).float()
        loss, _ = grpo_loss(logprobs, logprobs.detach(), advantages, roles)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    assert act_logprob() > before + 0.5


def test_token_budget_packs_minibatches():
    lengths = [300, 200, 500, 100, 100, 900, 50]
    batches = minibatches(lengths, rows=4, tokens=600)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 600 or len(batch) == 1
    assert minibatches(lengths, rows=4) == [[0, 1, 2, 3], [4, 5, 6]]


def test_a_token_budget_bounds_the_tokens_of_every_forward(tiny, tmp_path):
    config = TrainConfig(
        model=f"hf:{tiny}",
        env_id="EnvACE/tau2-mock-gen-v0",
        out=str(tmp_path),
        split="train",
        group_size=2,
        tasks_per_step=2,
        steps=1,
        max_new_tokens=8,
        max_turns=2,
        eval_every=0,
        save_every=0,
        minibatch_tokens=2_500,
        bf16=True,
        gradient_checkpointing=True,
        tensorboard=False,
    )
    trainer = Trainer(config)
    record = trainer.train_step()
    assert 0 < record["forward_tokens"] <= 2_500
    assert record["loss/act"] == record["loss/act"]  # a number: bf16 and checkpointing ran


def test_fsdp_is_refused_with_lora(tiny, tmp_path):
    with pytest.raises(ValueError, match="fsdp with lora_rank"):
        TrainConfig(model=f"hf:{tiny}", env_id="EnvACE/tau2-mock-gen-v0", out=str(tmp_path), fsdp=True, lora_rank=4)
