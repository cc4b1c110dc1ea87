"""Paired intervals for the efficiency study that hold their coverage at a few seeds.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vigor_cli.study.intervals import (  # noqa: E402,F401  (t_quantile, median_interval: this module's public names too)
    LEVEL, median_interval, t_interval, t_quantile, t_statistic, verdict,
)

LINE_LEVELS = (0.80, 0.99)
"""A label that differs between intervals of these two levels sits on the line."""
SETTLED_SEEDS = 12
"""Seeds a comparison on the line needs before its win or loss is printed."""


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
