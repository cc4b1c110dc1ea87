"""GRPO's pure functions against values worked out by hand on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from vigor_cli import grpo

EPS = grpo.ADV_EPS


def test_group_advantages_unequal_sizes():
    # group a: three rollouts, b: two, c: one (size-1 group -> advantage 0)
    uids = ["a", "a", "a", "b", "b", "c"]
    rewards = [1, 0, 0, 1, 0, 1]
    adv = grpo.compute_advantages(rewards, uids, "group")
    std_a = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 3)  # population std = sqrt(2)/3
    expected = [
        (2 / 3) / (std_a + EPS),
        (-1 / 3) / (std_a + EPS),
        (-1 / 3) / (std_a + EPS),
        0.5 / (0.5 + EPS),
        -0.5 / (0.5 + EPS),
        0.0,
    ]
    assert adv.tolist() == pytest.approx(expected, abs=1e-6)


def test_batch_and_no_scaling():
    uids = ["a", "a", "a", "b", "b", "c"]
    rewards = [1, 0, 0, 1, 0, 1]
    centred = [2 / 3, -1 / 3, -1 / 3, 0.5, -0.5, 0.0]
    batch_std = 0.5  # six rewards, three ones: population std 0.5
    assert grpo.compute_advantages(rewards, uids, "batch").tolist() == pytest.approx(
        [c / (batch_std + EPS) for c in centred], abs=1e-6
    )
    assert grpo.compute_advantages(rewards, uids, "none").tolist() == pytest.approx(centred, abs=1e-6)


def test_zero_variance_group_and_interleaved_uids():
    adv = grpo.compute_advantages([1, 0, 1, 1], ["x", "y", "x", "y"], "group")
    assert adv.tolist() == pytest.approx([0.0, -0.5 / (0.5 + EPS), 0.0, 0.5 / (0.5 + EPS)], abs=1e-6)
    with pytest.raises(ValueError, match="scale_rewards"):
        grpo.compute_advantages([1.0], ["x"], "median")


def test_clipped_loss_each_case():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 0.5, 1.5]]))
    # one row per advantage sign: run the four tokens under A=+1 and under A=-1
    pos, low_p, high_p = grpo.clipped_policy_loss(logp, old, torch.tensor([1.0]), 0.2, 0.28)
    neg, low_n, high_n = grpo.clipped_policy_loss(logp, old, torch.tensor([-1.0]), 0.2, 0.28)
    # A=+1: ratio 1.5 clipped to 1.28; ratio 0.5 stays (min picks the unclipped 0.5)
    assert pos[0].tolist() == pytest.approx([-1.28, -0.5, -0.5, -1.28], abs=1e-6)
    assert high_p[0].tolist() == [True, False, False, True] and not low_p.any()
    # A=-1: ratio 0.5 clipped to 0.8 (loss 0.8); ratio 1.5 stays (loss 1.5)
    assert neg[0].tolist() == pytest.approx([1.5, 0.8, 0.8, 1.5], abs=1e-6)
    assert low_n[0].tolist() == [False, True, True, False] and not high_n.any()


def test_sequence_level_ratio_by_hand():
    """GSPO: one ratio per row, exp of the mean log-ratio over the row's loss tokens (padding
    left out), clipped as a whole and repeated on every token of the row."""
    old = torch.zeros(2, 3)
    logp = torch.tensor([[math.log(2.0), 0.0, 0.0], [math.log(1.1), math.log(1.1), 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # the 5.0 is padding
    loss, low, high = grpo.clipped_policy_loss(logp, old, torch.tensor([1.0, 1.0]), 0.2, 0.28, "sequence", mask)
    # row 0: mean log-ratio ln(2) / 2 -> ratio sqrt(2) = 1.414 > 1.28: clipped; row 1: 1.1
    assert loss[0].tolist() == pytest.approx([-1.28] * 3, abs=1e-6)
    assert loss[1].tolist() == pytest.approx([-1.1] * 3, abs=1e-6)
    assert high.tolist() == [[True] * 3, [False] * 3] and not low.any()
    token, _, _ = grpo.clipped_policy_loss(logp, old, torch.tensor([1.0, 1.0]), 0.2, 0.28, "token", mask)
    assert token[0].tolist() == pytest.approx([-1.28, -1.0, -1.0], abs=1e-6)  # token by token
    with pytest.raises(ValueError, match="importance_sampling_level"):
        grpo.clipped_policy_loss(logp, old, torch.tensor([1.0, 1.0]), 0.2, 0.28, "prompt", mask)


def test_sequence_level_gradient_equals_token_level_at_the_sampling_policy():
    """At ratio 1 (mu = 1) the sequence ratio's gradient is the row's mean token gradient, so
    the aggregated losses' gradients agree for every aggregation (the clip differs later)."""
    torch.manual_seed(0)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    adv = torch.tensor([0.7, -1.3])
    totals = grpo.step_totals(["a", "a"], [3, 2], [1.0, 1.0], 4)
    for agg in ("dapo", "grpo", "dr_grpo"):
        grads = []
        for level in ("token", "sequence"):
            logp = torch.randn(2, 4).requires_grad_()
            logp.data = torch.linspace(-2, -0.1, 8).view(2, 4)
            tok, _, _ = grpo.clipped_policy_loss(logp, logp.detach(), adv, 0.2, 0.28, level, mask)
            grpo.aggregate(tok, mask, totals, agg).backward()
            grads.append(logp.grad)
        assert torch.allclose(grads[0], grads[1], atol=1e-7), agg
        assert grads[0].abs().sum() > 0


