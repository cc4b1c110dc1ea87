"""The unbiased pass@k estimator against a brute-force count over every k-subset."""

from __future__ import annotations

from itertools import combinations

import pytest

from vigor_cli.report.metrics import (
    overall,
    pass_at_k,
    pass_at_k_exact,
    ks_for,
    summarize_problems,
)


def brute_force_pass_at_k(verdicts: list[bool], k: int) -> float:
    """Share of the k-subsets of the samples that hold at least one correct sample."""
    subsets = list(combinations(range(len(verdicts)), k))
    hits = sum(any(verdicts[i] for i in s) for s in subsets)
    return hits / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10])
def test_matches_brute_force_for_every_c_and_k(n):
    for c in range(n + 1):
        # Where the correct samples sit must not matter: put them at the end.
        verdicts = [False] * (n - c) + [True] * c
        for k in range(1, n + 1):
            expected = brute_force_pass_at_k(verdicts, k)
            assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)
            assert pass_at_k_exact(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_1_is_the_mean_and_large_n_is_stable():
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16)
    # the running product stays finite where binomials would be astronomically large
    assert 0.0 < pass_at_k(2000, 3, 100) < 1.0
    assert pass_at_k(2000, 3, 100) == pytest.approx(pass_at_k_exact(2000, 3, 100), rel=1e-9)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 2, 5)


def test_summary_of_a_benchmark():
    rewards = [[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
    s = summarize_problems(rewards)
    assert s["problems"] == 3 and s["samples"] == 12 and s["n"] == 4
    assert s["avg@n"] == pytest.approx(6 / 12)
    assert list(s["pass@k"]) == ["1", "2", "4"]
    assert s["pass@k"]["1"] == pytest.approx(6 / 12)
    assert s["pass@k"]["4"] == pytest.approx(2 / 3)
    expected_p2 = (brute_force_pass_at_k([True, False, False, True], 2) + 0 + 1) / 3
    assert s["pass@k"]["2"] == pytest.approx(expected_p2)
    # partial rewards (code test fractions) count only at full reward for pass@k
    s = summarize_problems([[0.5, 1.0]], test_fractions=[[0.5, 1.0]])
    assert s["pass@k"]["1"] == pytest.approx(0.5)
    assert s["test_pass_rate"] == pytest.approx(0.75)


def test_ks_and_overall():
    assert ks_for(1) == [1]
    assert ks_for(6) == [1, 2, 4, 6]
    assert ks_for(8) == [1, 2, 4, 8]
    six = {name: {"avg@n": 0.1 * i} for i, name in enumerate(
        ["math500", "aime24", "amc23", "gaokao2023en", "minerva_math", "olympiadbench"])}
    out = overall(six | {"gsm8k": {"avg@n": 0.9}})
    assert out["math6_avg@n"] == pytest.approx(0.25)
    assert out["mean_avg@n"] == pytest.approx((1.5 + 0.9) / 7)
    assert "math6_avg@n" not in overall({"math500": {"avg@n": 0.5}})
