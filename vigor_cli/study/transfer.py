"""Transfer between prompts: the learning model's shared step fitted to how a real run's held-out
pass rate moved, and each strategy's verdict against grpo predicted from the fitted model, as a
study of paired seeds would judge it (mean held-out pass rate over the run, 95 % t interval).

Details: docs/modules.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from vigor_cli.study.intervals import t_quantile
from vigor_cli.study.simulate import SimSettings, check_settings, run_strategy

TRANSFER_MAX = 1.0
"""The largest shared step the fit considers (SimSettings' bound)."""
FIT_REPEATS = 2
"""grpo simulations averaged per trial coefficient of the fit (each on its own pool draw)."""
VERDICTS = {"win": "ahead", "loss": "behind", "tie": "tie"}
"""The study's interval verdicts in the probe's words."""


@dataclass
class RunShape:
    """The run a prediction is about: its batch, length, pool and evaluation."""

    prompts: int
    """Prompts per step (grpo's batch; the allocators draw from the same pool)."""
    steps: int
    """Steps of the run."""
    pool: int
    """Training prompts the run draws from (they recur once it has drawn them all)."""
    eval_steps: list[int]
    """Steps after which the run evaluates (the start, step 0, is not counted in the mean)."""
    eval_se: float
    """Standard error of one evaluation of the held-out pass rate (its sampling noise)."""
    held_out_start: float
    """The held-out metric at the start."""
    eval_on_pool: bool = False
    """The evaluation set is the training pool itself (tiny-facts): the metric is the pool's mean."""
    lr: float = SimSettings.lr
    """The learning model's own step per unit of signal (kept at the model's default)."""


@dataclass
class TransferFit:
    """A fitted shared step: the value matching the observed gain, and its 95 % interval."""

    value: float
    low: float
    high: float
    observed_gain: float
    observed_se: float | None
    steps: int
    source: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"transfer": round(self.value, 5), "interval": [round(self.low, 5), round(self.high, 5)],
                "observed_gain": round(self.observed_gain, 5),
                "observed_se": None if self.observed_se is None else round(self.observed_se, 5),
                "steps": self.steps, "source": self.source, "notes": self.notes}


def pool_of(rates: Sequence[float], size: int, seed: int) -> np.ndarray:
    """``size`` training prompts' pass rates drawn (with replacement) from the measured ones."""
    return np.random.default_rng([seed, 7]).choice(np.asarray(rates, dtype=float), size)


def metric_curve(strategy: str, alloc: Any, shape: RunShape, rates: Sequence[float], transfer: float,
                 seed: int, steps: int | None = None) -> list[float]:
    """The simulated held-out metric after each step (the start first) of one run."""
    settings = SimSettings(strategies=(strategy,), prompts=shape.prompts, steps=steps or shape.steps, seed=seed,
                           learn=True, lr=shape.lr, transfer=transfer, held_out=shape.held_out_start,
                           until_target=False, curves=True, target=None)
    check_settings(settings, alloc)
    out = run_strategy(strategy, alloc, settings, pool_of(rates, shape.pool, seed), None)
    if out.error:
        raise ValueError(f"{strategy}: {out.error}")
    curve = out.curve["pool" if shape.eval_on_pool else "held_out"]
    if shape.eval_on_pool:  # the pool's own start, shifted to the recorded start of the metric
        curve = [shape.held_out_start + v - curve[0] for v in curve]
    return curve


def _grpo_gain(alloc: Any, shape: RunShape, rates: Sequence[float], transfer: float, steps: Sequence[int],
               seed: int) -> float:
    """Mean over FIT_REPEATS grpo simulations of the metric's gain averaged over ``steps``."""
    gains = []
    for r in range(FIT_REPEATS):
        curve = metric_curve("grpo", alloc.model_copy(update={"strategy": "grpo"}), shape, rates, transfer,
                             seed * 1000 + r, steps=max(steps))
        gains.append(statistics.fmean(curve[s] - curve[0] for s in steps))
    return statistics.fmean(gains)


