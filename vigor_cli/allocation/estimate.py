"""Pass-rate estimates and expected gradient signal: the arithmetic `knapsack` and `auto` share.

Plain Python (``math`` only), no torch or numpy, so allocators stay cheap to import.

Model. A prompt's rollouts are Bernoulli(p) draws; p has a Beta(a, b) prior. A
fractional reward r in [0, 1] counts as r successes and 1 - r failures (pseudo-counts),
so the same formulas serve binary and fractional rewards.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
from typing import Sequence

MIN_CONCENTRATION = 0.05
"""Smallest a + b of a fitted prior (pass rates all at 0 or 1: a U-shaped law)."""
MAX_CONCENTRATION = 1000.0
"""Largest a + b of a fitted prior (no spread between prompts beyond binomial noise)."""


def posterior(prior: tuple[float, float], rewards: Sequence[float]) -> tuple[float, float]:
    """Beta(a, b) after ``rewards``: a + sum(r), b + sum(1 - r)."""
    s = float(sum(rewards))
    return prior[0] + s, prior[1] + len(rewards) - s


def posterior_mean(ab: tuple[float, float]) -> float:
    return ab[0] / (ab[0] + ab[1])


# --------------------------------------------------------------------------- Knapsack-RL
def p_not_all_equal(p: float, n: int) -> float:
    """P(a group of n Bernoulli(p) rewards holds both values) = 1 - p^n - (1-p)^n."""
    if n < 2:
        return 0.0
    return max(0.0, 1.0 - p**n - (1.0 - p) ** n)


def info_gain(p: float) -> float:
    """Knapsack-RL's InfoGain(p) = p (1 - p)^2 (peak at p = 1/3)."""
    return p * (1.0 - p) ** 2


def knapsack_value(p: float, n: int) -> float:
    """Knapsack-RL's value of giving a prompt of pass rate p a group of n rollouts."""
    return p_not_all_equal(p, n) * info_gain(p)


# --------------------------------------------------------------------------- signal
def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def beta_binomial_pmf(j: int, a: float, b: float) -> list[float]:
    """P(K = k), k = 0..j, for K ~ BetaBinomial(j, a, b)."""
    base = _log_beta(a, b)
    log_choose = [math.lgamma(j + 1) - math.lgamma(k + 1) - math.lgamma(j - k + 1) for k in range(j + 1)]
    return [math.exp(log_choose[k] + _log_beta(a + k, b + j - k) - base) for k in range(j + 1)]


def expected_signal(successes: float, seen: int, extra: int, ab: tuple[float, float]) -> float:
    """E[(seen + extra) x std of the pool] after ``extra`` more rollouts.

    ``successes`` of ``seen`` rewards were observed; ``ab`` is the posterior Beta after
    them. For a pool of n rewards with s successes, n x population std = sqrt(s (n - s)),
    so this is E[sqrt((s + K)(n - s + extra - K))] with K ~ BetaBinomial(extra, a, b).
    """
    failures = seen - successes
    if extra == 0:
        return math.sqrt(max(0.0, successes * failures))
    pmf = beta_binomial_pmf(extra, ab[0], ab[1])
    return sum(w * math.sqrt(max(0.0, (successes + k) * (failures + extra - k))) for k, w in enumerate(pmf))


# --------------------------------------------------------------------------- laws
def fit_beta_prior(mean: float, mixed: float, n: int) -> tuple[float, float]:
    """Beta(a, b) of pass rates matching a census of groups of n: mean reward ``mean`` and
    mean pairwise disagreement ``mixed`` (the share of ordered pairs of rewards within a
    group that differ, an unbiased estimate of 2 E[p (1 - p)]).

    Method of moments: Var(p) = mean (1 - mean) - mixed / 2, a + b = mean (1 - mean) / Var(p) - 1,
    clipped to [MIN_CONCENTRATION, MAX_CONCENTRATION]; Beta(1, 1) when the mean is 0 or 1
    or n < 2 (nothing to fit).
    """
    if n < 2 or not 0.0 < mean < 1.0:
        return (1.0, 1.0)
    spread = mean * (1.0 - mean)
    var_p = spread - mixed / 2.0
    if var_p <= spread / (MAX_CONCENTRATION + 1.0):
        total = MAX_CONCENTRATION
    else:
        total = min(MAX_CONCENTRATION, max(MIN_CONCENTRATION, spread / var_p - 1.0))
    return (mean * total, (1.0 - mean) * total)


def beta_zero_variance(ab: tuple[float, float], n: int) -> float:
    """E[p^n + (1 - p)^n] for p ~ Beta(a, b): the expected share of groups of n binary rewards
    that are all equal (zero variance) under a law of pass rates."""
    if n < 2:
        return 1.0
    a, b = ab
    base = _log_beta(a, b)
    return math.exp(_log_beta(a + n, b) - base) + math.exp(_log_beta(a, b + n) - base)


def pair_disagreement(rewards: Sequence[float]) -> float:
    """Share of ordered pairs (i != j) of the group's rewards with r_i (1 - r_j) counted:
    2 s (n - s) / (n (n - 1)) for binary rewards; its expectation is 2 E[p (1 - p)]."""
    n = len(rewards)
    if n < 2:
        return 0.0
    s = sum(rewards)
    sq = sum(r * r for r in rewards)
    # sum over i != j of r_i (1 - r_j) = s * n - s^2 - (s - sq) ... written out:
    cross = s * (n - 1) - (s * s - sq)
    return 2.0 * cross / (n * (n - 1))


def hill_tail_index(values: Sequence[float], tail: float = 0.25) -> float | None:
    """Hill's estimate of the Pareto shape k of the upper tail of ``values`` (> 0 only).

    Uses the largest ceil(tail x m) positive values above the next one:
    k = 1 / mean(ln(v_i / v_threshold)). None with fewer than 3 positive values;
    math.inf when the tail is flat (all equal).
    """
    vs = sorted((v for v in values if v > 0), reverse=True)
    if len(vs) < 3:
        return None
    top = max(2, min(len(vs) - 1, math.ceil(tail * len(vs))))
    threshold = vs[top]
    logs = [math.log(v / threshold) for v in vs[:top]]
    mean_log = sum(logs) / len(logs)
    return math.inf if mean_log <= 1e-12 else 1.0 / mean_log


def pareto_eta(k: float, rounds: int, alpha: float, gamma: float) -> float:
    """VIGOR's gain under Pareto(k) variances: sum (gamma alpha^(1-1/k))^i / sum (alpha gamma)^i."""
    top = sum((gamma * alpha ** (1 - 1 / k)) ** i for i in range(rounds))
    bottom = sum((alpha * gamma) ** i for i in range(rounds))
    return top / bottom
