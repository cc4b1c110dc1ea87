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
"""grpo simulations averaged per width of the fit (each on its own pool draw)."""
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
    """The fitted shared step: transfer per unit of breadth (with its 95 % interval) and the
    disruption every update costs, from the held-out gains of short grpo runs at two widths."""

    value: float
    low: float
    high: float
    disruption: float
    observed: dict[int, dict]
    """Per width (rollouts per prompt): the held-out gain, its standard error, the breadth."""
    steps: int
    source: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"transfer": round(self.value, 5), "interval": [round(self.low, 5), round(self.high, 5)],
                "se": round((self.high - self.low) / (2 * 1.96), 5),
                "disruption": round(self.disruption, 5),
                "observed": {str(w): {k: None if v is None else round(v, 5) for k, v in o.items()}
                             for w, o in self.observed.items()},
                "steps": self.steps, "source": self.source, "notes": self.notes}


def given(transfer: float, disruption: float = 0.0, source: str = "given (--transfer)") -> TransferFit:
    """A transfer given, not fitted (no interval of its own)."""
    return TransferFit(transfer, transfer, transfer, disruption, {}, 0, source)


def pool_of(rates: Sequence[float], size: int, seed: int) -> np.ndarray:
    """``size`` training prompts' pass rates drawn (with replacement) from the measured ones."""
    return np.random.default_rng([seed, 7]).choice(np.asarray(rates, dtype=float), size)


def width_config(alloc: Any, strategy: str, width: int | None = None) -> Any:
    """The allocation config of ``strategy``; ``width``: grpo at that many rollouts per prompt."""
    update: dict[str, Any] = {"strategy": strategy}
    if width is not None:
        update["group_size"] = width
    return alloc.model_copy(update=update)


def run_curves(strategy: str, alloc: Any, shape: RunShape, rates: Sequence[float], transfer: float, seed: int,
               steps: int | None = None, disruption: float = 0.0, prompts: int | None = None) -> dict[str, list[float]]:
    """One simulated run's curves: the held-out metric after each step (the start first, key
    'metric') and each step's breadth."""
    settings = SimSettings(strategies=(strategy,), prompts=prompts or shape.prompts, steps=steps or shape.steps,
                           seed=seed, learn=True, lr=shape.lr, transfer=transfer, disruption=disruption,
                           held_out=shape.held_out_start, until_target=False, curves=True, target=None)
    check_settings(settings, alloc)
    out = run_strategy(strategy, alloc, settings, pool_of(rates, shape.pool, seed), None)
    if out.error:
        raise ValueError(f"{strategy}: {out.error}")
    curve = out.curve["pool" if shape.eval_on_pool else "held_out"]
    if shape.eval_on_pool:  # the pool's own start, shifted to the recorded start of the metric
        curve = [shape.held_out_start + v - curve[0] for v in curve]
    return {"metric": curve, "breadth": out.curve["breadth"]}


def metric_curve(strategy: str, alloc: Any, shape: RunShape, rates: Sequence[float], transfer: float,
                 seed: int, steps: int | None = None, disruption: float = 0.0) -> list[float]:
    """The simulated held-out metric after each step (the start first) of one run."""
    return run_curves(strategy, alloc, shape, rates, transfer, seed, steps, disruption)["metric"]


