"""Role-wise GRPO: advantages on hand-made groups, and the direction and masking of one update."""

import pytest
import torch

from envace_gym.training.grpo import ROLE_IDS, group_advantages, grpo_loss, token_advantages, token_logprobs


def test_episode_baseline_skips_episodes_without_the_role():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    rehearse_counts = torch.tensor([2, 0, 1, 1])  # episode 1 never rehearsed
    adv = group_advantages(rewards, rehearse_counts, "episode")
    assert torch.allclose(adv, torch.tensor([1 / 3, 0.0, 1 / 3, -2 / 3]))
    act_counts = torch.tensor([3, 1, 2, 2])
    assert torch.allclose(group_advantages(rewards, act_counts, "episode"), torch.tensor([0.5, -0.5, 0.5, -0.5]))


def test_row_baseline_counts_each_generation():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    counts = torch.tensor([2, 0, 1, 1])
    assert torch.allclose(group_advantages(rewards, counts, "row"), torch.tensor([0.25, 0.0, 0.25, -0.75]))


def test_scaled_advantages_divide_by_the_subset_std():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    counts = torch.tensor([2, 0, 1, 1])
    adv = group_advantages(rewards, counts, "episode", scale=True)
    centred = torch.tensor([1 / 3, 1 / 3, -2 / 3])
    std = centred.pow(2).mean().sqrt()
    assert torch.allclose(adv, torch.tensor([1 / 3, 0.0, 1 / 3, -2 / 3]) / (std + 1e-6))
    with pytest.raises(ValueError):
        group_advantages(rewards, counts, "median")


@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("baseline", ["episode", "row"])
@pytest.mark.parametrize("reward", [0.9, 0.7, 1 / 3])
@pytest.mark.parametrize("size", [3, 5, 8])
def test_a_group_of_equal_rewards_gets_exactly_zero(size, reward, baseline, scale):
    """Before: three episodes of 0.9 each got +0.056 with the std division, the float32 rounding of their
    mean over a near-zero std."""
    rewards, counts = torch.full((size,), reward), torch.arange(1, size + 1)
    assert group_advantages(rewards, counts, baseline, scale).tolist() == [0.0] * size
    away = torch.cat([rewards, torch.tensor([0.0])]), torch.cat([counts, torch.tensor([0])])  # the last: no role
    assert group_advantages(*away, baseline, scale).tolist() == [0.0] * (size + 1)
    roles = torch.full((size, 2), ROLE_IDS["act"])
    generations = {"act": torch.ones(size, dtype=torch.long), "rehearse": torch.zeros(size, dtype=torch.long)}
    tokens = token_advantages(rewards, torch.zeros(size, dtype=torch.long), roles, generations, baseline, scale)
    assert tokens.eq(0).all()


def test_token_advantages_broadcast_per_role_and_group():
    rewards = torch.tensor([1.0, 0.0, 1.0, 3.0])
    groups = torch.tensor([0, 0, 1, 1])
    c, a, r = ROLE_IDS["context"], ROLE_IDS["act"], ROLE_IDS["rehearse"]
    roles = torch.tensor([[c, a, r], [c, a, a], [c, a, r], [c, r, a]])
    gens = {"act": torch.tensor([1, 2, 1, 1]), "rehearse": torch.tensor([1, 0, 1, 1])}
    adv = token_advantages(rewards, groups, roles, gens)
    expected = torch.tensor([[0, 0.5, 0.0], [0, -0.5, -0.5], [0, -1.0, -1.0], [0, 1.0, 1.0]])
    assert torch.allclose(adv, expected)


def _batch(tiny):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    ids = torch.randint(10, model.config.vocab_size, (2, 24))
    mask = torch.ones_like(ids)
    roles = torch.zeros_like(ids)
    roles[:, 4:12] = ROLE_IDS["act"]
    roles[:, 14:22] = ROLE_IDS["rehearse"]
    return model, ids, mask, roles


def _step(model, ids, mask, roles, advantages, weights, lr=0.05):
    with torch.no_grad():
        old = token_logprobs(model, ids, mask)
    loss, _ = grpo_loss(token_logprobs(model, ids, mask), old, advantages, roles, role_weights=weights)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad
        new = token_logprobs(model, ids, mask)
    return old, new


