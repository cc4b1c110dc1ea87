"""Paired intervals for the efficiency study that hold their coverage at a few seeds.

An arm is compared with a reference (grpo) on the seeds both ran (the same data order and
sampling seeds: paired):

- **mean accuracy over the run**: a Student t interval on the per-seed differences. A
  percentile bootstrap over 6-8 seeds is narrower than its nominal level (it ignores that the
  spread is itself estimated from a handful of seeds); :func:`coverage` measures both on
  synthetic differences with a known mean (`python bench/intervals.py` prints the table
  BENCHMARKS.md quotes).
- **speed-up in rollouts to target**: per seed, the reference's rollouts to target over the
  arm's (a seed that misses counts as infinitely many, so a ratio may be 0 or inf); the
  median ratio with the distribution-free interval of a median (order statistics of the
  binomial sign test), whose coverage is at least its level for any law and any seed count;
  at 8 seeds the 95 % interval is the smallest and largest ratio.
- **on the line**: a mean-accuracy comparison whose label would change between the 80 % and
  the 99 % interval (|t| between their critical values) is not settled: the study runs it to
  :data:`SETTLED_SEEDS` seeds before printing a win or a loss.

Standard library and numpy only; the t quantile is computed here (bisection on the
regularized incomplete beta function).
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Sequence

LEVEL = 0.95
"""The intervals' confidence level."""
LINE_LEVELS = (0.80, 0.99)
"""A label that differs between intervals of these two levels sits on the line."""
SETTLED_SEEDS = 12
"""Seeds a comparison on the line needs before its win or loss is printed."""


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


def on_the_line(values: Sequence[float]) -> bool:
    """Whether the t interval's label changes between :data:`LINE_LEVELS` (|t| between the
    two critical values): such a comparison needs more seeds before it is called."""
    n = len(values)
    if n < 2:
        return True
    t = abs(t_statistic(values))
    low, high = (t_quantile(0.5 + level / 2.0, n - 1) for level in LINE_LEVELS)
    return low <= t < high


def accuracy_label(values: Sequence[float], level: float = LEVEL) -> str:
    """The printed label of a mean-accuracy comparison: the t interval's verdict, except that
    a win or a loss on the line with fewer than :data:`SETTLED_SEEDS` seeds is 'unsettled'."""
    _, lo, hi = t_interval(values, level)
    label = verdict(lo, hi, 0.0)
    if label != "tie" and len(values) < SETTLED_SEEDS and on_the_line(values):
        return "unsettled"
    return label or "tie"


# --------------------------------------------------------------------------- coverage
def percentile_bootstrap(values: Sequence[float], rng: "object", reps: int = 4000,
                         level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): the percentile bootstrap of the mean over resampled values (what
    the study used before, for comparison)."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    idx = rng.integers(0, len(x), size=(reps, len(x)))
    lo, hi = np.quantile(x[idx].mean(axis=1), [0.5 - level / 2.0, 0.5 + level / 2.0], method="inverted_cdf")
    return float(x.mean()), float(lo), float(hi)


LAWS: dict[str, Callable] = {
    "normal": lambda rng, n: rng.normal(0.0, 1.0, n),
    "skewed": lambda rng, n: rng.lognormal(0.0, 0.75, n) - math.exp(0.75**2 / 2),
    "heavy": lambda rng, n: rng.standard_t(3, n),
}
"""Laws of synthetic paired differences with mean 0 (shifted by the known difference)."""


def coverage(method: str, n: int, law: str = "normal", delta: float = 0.5, trials: int = 2000,
             seed: int = 0, reps: int = 1000) -> float:
    """Share of ``trials`` synthetic studies of ``n`` paired differences (``law`` shifted by a
    known ``delta``) whose 95 % interval of the mean ('t' or 'bootstrap') holds ``delta``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    held = 0
    for _ in range(trials):
        x = (LAWS[law](rng, n) + delta).tolist()
        _, lo, hi = t_interval(x) if method == "t" else percentile_bootstrap(x, rng, reps)
        held += lo <= delta <= hi
    return held / trials


def median_coverage(n: int, law: str = "skewed", trials: int = 2000, seed: int = 0) -> float:
    """Share of synthetic studies whose :func:`median_interval` holds the law's median."""
    import numpy as np

    rng = np.random.default_rng(seed)
    truth = float(np.median(LAWS[law](np.random.default_rng(seed + 1), 400_000)))
    held = 0
    for _ in range(trials):
        _, lo, hi, _ = median_interval(LAWS[law](rng, n).tolist())
        held += lo <= truth <= hi
    return held / trials


def coverage_table(seeds: Sequence[int] = (4, 6, 8, 12), trials: int = 2000) -> str:
    """Markdown: the coverage of each method at each seed count and law (nominal 95 %)."""
    rows = ["| seeds | law | t interval | percentile bootstrap | median (order statistics) |", "|---|---|---|---|---|"]
    for n in seeds:
        for law in LAWS:
            t = coverage("t", n, law, trials=trials)
            b = coverage("bootstrap", n, law, trials=trials)
            m = median_coverage(n, law, trials=trials)
            rows.append(f"| {n} | {law} | {t:.1%} | {b:.1%} | {m:.1%} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(coverage_table())
