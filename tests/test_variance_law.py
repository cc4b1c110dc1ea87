"""The variance-law census (vigor_cli/study/variance_law.py): hand-worked counts, estimators on
synthetic Pareto samples of known k, and the paper's closed-form gain."""

from __future__ import annotations

import math
import random

import pytest

from vigor_cli.study import variance_law as vl


def pareto_sample(k: float, n: int, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [0.01 * (1 - rng.random()) ** (-1 / k) for _ in range(n)]


def test_bins_of_16_are_the_tiny_models_and_of_8_cover_every_count():
    assert [b[2] for b in vl.count_bins(16)] == ["0", "1-3", "4-7", "8-11", "12-15", "16"]
    bins8 = vl.count_bins(8)
    assert [b[2] for b in bins8] == ["0", "1", "2-3", "4-5", "6-7", "8"]
    for n in (2, 3, 5, 8, 16, 32):
        covered = [c for lo, hi, _ in vl.count_bins(n) for c in range(lo, hi + 1)]
        assert covered == list(range(n + 1))  # every count in exactly one bin, in order
    assert vl.histogram([0, 0, 3, 16, 12, 8], 16) == {"0": 2, "1-3": 1, "4-7": 0, "8-11": 1, "12-15": 1, "16": 1}


def test_unbiased_variance_and_exact_zero_variance_share():
    assert vl.unbiased_variance(0, 16) == 0 and vl.unbiased_variance(16, 16) == 0
    assert vl.unbiased_variance(8, 16) == pytest.approx(8 * 8 / (16 * 15))
    # groups of 8 drawn from 8 samples: zero-variance exactly when the 8 agree
    share, exact = vl.zero_variance_share([0, 8, 4, 1], 8)
    assert exact and share == pytest.approx(0.5)
    # c = 12 of 16: C(12,8) / C(16,8) of the 8-subsets are all correct, none all wrong
    share, exact = vl.zero_variance_share([12], 16)
    assert exact and share == pytest.approx(495 / 12870)
    # fewer samples than the group: plug-in p^8 + (1-p)^8, flagged
    share, exact = vl.zero_variance_share([2], 4)
    assert not exact and share == pytest.approx(2 * 0.5**8)


def test_zero_variance_share_is_unbiased_against_simulation():
    rng = random.Random(1)
    p = 0.8
    truth = p**8 + (1 - p) ** 8
    counts = [sum(rng.random() < p for _ in range(16)) for _ in range(20000)]
    share, _ = vl.zero_variance_share(counts, 16)
    assert share == pytest.approx(truth, abs=0.01)
    plug_in = sum((c / 16) ** 8 + (1 - c / 16) ** 8 for c in counts) / len(counts)
    assert plug_in > truth + 0.02  # the reason for the unbiased form


def test_concentration_hand_worked():
    v = [0.25, 0.25, 0, 0, 0, 0, 0, 0]  # a quarter of the prompts hold all the variance
    r = vl.concentration(v)
    assert r[0.5] == pytest.approx(2.0) and r[0.25] == pytest.approx(4.0) and r[0.125] == pytest.approx(4.0)
    assert vl.concentration([0.1] * 8)[0.125] == pytest.approx(1.0)
    assert vl.concentration([0.0] * 8)[0.5] == 1.0


@pytest.mark.parametrize("k", [1.5, 2.0, 3.0, 5.0])
def test_concentration_estimator_recovers_pareto_k(k):
    v = pareto_sample(k, 50000, seed=int(10 * k))
    assert vl.fit_k_concentration(v) == pytest.approx(k, rel=0.1)


@pytest.mark.parametrize("k", [1.5, 2.0, 3.0, 5.0])
def test_hill_estimator_recovers_pareto_k(k):
    v = pareto_sample(k, 50000, seed=int(10 * k) + 1)
    assert vl.hill_k(v, top=0.05) == pytest.approx(k, rel=0.1)


def test_estimator_edges():
    assert math.isinf(vl.fit_k_concentration([0.2] * 10))  # flat: no tail
    assert vl.hill_k([0.1, 0.2]) is None  # too few positive values
    assert math.isinf(vl.hill_k([0.25] * 40))  # top values all equal


def test_closed_form_eta_matches_the_papers_values():
    # T = 4, alpha = 0.5, gamma = 2: the paper quotes 3.69 near k = 1, 2.28 at 1.5, 1.81 at 2, 1.46 at 3;
    # the k = 1 limit itself is (1 + 2 + 4 + 8) / 4
    assert vl.eta_closed_form(1.0) == pytest.approx(3.75, abs=0.01)  # 15/4, the k = 1 limit
    assert vl.eta_closed_form(1.5) == pytest.approx(2.28, abs=0.01)
    assert vl.eta_closed_form(2.0) == pytest.approx(1.81, abs=0.01)
    assert vl.eta_closed_form(3.0) == pytest.approx(1.46, abs=0.01)
    assert vl.eta_closed_form(0.7) == vl.eta_closed_form(1.0)  # k <= 1: the limit
    assert vl.eta_closed_form(math.inf) == 1.0


@pytest.mark.parametrize("k", [1.5, 3.0])
def test_empirical_eta_agrees_with_the_closed_form_on_pareto_samples(k):
    v = pareto_sample(k, 50000, seed=7)
    assert vl.eta_empirical(v) == pytest.approx(vl.eta_closed_form(k), rel=0.08)


def test_census_orders_heavy_tailed_above_narrow():
    # heavy-tailed: most prompts always right or always wrong, a minority in between
    heavy = [0] * 100 + [16] * 90 + [2, 5, 8, 11, 14, 7] * 11
    # narrow: pass rates spread around the middle (like the bundled tiny-math start)
    narrow = [3, 5, 6, 7, 8, 9, 10, 12] * 32
    h, n = vl.census(heavy, 16), vl.census(narrow, 16)
    assert h.zero_variance_share_8 > 0.7 > n.zero_variance_share_8
    assert h.k < 2 < n.k
    assert h.eta > n.eta > 1.0
    assert h.speedup == pytest.approx(h.eta ** (1 / 3))
    assert sum(h.histogram.values()) == len(heavy)
    d = h.to_dict()
    assert d["histogram"]["0"] == 100 and "k concentration" not in d
    assert "Pareto k" in h.summary() and "eta^(1/3)" in h.summary()


def test_census_rejects_bad_input():
    with pytest.raises(ValueError):
        vl.census([0, 17], 16)
    with pytest.raises(ValueError):
        vl.census([], 16)
    with pytest.raises(ValueError):
        vl.census([1], 1)