def test_importance_sampling_level_is_a_registry_the_config_checks():
    from vigor_cli.settings import build_config

    assert list(grpo.RATIO_LEVELS) == ["token", "sequence"]
    assert build_config(sets=["grpo.importance_sampling_level=sequence"]).grpo.importance_sampling_level == "sequence"
    with pytest.raises(Exception, match="grpo.importance_sampling_level.*unknown name 'seq'; known: token, sequence"):
        build_config(sets=["grpo.importance_sampling_level=seq"])


def test_kl_k3():
    logp = torch.tensor([0.0, math.log(0.5)])
    ref = torch.tensor([math.log(2.0), math.log(0.5)])
    assert grpo.kl_k3(logp, ref).tolist() == pytest.approx([2 - math.log(2) - 1, 0.0], abs=1e-6)


def test_aggregations():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    totals = grpo.StepTotals(tokens=4, sequences=2, max_new_tokens=4)
    assert float(grpo.aggregate(loss, mask, totals, "dapo")) == pytest.approx(10 / 4)
    assert float(grpo.aggregate(loss, mask, totals, "grpo")) == pytest.approx((6 / 3 + 4 / 1) / 2)
    assert float(grpo.aggregate(loss, mask, totals, "dr_grpo")) == pytest.approx(10 / (2 * 4))


def test_prompt_mean_by_hand_with_unequal_groups():
    # prompt a: three rollouts of 2, 1 and 3 loss tokens; prompt b: one rollout of 2 tokens
    # (its second token masked out); prompt c: one rollout whose only row is masked (a
    # truncated completion under mask_truncated): c has no loss tokens and does not count.
    loss = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0], [3.0, 3.0, 6.0], [5.0, 7.0, 9.0], [8.0, 8.0, 8.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]])
    uids = ["a", "a", "a", "b", "c"]
    totals = grpo.step_totals(uids, [2, 1, 3, 2, 3], [1, 1, 1, 1, 0], max_new_tokens=3)
    assert (totals.tokens, totals.sequences) == (8, 4)
    mask = mask * torch.tensor([[1], [1], [1], [1], [0]])
    # a: (1 + 2 + 4 + 3 + 3 + 6) / 6 tokens = 19/6; b: (5 + 7) / 2 = 6; two prompts
    expected = (19 / 6 + 6) / 2
    assert float(grpo.aggregate(loss, mask, totals, "prompt_mean")) == pytest.approx(expected)
    # the same step under dapo weighs prompt a by its 6 tokens of 8 instead of one half
    assert float(grpo.aggregate(loss, mask, totals, "dapo")) == pytest.approx((19 + 12) / 8)
    # a micro-batch is its share of the step: rows 1 and 3 alone
    part = grpo.aggregate(loss[[1, 3]], mask[[1, 3]], totals, "prompt_mean", rows=[1, 3])
    assert float(part) == pytest.approx((4 / 6 + 12 / 2) / 2)


