"""Statistics of the efficiency study: medians over seeds (a miss counts as infinitely many
rollouts), speed-ups over grpo, paired intervals and verdicts (bench/intervals.py), the
compute axis, the target accuracy and the checks a table is read by."""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from bench import intervals

from .design import BASELINE, rollouts_per_prompt

def median_with_misses(values: Sequence[float | None]) -> float | None:
    """Median where None (target never reached) counts as +infinity; None if the median is."""
    vals = sorted(math.inf if v is None else v for v in values)
    if not vals:
        return None
    n = len(vals)
    mid = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    return None if math.isinf(mid) else mid


def spread(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(min, max) over the seeds that reached the target."""
    got = [v for v in values if v is not None]
    return (min(got), max(got)) if got else (None, None)


def ratio(base: float | None, mine: float | None) -> float | None:
    return base / mine if base and mine else None


def summarize_arm(measures: list[dict]) -> dict:
    out: dict[str, Any] = {"seeds": len(measures)}
    out["reached"] = sum(m["rollouts_to_target"] is not None for m in measures)
    for axis in ("rollouts", "tokens", "seconds"):
        vals = [m[f"{axis}_to_target"] for m in measures]
        out[f"{axis}_to_target_median"] = median_with_misses(vals)
        out[f"{axis}_to_target_min"], out[f"{axis}_to_target_max"] = spread(vals)
    finals = [m["final_accuracy"] for m in measures]
    out["final_accuracy_median"] = statistics.median(finals)
    # mean accuracy over the run's evaluations after the start: a read of the whole curve,
    # less at the mercy of one lucky or unlucky evaluation than the first crossing
    means = [statistics.mean(m["curve"]["accuracy"][1:]) for m in measures if len(m["curve"]["accuracy"]) > 1]
    out["mean_accuracy_median"] = statistics.median(means) if means else None
    out["final_accuracy_min"], out["final_accuracy_max"] = min(finals), max(finals)
    for key in ("seconds_per_rollout", "generate_seconds_per_rollout", "zero_var_frac", "reward_mean",
                "signal_prompts", "signal_rollouts", "top_prompt_share", "kept_zero_var_share", "deep_share",
                "zero_variance_share", "deep_zero_variance_share", "wide_zero_variance_share"):
        vals = [m[key] for m in measures if m.get(key) is not None]
        out[f"{key}_median"] = statistics.median(vals) if vals else None
    return out


def add_ratios(arms: dict[str, dict], baseline: str) -> None:
    """Speed-ups against the baseline: baseline's median / the arm's (2.0 = half the cost)."""
    base = arms.get(baseline)
    for arm in arms.values():
        for axis in ("rollouts", "tokens", "seconds"):
            arm[f"{axis}_speedup"] = ratio(base and base[f"{axis}_to_target_median"], arm[f"{axis}_to_target_median"])
        arm["final_accuracy_delta"] = arm["final_accuracy_median"] - base["final_accuracy_median"] if base else None
        arm["mean_accuracy_delta"] = (arm["mean_accuracy_median"] - base["mean_accuracy_median"]
                                      if base and arm.get("mean_accuracy_median") is not None
                                      and base.get("mean_accuracy_median") is not None else None)
        arm["seconds_per_rollout_ratio"] = (
            arm["seconds_per_rollout_median"] / base["seconds_per_rollout_median"]
            if base and base["seconds_per_rollout_median"] and arm["seconds_per_rollout_median"] else None
        )


def run_mean_accuracy(m: dict) -> float | None:
    """The mean of a run's evaluations after the start: the whole curve in one number."""
    acc = m["curve"]["accuracy"]
    return statistics.mean(acc[1:]) if len(acc) > 1 else None


def speedup_of(reference: Sequence[float], arm: Sequence[float]) -> float:
    """reference's median rollouts to target / the arm's (misses are +inf): 0 when only the
    arm misses, inf when only the reference does, 1 when both do (neither reaches it)."""
    r, a = statistics.median(reference), statistics.median(arm)  # a miss is +inf
    if math.isinf(a):
        return 1.0 if math.isinf(r) else 0.0
    if a == 0:  # reached at the start (a sampled start evaluation above the target)
        return 1.0 if r == 0 else math.inf
    return math.inf if math.isinf(r) else r / a


verdict = intervals.verdict


def paired_intervals(arm_runs: list[dict], ref_runs: list[dict]) -> dict:
    """The arm against a reference on the seeds both ran (paired by seed: the same data order
    and sampling seeds), by bench/intervals.py: the mean accuracy over the run, arm minus
    reference (points of accuracy as a fraction), with its 95 % t interval, verdict and
    printed label ('unsettled': on the line with fewer than 12 seeds); the speed-up in
    rollouts to target, the reference's median over the arm's (as before) with the 95 %
    order-statistic interval of the per-seed speed-ups (the reference's rollouts over the
    arm's on each seed) and its verdict."""
    a = {m["seed"]: m for m in arm_runs}
    r = {m["seed"]: m for m in ref_runs}
    seeds = sorted(set(a) & set(r))
    if not seeds:
        return {"seeds": 0}
    inf = math.inf
    delta = [run_mean_accuracy(a[s]) - run_mean_accuracy(r[s]) for s in seeds]
    at = [inf if a[s]["rollouts_to_target"] is None else a[s]["rollouts_to_target"] for s in seeds]
    rt = [inf if r[s]["rollouts_to_target"] is None else r[s]["rollouts_to_target"] for s in seeds]
    mean, lo_d, hi_d = intervals.t_interval(delta)
    per_seed = [speedup_of([x], [y]) for x, y in zip(rt, at)]
    _, lo_s, hi_s, held = intervals.median_interval(per_seed)
    return {
        "seeds": len(seeds),
        "mean_accuracy_delta": mean, "mean_accuracy_delta_ci": [lo_d, hi_d],
        "accuracy_verdict": verdict(lo_d, hi_d, 0.0), "accuracy_label": intervals.accuracy_label(delta),
        "accuracy_t": intervals.t_statistic(delta), "on_the_line": intervals.on_the_line(delta),
        "speedup": speedup_of(rt, at), "speedup_per_seed_median": statistics.median(per_seed),
        "speedup_ci": [lo_s, hi_s], "speedup_ci_coverage": held, "speedup_verdict": verdict(lo_s, hi_s, 1.0),
    }


def unsettled_arms(results: dict) -> dict[str, list[str]]:
    """Cell -> arms whose mean-accuracy comparison with grpo sits on the line with fewer than
    12 seeds (bench/intervals.py): the runs `--settle-from` adds seeds to."""
    out: dict[str, list[str]] = {}
    for key, cell in results.get("cells", {}).items():
        base = cell.get("runs", {}).get(BASELINE)
        if not base or "compute_axis" in cell:
            continue
        for arm, runs in cell["runs"].items():
            vs = paired_intervals(runs, base) if arm != BASELINE else {"seeds": 0}
            if vs["seeds"] and vs["seeds"] < intervals.SETTLED_SEEDS and vs["on_the_line"]:
                out.setdefault(key, []).append(arm)
    return out


def evaluation_noise(start: float, items: int | None) -> float | None:
    """One standard error of an evaluation at accuracy ``start`` over ``items`` graded answers."""
    if not items:
        return None
    return math.sqrt(max(start * (1 - start), 1e-12) / items)


def add_intervals(cell: dict) -> None:
    """Issue 25's statistics on one cell: each arm against grpo (intervals and verdicts), the
    arms that beat auto by more than the noise, and whether grpo learned at all (its median
    gain above one standard error of the evaluation): where it did not, the cell's speed-ups
    measure the starting evaluation, not learning, and are not reported."""
    runs = cell["runs"]
    base = runs.get(BASELINE)
    items = [m.get("eval_items") for ms in runs.values() for m in ms if m.get("eval_items")]
    cell["eval_se"] = evaluation_noise(cell["start_accuracy"], int(statistics.median(items)) if items else None)
    if base:
        cell["grpo_gain"] = statistics.median(m["final_accuracy"] for m in base) - cell["start_accuracy"]
        cell["learned"] = cell["eval_se"] is None or cell["grpo_gain"] > cell["eval_se"]
        for arm, ms in runs.items():
            if arm != BASELINE:
                cell["arms"][arm]["vs_grpo"] = paired_intervals(ms, base)
    if "auto" in runs:
        beaten = {}
        for arm, ms in runs.items():
            if arm == "auto":
                continue
            vs = paired_intervals(ms, runs["auto"])
            cell["arms"][arm]["vs_auto"] = vs
            speed_counts = cell.get("learned", True)
            if accuracy_label(vs) == "win" or (speed_counts and vs.get("speedup_verdict") == "win"):
                beaten[arm] = {"accuracy": accuracy_label(vs), "speedup": vs.get("speedup_verdict")}
        cell["auto_beaten_by"] = beaten


def compute_axis(cell: dict, levels: Sequence[int]) -> dict:
    """The compute axis of one cell: per run length (rollouts), each arm's held-out accuracy
    at that length (its evaluation there; mean over seeds with a 95 % t interval) and its mean
    accuracy over the run up to it; the best arm per length and, paired by seed, how much each
    other arm is below it (paired t interval and verdict)."""
    import numpy as np

    out: dict[str, Any] = {"levels": list(levels), "arms": {}, "best": {}}

    def at(m: dict, c: int) -> tuple[float, float] | None:
        x, y = m["curve"]["rollouts"], m["curve"]["accuracy"]
        if c > x[-1] + 1e-9:
            return None
        upto = [acc for xx, acc in zip(x[1:], y[1:]) if xx <= c + 1e-9]
        return float(np.interp(c, x, y)), (statistics.mean(upto) if upto else y[0])

    for arm, ms in cell["runs"].items():
        rows = {}
        for c in levels:
            vals = {m["seed"]: at(m, c) for m in ms}
            vals = {s: v for s, v in vals.items() if v is not None}
            if not vals:
                continue
            mean, lo, hi = intervals.t_interval([v[0] for v in vals.values()])
            rows[str(c)] = {"seeds": len(vals), "accuracy_mean": mean, "accuracy_ci": [lo, hi],
                            "mean_accuracy_upto": float(np.mean([v[1] for v in vals.values()])),
                            "per_seed": {str(s): v[0] for s, v in vals.items()}}
        out["arms"][arm] = {"rollouts_per_prompt": rollouts_per_prompt(arm), "levels": rows}
    for c in levels:
        have = {a: d["levels"][str(c)] for a, d in out["arms"].items() if str(c) in d["levels"]}
        if not have:
            continue
        best = max(have, key=lambda a: have[a]["accuracy_mean"])
        gaps = {}
        for arm, row in have.items():
            if arm == best:
                continue
            seeds = sorted(set(row["per_seed"]) & set(have[best]["per_seed"]))
            delta, lo, hi = intervals.t_interval([row["per_seed"][s] - have[best]["per_seed"][s] for s in seeds])
            gaps[arm] = {"delta": delta, "ci": [lo, hi], "verdict": verdict(lo, hi, 0.0)}
        out["best"][str(c)] = {"arm": best, "rollouts_per_prompt": rollouts_per_prompt(best),
                               "tied_with": [a for a, g in gaps.items() if g["verdict"] == "tie"], "others": gaps}
    return out


def target_for(start: float, baseline_finals: Sequence[float], gain: float) -> float:
    """start + gain x (median baseline final - start); at least start + 0.005 so that a
    baseline that did not learn gives a target above the start."""
    return max(start + gain * (statistics.median(baseline_finals) - start), start + 0.005)


VIGOR_VARIANTS = ["vigor", "vigor-prompt-mean", "vigor-scale-none"]


def _speedup_value(a: dict | None) -> float:
    """Speed-up over grpo for ranking arms; an arm that misses the target ranks as 0."""
    return (a or {}).get("rollouts_speedup") or 0.0


def cell_checks(cell: dict) -> dict:
    """The issue's targets on one table: auto >= 1.0x grpo and within 10 % of the best arm;
    the best VIGOR variant's speed-up (>= 1.3x is the target in the low-transfer regime)."""
    arms = cell["arms"]
    if not arms.get(BASELINE) or arms[BASELINE].get("rollouts_to_target_median") is None:
        return {"baseline_reached": False}
    best = max(arms, key=lambda a: _speedup_value(arms[a]))
    out: dict[str, Any] = {"baseline_reached": True, "best_arm": best, "best_speedup": _speedup_value(arms[best])}
    if "auto" in arms:
        auto = _speedup_value(arms["auto"])
        out.update(auto_speedup=auto, auto_at_least_grpo=auto >= 1.0,
                   auto_within_10pct_of_best=auto >= 0.9 * out["best_speedup"])
    variants = [a for a in VIGOR_VARIANTS if a in arms]
    if variants:
        v = max(variants, key=lambda a: _speedup_value(arms[a]))
        out.update(best_vigor=v, best_vigor_speedup=_speedup_value(arms[v]))
    return out


def accuracy_label(vs: dict) -> str | None:
    """A mean-accuracy comparison's printed label ('unsettled': on the line with fewer than 12
    seeds, bench/intervals.py); results from before labels give the interval's verdict."""
    return vs.get("accuracy_label", vs.get("accuracy_verdict"))
