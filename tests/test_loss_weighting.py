"""`grpo.loss_agg: prompt_mean` through the real trainer update on the tiny model."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from test_trainer import quiet, tiny_sets
from vigor_cli.settings import build_config
from vigor_cli.run.directory import RunDir
from vigor_cli.train.trainer import Trainer


def _trainer(tmp_path, name: str, *extra: str) -> Trainer:
    sets = tiny_sets(tmp_path, name, "train.prompts_per_step=8", "allocation.strategy=vigor", *extra)
    cfg = build_config(sets=sets)
    return Trainer(cfg, RunDir(tmp_path / name), None, quiet())


def _unequal_samples(trainer: Trainer):
    for step in range(1, 6):
        samples = trainer.rollout_phase(step).samples
        sizes = Counter(s.uid for s in samples)
        if len(set(sizes.values())) > 1 and any(s.advantage != 0 for s in samples):
            return samples
    pytest.fail("no step with unequal groups and a non-zero advantage")


@pytest.mark.slow
def test_prompt_mean_is_micro_batch_invariant_in_the_trainer(tmp_path):
    big = _trainer(tmp_path, "big", "grpo.loss_agg=prompt_mean", "grpo.micro_batch_tokens=4096", "grpo.beta=0.05")
    small = _trainer(tmp_path, "small", "grpo.loss_agg=prompt_mean", "grpo.micro_batch_tokens=16", "grpo.beta=0.05")
    samples = _unequal_samples(big)  # VIGOR: groups of 2, 6, ... rollouts
    m_big = big.learner.update(samples)
    m_small = small.learner.update(samples)
    assert m_small["losses/loss"] == pytest.approx(m_big["losses/loss"], rel=1e-5, abs=1e-7)
    for p, q in zip(big.learner.model.parameters(), small.learner.model.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_prompt_mean_loss_in_the_trainer_matches_the_hand_formula(tmp_path):
    """The trainer's step loss under prompt_mean equals mean over prompts of the token mean
    of the prompt's per-token losses, computed here from the trainer's own log-probs."""
    from vigor_cli import grpo

    tr = _trainer(tmp_path, "hand", "grpo.loss_agg=prompt_mean", "grpo.micro_batch_tokens=16")
    samples = _unequal_samples(tr)
    for i, s in enumerate(samples):  # uncentred advantages, so the prompts' losses differ
        s.advantage = 0.3 + 0.1 * (i % 5) if s.uid != samples[0].uid else -1.0
    g = tr.cfg.grpo
    per_prompt: dict[str, list[float]] = {}
    with torch.no_grad():
        for i, s in enumerate(samples):
            lp, _, mask = tr.learner.logprobs(tr.learner.model, samples, [i], tr.cfg.sampling.temperature)
            tok, _, _ = grpo.clipped_policy_loss(lp, lp, torch.tensor([s.advantage]), g.epsilon, g.epsilon_high)
            total, count = per_prompt.setdefault(s.uid, [0.0, 0.0])
            per_prompt[s.uid] = [total + float((tok * mask).sum()), count + float(mask.sum())]
    expected = sum(t / c for t, c in per_prompt.values()) / len(per_prompt)
    metrics = tr.learner.update(samples)
    assert metrics["losses/loss"] == pytest.approx(expected, rel=1e-5, abs=1e-7)
    # and it is not the token mean (dapo) on these unequal groups
    dapo = sum(t for t, _ in per_prompt.values()) / sum(c for _, c in per_prompt.values())
    assert abs(expected - dapo) > 1e-3
