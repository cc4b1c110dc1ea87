"""The variance law of a starting point: how reward variance is spread over prompts.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

FRACTIONS = (0.5, 0.25, 0.125)
"""Top fractions the concentration estimator fits at (VIGOR's kept shares at alpha = 1/2)."""
HILL_TOP = 0.25
"""Share of the positive variances the Hill estimator uses (its top order statistics)."""
GROUP = 8
"""Group size of the zero-variance share (GRPO's 8 rollouts per prompt)."""


def count_bins(n: int) -> list[tuple[int, int, str]]:
    """Histogram bins of correct-out-of-``n``: 0, four quarter bins of 1..n-1, n.
    For n = 16: 0 / 1-3 / 4-7 / 8-11 / 12-15 / 16 (the tiny model's measurement bins)."""
    bins = [(0, 0, "0")]
    inner: dict[int, list[int]] = {}
    for c in range(1, n):
        inner.setdefault(min(3, 4 * c // n), []).append(c)
    for q in sorted(inner):
        lo, hi = inner[q][0], inner[q][-1]
        bins.append((lo, hi, f"{lo}" if lo == hi else f"{lo}-{hi}"))
    bins.append((n, n, str(n)))
    return bins


def histogram(counts: Sequence[int], n: int) -> dict[str, int]:
    return {label: sum(lo <= c <= hi for c in counts) for lo, hi, label in count_bins(n)}


def unbiased_variance(c: int, n: int) -> float:
    """Unbiased estimate of p(1-p) from c successes in n Bernoulli(p) draws (n >= 2)."""
    return c * (n - c) / (n * (n - 1))


def zero_variance_share(counts: Sequence[int], n: int, group: int = GROUP) -> tuple[float, bool]:
    """(expected share of zero-variance groups of ``group``, exact?): unbiased when n >= group."""
    if n >= group:
        den = math.comb(n, group)
        return sum((math.comb(c, group) + math.comb(n - c, group)) / den for c in counts) / len(counts), True
    return sum((c / n) ** group + (1 - c / n) ** group for c in counts) / len(counts), False


def concentration(variances: Sequence[float], fractions: Sequence[float] = FRACTIONS) -> dict[float, float]:
    """R(f) = mean of the top ``f`` share of ``variances`` / their mean (at least one prompt)."""
    v = sorted(variances, reverse=True)
    mean = sum(v) / len(v)
    if mean <= 0:
        return {f: 1.0 for f in fractions}
    out = {}
    for f in fractions:
        top = max(1, round(f * len(v)))
        out[f] = (sum(v[:top]) / top) / mean
    return out


def fit_k_concentration(variances: Sequence[float], fractions: Sequence[float] = FRACTIONS) -> float:
    """Pareto k from R(f) = f^(-1/k): least squares of ln R on ln(1/f) through the origin.
    inf when the top is no richer than the mean (flat variances)."""
    r = concentration(variances, fractions)
    xs = [math.log(1 / f) for f in fractions]
    ys = [math.log(r[f]) for f in fractions]
    slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    return math.inf if slope <= 1e-9 else 1 / slope


def hill_k(values: Sequence[float], top: float = HILL_TOP) -> float | None:
    """Hill's estimator of the tail index on the top ``top`` share of the positive values:
    m / sum_{i<m} ln(x_(i) / x_(m)), x_(m) the m-th largest. None with fewer than 3 values
    or no spread among them; inf when the top values are all equal."""
    v = sorted((x for x in values if x > 0), reverse=True)
    m = max(2, int(top * len(v)))
    if len(v) <= m:
        return None
    s = sum(math.log(v[i] / v[m]) for i in range(m))
    return math.inf if s <= 0 else m / s


def eta_closed_form(k: float, rounds: int = 4, alpha: float = 0.5, gamma: float = 2.0) -> float:
    """The paper's gain for Pareto(k) variances; k <= 1 takes the k -> 1 limit, k = inf gives 1."""
    from vigor_cli.study.simulate import pareto_eta

    if math.isinf(k):
        return 1.0
    return pareto_eta(max(k, 1.0), rounds, alpha, gamma)


def eta_empirical(variances: Sequence[float], rounds: int = 4, alpha: float = 0.5, gamma: float = 2.0) -> float:
    """The same gain from the measured concentration R(alpha^i), ranking on the true variances."""
    r = concentration(variances, [alpha**i for i in range(1, rounds)])
    top = 1.0 + sum((alpha * gamma) ** i * r[alpha**i] for i in range(1, rounds))
    return top / sum((alpha * gamma) ** i for i in range(rounds))


@dataclass
class VarianceLaw:
    """The census of one starting point (see the module docstring for every field)."""

    prompts: int
    samples: int
    mean_pass_rate: float
    histogram: dict[str, int]
    zero_variance_share_8: float
    zero_variance_exact: bool
    mean_variance: float
    top_eighth_variance: float
    concentration: dict[str, float]
    k: float
    k_hill: float | None
    eta: float
    speedup: float
    eta_empirical: float
    schedule: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("k", "k_hill"):
            if d[key] is not None and math.isinf(d[key]):
                d[key] = "inf"
        return d

    def summary(self) -> str:
        """One line: histogram, zero-variance share, k, eta."""
        k = "inf" if math.isinf(self.k) else f"{self.k:.2f}"
        hill = "-" if self.k_hill is None else ("inf" if math.isinf(self.k_hill) else f"{self.k_hill:.2f}")
        hist = " / ".join(f"{v}" for v in self.histogram.values())
        return (
            f"pass counts of {self.samples} ({' / '.join(self.histogram)}): {hist}; mean pass rate "
            f"{self.mean_pass_rate:.3f}; zero-variance groups of 8: {self.zero_variance_share_8:.2f}"
            f"{'' if self.zero_variance_exact else ' (plug-in)'}; top-eighth / mean variance "
            f"{self.concentration.get('0.125', 1.0):.2f}; Pareto k {k} (Hill {hill}); "
            f"closed-form eta {self.eta:.2f}, eta^(1/3) {self.speedup:.2f}; empirical eta {self.eta_empirical:.2f}"
        )


def census(counts: Sequence[int], samples: int, *, rounds: int = 4, alpha: float = 0.5, gamma: float = 2.0) -> VarianceLaw:
    """The variance law of ``counts`` (correct out of ``samples`` per prompt)."""
    counts = [int(c) for c in counts]
    if samples < 2:
        raise ValueError("the variance law needs at least 2 samples per prompt")
    if not counts:
        raise ValueError("the variance law needs at least one prompt")
    if any(not 0 <= c <= samples for c in counts):
        raise ValueError(f"pass counts must lie in 0..{samples}")
    var = [unbiased_variance(c, samples) for c in counts]
    zero, exact = zero_variance_share(counts, samples)
    k = fit_k_concentration(var)
    eta = eta_closed_form(k, rounds, alpha, gamma)
    conc = concentration(var)
    return VarianceLaw(
        prompts=len(counts),
        samples=samples,
        mean_pass_rate=sum(counts) / (samples * len(counts)),
        histogram=histogram(counts, samples),
        zero_variance_share_8=zero,
        zero_variance_exact=exact,
        mean_variance=sum(var) / len(var),
        top_eighth_variance=sum(sorted(var, reverse=True)[: max(1, round(len(var) / 8))]) / max(1, round(len(var) / 8)),
        concentration={str(f): r for f, r in conc.items()},
        k=k,
        k_hill=hill_k(var),
        eta=eta,
        speedup=eta ** (1 / 3),
        eta_empirical=eta_empirical(var, rounds, alpha, gamma),
        schedule={"rounds": rounds, "alpha": alpha, "gamma": gamma},
    )