def solve_transfer(alloc: Any, shape: RunShape, rates: Sequence[float], steps: Sequence[int], gain: float,
                   seed: int = 0) -> float:
    """The shared step at which grpo's simulated gain, averaged over ``steps``, equals ``gain``
    (bisection: the gain rises with the step); 0 when even no transfer gains more, TRANSFER_MAX
    when even the largest gains less."""
    lo, hi = 0.0, TRANSFER_MAX
    if _grpo_gain(alloc, shape, rates, lo, steps, seed) >= gain:
        return 0.0
    if _grpo_gain(alloc, shape, rates, hi, steps, seed) <= gain:
        return hi
    for _ in range(24):
        mid = math.sqrt(max(lo, 1e-6) * hi) if hi / max(lo, 1e-6) > 4 else (lo + hi) / 2
        lo, hi = (mid, hi) if _grpo_gain(alloc, shape, rates, mid, steps, seed) < gain else (lo, mid)
        if hi - lo <= 1e-4 * hi:
            break
    return (lo + hi) / 2


def fit_transfer(alloc: Any, shape: RunShape, rates: Sequence[float], steps: Sequence[int], gains: Sequence[float],
                 se: float | None, source: str, seed: int = 0) -> TransferFit:
    """Fit the shared step to a real grpo run's held-out gains ``gains`` after ``steps`` steps
    (their mean is matched), with the interval of the gain +- 1.96 ``se`` carried through."""
    gain = statistics.fmean(gains)
    value = solve_transfer(alloc, shape, rates, steps, gain, seed)
    notes = []
    if value == 0.0:
        notes.append(f"the held-out gain ({gain * 100:+.2f} points) is no more than learning on its own "
                     "prompts gives: no transfer")
    if se is None or se <= 0:
        low = high = value
    else:
        low = solve_transfer(alloc, shape, rates, steps, gain - 1.96 * se, seed)
        high = solve_transfer(alloc, shape, rates, steps, gain + 1.96 * se, seed)
    return TransferFit(value, low, high, gain, se, max(steps), source, notes)


def predict_verdicts(alloc: Any, shape: RunShape, rates: Sequence[float], transfer: float, repeats: int,
                     seed: int = 0, strategies: Sequence[str] = ("grpo", "vigor", "auto")) -> dict[str, dict]:
    """Each strategy against grpo as a study of ``repeats`` paired seeds would judge it: per
    repeat (its own pool draw and seed) the simulated mean of the held-out metric over the
    run's evaluations, the strategy's minus grpo's; the 95 % t interval of their mean, widened
    by the evaluations' own noise (two arms' ``eval_se`` over their evaluations), and its
    verdict: ahead (all of it above 0), behind (all below) or tie."""
    curves: dict[str, list[list[float]]] = {n: [] for n in strategies}
    evals = [s for s in shape.eval_steps if 0 < s <= shape.steps] or [shape.steps]
    for r in range(repeats):
        for name in strategies:
            c = metric_curve(name, alloc.model_copy(update={"strategy": name}), shape, rates, transfer, seed * 1000 + r)
            curves[name].append(c)
    mean_of = lambda c: statistics.fmean(c[s] for s in evals)  # noqa: E731
    base = [mean_of(c) for c in curves["grpo"]]
    out = {}
    for name in strategies:
        runs = [mean_of(c) for c in curves[name]]
        diffs = [a - b for a, b in zip(runs, base)]
        row: dict[str, Any] = {"mean_over_run": round(statistics.fmean(runs), 4), "repeats": repeats}
        if name != "grpo":
            m = statistics.fmean(diffs)
            var = (statistics.variance(diffs) if len(diffs) > 1 else 0.0) + 2 * shape.eval_se ** 2 / len(evals)
            half = t_quantile(0.975, max(repeats - 1, 1)) * math.sqrt(var / max(repeats, 1))
            lo, hi = m - half, m + half
            verdict = "win" if lo > 0 else ("loss" if hi < 0 else "tie")
            row.update(delta=round(m, 4), interval=[round(lo, 4), round(hi, 4)], verdict=VERDICTS[verdict],
                       final_delta=round(statistics.fmean(c[-1] for c in curves[name])
                                         - statistics.fmean(c[-1] for c in curves["grpo"]), 4))
        out[name] = row
    return out
