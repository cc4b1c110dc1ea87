"""Truncated importance sampling for the engine/policy gap (grpo.importance_sampling), by hand.

The engine that samples (vLLM: bf16, its own kernels) and the policy that trains disagree by
rounding even with the same weights; the update weights each token's policy-gradient term by
min(pi_policy / pi_engine, cap) (TRL's and verl's token-level truncate mode). The tests set the
engine's log-probs to the policy's minus a known log-ratio and check the loss, the gradient
and the logged statistics against numbers worked out by hand, on the real tiny model.
"""

from __future__ import annotations

import math

import pytest
import torch

from test_learner import _samples
from test_trainer import tiny_sets
from vigor_cli import grpo
from vigor_cli.settings import build_config
from vigor_cli.train.learner import IMPORTANCE_METRICS, Learner
from vigor_cli.model.loading import load_tokenizer


def test_truncated_weights_by_hand():
    policy = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
    engine = torch.tensor([[-1.0, -2.5, -2.0, -2.0]])  # log-ratios 0, 0.5, 1.5, -1
    w, clipped = grpo.truncated_importance_weights(policy.requires_grad_(), engine, cap=3.0)
    assert w.tolist()[0] == pytest.approx([1.0, math.exp(0.5), 3.0, math.exp(-1.0)])
    assert clipped.tolist() == [[False, False, True, False]]
    assert not w.requires_grad  # a weight on the measure, not part of the objective
    huge, _ = grpo.truncated_importance_weights(torch.tensor([0.0]), torch.tensor([-1e4]), cap=1000.0)
    assert huge.item() == 1000.0  # a garbage engine log-prob cannot overflow


def _learner(tmp_path, *sets):
    cfg = build_config(sets=tiny_sets(tmp_path, "is", "grpo.beta=0", "grpo.mu=1", "grpo.max_grad_norm=1e6",
                                      "engine.weight_check=off", *sets))
    tokenizer = load_tokenizer(cfg.model)
    prompt_ids, samples = _samples(tokenizer)  # advantages +1, -1, +1, -1
    torch.manual_seed(0)
    return Learner(cfg, tokenizer.pad_token_id, prompt_ids), samples


def _set_engine_logprobs(learner, samples, log_ratios):
    """Engine log-probs = policy log-probs - log_ratio (per sample): ratio exp(log_ratio)."""
    with torch.no_grad():
        lp, _, _ = learner.logprobs(learner.model, samples, list(range(len(samples))), 1.0)
    for k, (s, r) in enumerate(zip(samples, log_ratios)):
        s.rollout.logprobs = [x - r for x in lp[k, : len(s.rollout.token_ids)].tolist()]


def test_update_weights_each_token_by_its_truncated_ratio(tmp_path):
    """dapo, mu=1: rho = 1 at pass 0, so token loss = -A * w and loss = sum(-A * w) / tokens."""
    learner, samples = _learner(tmp_path, "grpo.importance_sampling=on", "grpo.importance_sampling_cap=3")
    log_ratios = [math.log(2.0), math.log(10.0), 0.0, -math.log(4.0)]  # ratios 2, 10 (-> 3), 1, 0.25
    _set_engine_logprobs(learner, samples, log_ratios)
    n = [len(s.rollout.token_ids) for s in samples]
    w = [2.0, 3.0, 1.0, 0.25]
    metrics = learner.update(samples)
    tokens = sum(n)
    expected = sum(-s.advantage * wi * ni for s, wi, ni in zip(samples, w, n)) / tokens
    assert metrics["losses/loss"] == pytest.approx(expected, abs=1e-6)
    assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(sum(wi * ni for wi, ni in zip(w, n)) / tokens)
    assert metrics["sampling/importance_sampling_ratio/max"] == pytest.approx(3.0)
    assert metrics["sampling/importance_sampling_ratio/min"] == pytest.approx(0.25)
    assert metrics["sampling/importance_sampling_ratio/clipped_frac"] == pytest.approx(n[1] / tokens)
    diffs = [abs(r) for r in log_ratios]
    assert metrics["sampling/sampling_logp_difference/mean"] == pytest.approx(
        sum(d * ni for d, ni in zip(diffs, n)) / tokens, rel=1e-5)
    assert metrics["sampling/sampling_logp_difference/max"] == pytest.approx(math.log(10.0), rel=1e-5)
    assert metrics["sampling/nonfinite_engine_logprobs"] == 0


def _grads(learner):
    return [p.grad.detach().clone() for p in learner.model.parameters() if p.grad is not None]