@pytest.mark.parametrize("role", ["act", "rehearse"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_one_update_moves_the_role_tokens_in_the_advantage_direction(tiny, role, sign):
    model, ids, mask, roles = _batch(tiny)
    advantages = torch.where(roles == ROLE_IDS[role], sign, 0.0)
    old, new = _step(model, ids, mask, roles, advantages, {role: 1.0})
    chosen = roles == ROLE_IDS[role]
    assert sign * (new[chosen].sum() - old[chosen].sum()) > 0


def test_a_switched_off_role_contributes_no_gradient(tiny):
    grads = []
    for rehearse_advantage in (5.0, -5.0):
        model, ids, mask, roles = _batch(tiny)
        advantages = torch.where(
            roles == ROLE_IDS["act"], 1.0, torch.where(roles == ROLE_IDS["rehearse"], rehearse_advantage, 0.0)
        )
        old = token_logprobs(model, ids, mask).detach()
        loss, stats = grpo_loss(
            token_logprobs(model, ids, mask), old, advantages, roles, role_weights={"act": 1.0, "rehearse": 0.0}
        )
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        assert "loss/rehearse" not in stats and stats["tokens/act"] == 16
    assert torch.equal(grads[0], grads[1])


def test_kl_penalty_is_zero_at_the_reference_and_positive_away_from_it():
    logprobs = torch.tensor([[-1.0, -2.0]])
    roles = torch.tensor([[ROLE_IDS["act"], ROLE_IDS["act"]]])
    zero = torch.zeros_like(logprobs)
    _, at_ref = grpo_loss(logprobs, logprobs, zero, roles, ref_logprobs=logprobs, kl_coef=0.1)
    loss, away = grpo_loss(logprobs, logprobs, zero, roles, ref_logprobs=logprobs - 0.5, kl_coef=0.1)
    assert at_ref["kl/act"] == 0.0 and away["kl/act"] > 0 and loss > 0


def test_the_world_loss_is_its_tokens_mean_nll_times_the_coefficient():
    logprobs = torch.tensor([[-1.0, -2.0, -4.0]], requires_grad=True)
    roles = torch.tensor([[ROLE_IDS["context"], ROLE_IDS["world"], ROLE_IDS["world"]]])
    zero = torch.zeros_like(logprobs)
    loss, stats = grpo_loss(logprobs, logprobs.detach(), zero, roles, world_coef=0.5)
    assert loss.item() == pytest.approx(0.5 * 3.0) and stats["loss/world"] == 3.0 and stats["tokens/world"] == 2
    loss.backward()  # the loss raises the world tokens' likelihood only
    assert logprobs.grad.tolist() == [[0.0, -0.25, -0.25]]
    off, stats = grpo_loss(logprobs, logprobs.detach(), zero, roles)  # coefficient 0: no term
    assert off.item() == 0.0 and "loss/world" not in stats


@pytest.mark.parametrize("baseline", ["episode", "row"])
def test_prompted_rows_get_their_episodes_advantages(baseline):
    """Splitting each episode into a conversation row and one row per rehearse generation
    leaves every token's advantage as it is with one row per episode."""
    rewards = torch.tensor([1.0, 0.0, 1.0, 3.0])
    groups = torch.tensor([0, 0, 1, 1])
    act_gens, rehearse_gens = [1, 2, 1, 1], [2, 0, 1, 1]
    c, a, r = ROLE_IDS["context"], ROLE_IDS["act"], ROLE_IDS["rehearse"]
    inline = token_advantages(
        rewards,
        groups,
        torch.tensor([[c, a, r]] * 4),
        {"act": torch.tensor(act_gens), "rehearse": torch.tensor(rehearse_gens)},
        baseline,
    )
    row_rewards, row_groups, row_roles, row_episodes, gens_a, gens_r = [], [], [], [], [], []
    for e in range(4):
        for kind, _ in [("act", 1)] + [("rehearse", 1)] * rehearse_gens[e]:
            row_rewards.append(rewards[e].item())
            row_groups.append(groups[e].item())
            row_episodes.append(e)
            row_roles.append([c, a if kind == "act" else r])
            gens_a.append(act_gens[e] if kind == "act" else 0)
            gens_r.append(1 if kind == "rehearse" else 0)
    prompted = token_advantages(
        torch.tensor(row_rewards),
        torch.tensor(row_groups),
        torch.tensor(row_roles),
        {"act": torch.tensor(gens_a), "rehearse": torch.tensor(gens_r)},
        baseline,
        episodes=torch.tensor(row_episodes),
    )
    for row, e in enumerate(row_episodes):
        column = 1 if row_roles[row][1] == a else 2
        assert torch.isclose(prompted[row, 1], inline[e, column])


def test_chunked_logprobs_equal_the_full_log_softmax_in_values_and_gradients(tiny):
    """The memory-lean path (chunks of the head and log-softmax, recomputed in backward)."""
    model, ids, mask, _ = _batch(tiny)
    mask[1, 20:] = 0
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float() / 0.7
    full = torch.nn.functional.pad(torch.gather(logits.log_softmax(-1), 2, ids[:, 1:, None]).squeeze(-1), (1, 0))
    (full * mask).sum().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    chunked = token_logprobs(model, ids, mask, temperature=0.7, chunk=5)
    (chunked * mask).sum().backward()
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-5, rtol=1e-4, msg=name)
