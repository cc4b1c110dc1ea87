"""Confidence intervals that hold their level with a handful of repeats: Student's t interval
of a mean and the prediction interval of one more value (the t quantile computed here, by
bisection on the regularized incomplete beta function: no scipy), and the distribution-free
order-statistic interval of a median.

`vigor probe` reads its simulation repeats with them; the efficiency study's paired
comparisons (bench/intervals.py) too.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

LEVEL = 0.95
"""The default confidence level."""


# --------------------------------------------------------------------------- Student's t
def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection to 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


# --------------------------------------------------------------------------- intervals
def t_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): the t interval of the mean of ``values`` (paired differences)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, -math.inf, math.inf
    half = t_quantile(0.5 + level / 2.0, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def prediction_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): where one more value of the same law falls with probability ``level``
    (mean +- t x sd x sqrt(1 + 1/n)); over bootstrap replicates of an estimate, what another
    sample would estimate."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, -math.inf, math.inf
    half = t_quantile(0.5 + level / 2.0, n - 1) * statistics.stdev(values) * math.sqrt(1.0 + 1.0 / n)
    return mean, mean - half, mean + half


def t_statistic(values: Sequence[float]) -> float:
    """mean / standard error (inf when every value is the same and not 0)."""
    n, mean = len(values), statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else 0.0
    if sd == 0.0:
        return 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    return mean / (sd / math.sqrt(n))


def _binomial_cdf(k: int, n: int) -> float:
    """P(B <= k), B ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float, float]:
    """(median, low, high, coverage): the order-statistic interval of the median, the widest
    k-th smallest to k-th largest whose coverage 1 - 2 P(B <= k - 1) is at least ``level``
    (B ~ Binomial(n, 1/2)); infinite ends when no k reaches it (too few values)."""
    xs = sorted(values)
    n = len(xs)
    k = 0
    while k + 1 <= n // 2 and 1.0 - 2.0 * _binomial_cdf(k, n) >= level:
        k += 1
    med = statistics.median(xs)
    if k == 0:
        return med, -math.inf, math.inf, 1.0
    return med, xs[k - 1], xs[n - k], 1.0 - 2.0 * _binomial_cdf(k - 1, n)


def verdict(lo: float | None, hi: float | None, null: float) -> str | None:
    """'win' when the whole interval is above ``null``, 'loss' when below, else 'tie'."""
    if lo is None or hi is None:
        return None
    return "win" if lo > null else ("loss" if hi < null else "tie")