@pytest.mark.slow
def test_gradient_scales_with_the_weight_and_equals_plain_grpo_at_ratio_one(tmp_path):
    plain, samples = _learner(tmp_path, "grpo.importance_sampling=off")
    plain.update(samples)
    g_plain = _grads(plain)

    same, samples = _learner(tmp_path, "grpo.importance_sampling=on")
    _set_engine_logprobs(same, samples, [0.0] * 4)  # the engine agrees exactly: w = 1
    same.update(samples)
    for a, b in zip(_grads(same), g_plain):
        assert float((a - b).norm()) <= 1e-5 * float(b.norm())

    double, samples = _learner(tmp_path, "grpo.importance_sampling=on")
    _set_engine_logprobs(double, samples, [math.log(2.0)] * 4)  # w = 2 on every token
    double.update(samples)
    assert len(_grads(double)) == len(g_plain) > 0
    for a, b in zip(_grads(double), g_plain):
        assert float((a - 2 * b).norm()) <= 1e-4 * float(b.norm())


def test_off_adds_no_metric_and_mu_two_keeps_the_weights_of_pass_zero(tmp_path):
    off, samples = _learner(tmp_path, "grpo.importance_sampling=off")
    assert not set(off.update(samples)) & set(IMPORTANCE_METRICS)

    on, samples = _learner(tmp_path, "grpo.importance_sampling=on", "grpo.mu=2")
    _set_engine_logprobs(on, samples, [math.log(2.0)] * 4)
    m = on.update(samples)  # pass 1 reuses pass 0's weights (the engine's ratio to the old policy)
    assert m["sampling/importance_sampling_ratio/mean"] == pytest.approx(2.0, rel=1e-5)


def test_nothing_to_learn_logs_none(tmp_path):
    learner, samples = _learner(tmp_path, "grpo.importance_sampling=on")
    for s in samples:
        s.advantage = 0.0
    m = learner.update(samples)
    assert all(m[k] is None for k in IMPORTANCE_METRICS)


class _Engine:
    def __init__(self, shares: bool):
        self.shares_policy = shares


@pytest.mark.parametrize("mode,shares,on", [
    ("auto", True, False), ("auto", False, True), ("on", True, True), ("off", False, False),
])
def test_auto_is_on_for_an_engine_with_its_own_weights_only(tmp_path, mode, shares, on):
    learner, _ = _learner(tmp_path, f"grpo.importance_sampling={mode}")
    learner.watch_engine(_Engine(shares))
    assert learner.importance_sampling is on


@pytest.mark.parametrize("text,want", [
    ("on", "on"), ("true", "on"), ("Yes", "on"), ("off", "off"), ("OFF", "off"), ("false", "off"),
    ("No", "off"), ("'Auto'", "auto"), ("' on '", "on"),
])
def test_importance_sampling_accepts_yaml_spellings(text, want):
    assert build_config(sets=[f"grpo.importance_sampling={text}"]).grpo.importance_sampling == want


# --------------------------------------------------------------------------- non-finite engine log-probs
def test_a_nonfinite_engine_logprob_is_left_out_of_the_correction_by_hand():
    """NaN, +inf, -inf: weight exactly 1 (no correction), no NaN out, flagged; the finite
    neighbours keep their weights."""
    policy = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.0]])
    engine = torch.tensor([[float("nan"), -2.5, float("inf"), float("-inf"), -1.0]])
    w, clipped = grpo.truncated_importance_weights(policy, engine, cap=3.0)
    assert torch.isfinite(w).all()
    assert w.tolist()[0] == pytest.approx([1.0, math.exp(0.5), 1.0, 1.0, 1.0])
    assert grpo.nonfinite(engine).tolist() == [[True, False, True, True, False]] and not clipped.any()


@pytest.mark.parametrize("garbage", [float("nan"), float("inf"), float("-inf"), None])
def test_nonfinite_engine_logprobs_never_reach_the_loss_and_are_counted(tmp_path, garbage):
    """The update with one garbage engine log-prob on a loss token equals the update whose
    engine agreed on that token (weight 1 there): finite loss, equal gradients, counted."""
    learner, samples = _learner(tmp_path, "grpo.importance_sampling=on")
    _set_engine_logprobs(learner, samples, [math.log(2.0)] * 4)
    reference, ref_samples = _learner(tmp_path, "grpo.importance_sampling=on")
    _set_engine_logprobs(reference, ref_samples, [math.log(2.0)] * 4)
    with torch.no_grad():
        lp, _, _ = reference.logprobs(reference.model, ref_samples, [0], 1.0)
    samples[0].rollout.logprobs[1] = garbage
    ref_samples[0].rollout.logprobs[1] = float(lp[0, 1])  # the engine agrees there: weight 1
    m = learner.update(samples)
    want = reference.update(ref_samples)
    assert math.isfinite(m["losses/loss"]) and m["losses/loss"] == pytest.approx(want["losses/loss"], abs=1e-6)
    assert m["sampling/nonfinite_engine_logprobs"] == 1 and want["sampling/nonfinite_engine_logprobs"] == 0
    for a, b in zip(_grads(learner), _grads(reference)):
        assert torch.isfinite(a).all() and float((a - b).norm()) <= 1e-5 * max(float(b.norm()), 1e-12)
