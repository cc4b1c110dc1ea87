"""vigor's own token sampler (vigor_cli/rollout/sampler.py): the draw it makes, its law, top-p
and greedy, and that it is the draw torch.multinomial made before it replaced that call."""

from __future__ import annotations

import pytest
import torch

from vigor_cli.rollout.sampler import Sampler, exponential_race, top_p_filter


@pytest.mark.parametrize("shape, seed", [((1, 7), 0), ((5, 263), 1), ((64, 263), 12345), ((3, 4096), 2**62)])
def test_the_race_draws_what_torch_multinomial_drew(shape, seed):
    """Bit for bit, over consecutive draws of one generator (the committed studies sampled
    with torch.multinomial(p, 1); their tokens must not change)."""
    logits = torch.randn(shape, generator=torch.Generator().manual_seed(seed % 1000)) * 3
    probs = torch.softmax(logits, -1)
    ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    for _ in range(3):
        expected = torch.multinomial(probs, 1, generator=theirs).squeeze(-1)
        assert torch.equal(exponential_race(probs, ours), expected)
    assert torch.equal(ours.get_state(), theirs.get_state())  # the same amount of the stream consumed


def test_the_race_follows_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0]).repeat(20000, 1)
    drawn = exponential_race(probs, torch.Generator().manual_seed(3))
    freq = torch.bincount(drawn, minlength=5).double() / len(drawn)
    assert freq[4] == 0  # a zero-probability token is never drawn
    assert torch.allclose(freq[:4], probs[0, :4].double(), atol=0.01), freq


def test_top_p_keeps_the_nucleus_and_the_token_that_crosses_it():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(top_p_filter(logits, 0.7))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7, 0.5 + 0.3 crosses it
    assert top_p_filter(logits, 1.0) is logits
    sampler = Sampler(1.0, 0.7, seed=0)
    draws = torch.cat([sampler.draw(logits) for _ in range(300)])
    assert set(draws.tolist()) == {0, 1}


def test_greedy_takes_the_argmax_and_draws_nothing():
    sampler = Sampler(0.0, 1.0, seed=5)
    before = sampler.generator.get_state()
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    assert sampler.draw(sampler.scale(logits)).tolist() == [1, 0]
    assert torch.equal(sampler.generator.get_state(), before)


def test_the_seed_fixes_the_draws_and_temperature_scales_the_logits():
    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(0))
    a, b, c = Sampler(0.7, 0.9, 11), Sampler(0.7, 0.9, 11), Sampler(0.7, 0.9, 12)
    draws = [s.draw(s.scale(logits)) for s in (a, b, c)]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    assert torch.allclose(a.scale(logits), logits / 0.7)
    assert Sampler(1.0, 1.0, None).generator.initial_seed() == 0