def _width_terms(alloc: Any, shape: RunShape, rates: Sequence[float], steps: Sequence[int], width: int,
                 seed: int) -> tuple[float, float]:
    """grpo at ``width`` rollouts per prompt (the batch's rollouts spread over its prompts),
    without transfer, over FIT_REPEATS pool draws: (mean over ``steps`` of the breadth summed
    to that step, mean over ``steps`` of the metric's gain from its own learning alone)."""
    prompts = max(1, shape.prompts * alloc.group_size // width)
    sums, own = [], []
    for r in range(FIT_REPEATS):
        c = run_curves("grpo", width_config(alloc, "grpo", width), shape, rates, 0.0, seed * 1000 + r,
                       steps=max(steps), prompts=prompts)
        sums.append(statistics.fmean(sum(c["breadth"][1:s + 1]) for s in steps))
        own.append(statistics.fmean(c["metric"][s] - c["metric"][0] for s in steps))
    return statistics.fmean(sums), statistics.fmean(own)


def fit_transfer(alloc: Any, shape: RunShape, rates: Sequence[float], steps: Sequence[int],
                 gains: dict[int, Sequence[float]], source: str, seed: int = 0,
                 se: dict[int, float | None] | None = None) -> TransferFit:
    """Fit the shared step to short real grpo runs: ``gains[w]`` the held-out gains (several
    seeds, or one) of grpo at ``w`` rollouts per prompt, averaged over its evaluations after
    ``steps``. To first order each update moves a held-out prompt by lr (1 - h0) (transfer x
    breadth - disruption); the simulation gives each width's summed breadth, so two widths give
    both coefficients (the transfer from how much more the wider run gained), one width the
    transfer alone (disruption 0). The transfer's 95 % interval carries the gains' standard
    errors (``se``, else the spread of the seeds); a transfer below 0 is 0."""
    se = dict(se or {})
    scale = shape.lr * (1 - shape.held_out_start)
    observed: dict[int, dict] = {}
    for w, values in gains.items():
        values = list(values)
        err = se.get(w)
        if err is None and len(values) > 1:
            err = statistics.stdev(values) / math.sqrt(len(values))
        summed, own = _width_terms(alloc, shape, rates, steps, w, seed)
        observed[w] = {"gain": statistics.fmean(values), "se": err, "breadth_summed": summed, "own": own}
    widths = sorted(observed, reverse=True)  # 8 first
    notes: list[str] = []
    k = statistics.fmean(steps)
    if len(widths) >= 2:
        a, b = observed[widths[0]], observed[widths[1]]
        d_breadth = b["breadth_summed"] - a["breadth_summed"]
        d_gain = (b["gain"] - b["own"]) - (a["gain"] - a["own"])
        value = d_gain / scale / d_breadth if d_breadth > 0 else 0.0
        d_se = math.sqrt((a["se"] or 0.0) ** 2 + (b["se"] or 0.0) ** 2)
        half = 1.96 * d_se / scale / d_breadth if d_breadth > 0 else 0.0
        value_c = max(0.0, value)
        disruption = (value_c * a["breadth_summed"] - (a["gain"] - a["own"]) / scale) / k
        if value < 0:
            notes.append(f"grpo at {widths[1]} rollouts per prompt gained less on held-out prompts than at "
                         f"{widths[0]}: no transfer by breadth")
    else:
        a = observed[widths[0]]
        value = (a["gain"] - a["own"]) / scale / a["breadth_summed"] if a["breadth_summed"] > 0 else 0.0
        half = 1.96 * (a["se"] or 0.0) / scale / a["breadth_summed"] if a["breadth_summed"] > 0 else 0.0
        value_c, disruption = max(0.0, value), 0.0
        if value <= 0:
            notes.append(f"the held-out gain ({a['gain'] * 100:+.2f} points) is no more than learning on its own "
                         "prompts gives: no transfer")
    low, high = max(0.0, value - half), min(TRANSFER_MAX, max(0.0, value + half))
    return TransferFit(min(value_c, TRANSFER_MAX), low, high, max(-1.0, min(1.0, disruption)), observed, max(steps),
                       source, notes)


def predict_verdicts(alloc: Any, shape: RunShape, rates: Sequence[float], transfer: float, repeats: int,
                     seed: int = 0, strategies: Sequence[str] = ("grpo", "vigor", "auto"),
                     disruption: float = 0.0) -> dict[str, dict]:
    """Each strategy against grpo as a study of ``repeats`` paired seeds would judge it: per
    repeat (its own pool draw and seed) the simulated mean of the held-out metric over the
    run's evaluations, the strategy's minus grpo's; the 95 % t interval of their mean, widened
    by the evaluations' own noise (two arms' ``eval_se`` over their evaluations), and its
    verdict: ahead (all of it above 0), behind (all below) or tie."""
    curves: dict[str, list[list[float]]] = {n: [] for n in strategies}
    evals = [s for s in shape.eval_steps if 0 < s <= shape.steps] or [shape.steps]
    for r in range(repeats):
        for name in strategies:
            c = metric_curve(name, width_config(alloc, name), shape, rates, transfer, seed * 1000 + r,
                             disruption=disruption)
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