def test_prompt_mean_weighs_prompts_not_rollouts():
    # prompt a has 30 one-token rollouts of loss 1, prompt b two of loss 3: each prompt
    # weighs one half, so the loss is (1 + 3) / 2 however many rollouts a has
    uids = ["a"] * 30 + ["b"] * 2
    loss = torch.tensor([[1.0]] * 30 + [[3.0]] * 2)
    mask = torch.ones(32, 1)
    totals = grpo.step_totals(uids, [1] * 32, [1] * 32, max_new_tokens=1)
    assert float(grpo.aggregate(loss, mask, totals, "prompt_mean")) == pytest.approx(2.0)
    assert float(grpo.aggregate(loss, mask, totals, "dapo")) == pytest.approx(36 / 32)
    with pytest.raises(ValueError, match="row_weights"):
        grpo.aggregate(loss, mask, grpo.StepTotals(32, 32, 1), "prompt_mean")


def test_token_budget_batches():
    assert grpo.token_budget_batches([3, 5, 2, 6], 10) == [[0, 1], [2], [3]]
    assert grpo.token_budget_batches([20, 1], 10) == [[0], [1]]  # a long row gets its own batch
    assert grpo.token_budget_batches([], 10) == []


@pytest.mark.parametrize("how", sorted(grpo.LOSS_AGGREGATIONS))
def test_micro_batches_leave_loss_and_gradient_unchanged(how):
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11)
    rows, width = 6, 5
    feats = torch.randn(rows, width, 8)
    targets = torch.randint(0, 11, (rows, width))
    lengths = [5, 2, 4, 1, 3, 5]
    mask = torch.zeros(rows, width)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    old = torch.randn(rows, width) * 0.1 - 2.4
    adv = torch.tensor([1.0, -0.5, 0.3, 0.0, -1.2, 0.7])
    uids = ["a", "b", "a", "c", "a", "b"]  # unequal groups, interleaved across micro-batches
    totals = grpo.step_totals(uids, lengths, [1] * rows, max_new_tokens=width)
    assert totals.tokens == int(mask.sum())

    def step_loss(idx):
        lp, _ = grpo.selected_token_logprobs(head(feats[idx]), targets[idx])
        tok, _, _ = grpo.clipped_policy_loss(lp, old[idx], adv[idx], 0.2, 0.28)
        return grpo.aggregate(tok, mask[idx], totals, how, rows=idx)

    full = step_loss(list(range(rows)))
    full.backward()
    grad_full = head.weight.grad.clone()
    head.weight.grad = None
    accumulated = 0.0
    batches = grpo.token_budget_batches(lengths, 6)
    assert len(batches) > 2
    for b in batches:
        part = step_loss(b)
        part.backward()
        accumulated += float(part.detach())
    assert accumulated == pytest.approx(float(full.detach()), rel=1e-6)
    assert torch.allclose(head.weight.grad, grad_full, atol=1e-7)


def test_selected_token_logprobs_matches_log_softmax():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    lp, ent = grpo.selected_token_logprobs(logits, torch.tensor([[1]]))
    assert float(lp) == pytest.approx(math.log(0.75))
    assert float(ent) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    lp_t, _ = grpo.selected_token_logprobs(logits, torch.tensor([[1]]), temperature=0.5)
    assert float(lp_t) == pytest.approx(math.log(0.9))  # softmax([0, 2 log 3]) = [1/10, 9/10]
