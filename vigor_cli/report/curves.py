"""Accuracy curves of runs, seeds grouped, and rollouts-to-target (the headline measure).

Curve. A run's curve is its evaluation lines in metrics.jsonl: the points
(cumulative rollouts, cumulative generated tokens, accuracy) at each evaluated
step, step 0 being the model before training. Every generated rollout counts
on the x-axis, used in the update or not.

Details: docs/modules.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from vigor_cli.errors import UserError
from vigor_cli.run.directory import RunDir

SEED_KEYS = tuple(
    ("train", key)
    for key in ("seed", "run_name", "output_dir", "steps", "eval_every", "eval_every_rollouts",
                "save_every", "keep_checkpoints", "log_completions_every", "reward_workers", "report_to")
)
"""Config keys that do not make two runs different configurations: the seed, names, and
bookkeeping (a run extended with more steps, or evaluated more often, is the same recipe)."""


@dataclass
class Axis:
    """Accuracy against one x axis; ``low``/``high`` bound the seed band (None for one run)."""

    x: list[float]
    y: list[float]
    low: list[float] | None = None
    high: list[float] | None = None


@dataclass
class HealthMark:
    """A training step where health checks held (vigor_cli/train/health.py: ``health/<check>/alert``)."""

    step: int
    rollouts: float
    tokens: float
    checks: list[str]


@dataclass
class Curve:
    """One accuracy curve on both x axes (cumulative rollouts, cumulative tokens)."""

    label: str
    by_rollouts: Axis
    by_tokens: Axis
    members: list["Curve"] = field(default_factory=list)
    """A seed group's runs, each to its own end (drawn thin beside the mean)."""
    health: list[HealthMark] = field(default_factory=list)
    """The run's steps where a health check held (a seed group's are its members')."""

    @property
    def final_accuracy(self) -> float:
        return self.by_rollouts.y[-1]


def run_curve(run: RunDir, metric: str = "eval/accuracy") -> Curve:
    """The run's evaluation points for ``metric`` (last line wins when a step repeats)."""
    by_step: dict[int, dict] = {}
    marks: dict[int, HealthMark] = {}
    content = run.read_log("metrics.jsonl")  # each line checked: step, documented metrics
    for rec, line in zip(content.records, content.lines):
        held = sorted(k[len("health/"):-len("/alert")] for k, v in rec.items()
                      if k.startswith("health/") and k.endswith("/alert") and v)
        if held:
            marks[rec["step"]] = HealthMark(rec["step"], float(rec.get("rollouts/cumulative", 0)),
                                            float(rec.get("tokens/cumulative", 0)), held)
        if metric in rec and rec[metric] is not None:
            value = rec[metric]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UserError(f"{run.path / 'metrics.jsonl'}:{line}: '{metric}' is {value!r:.60}; "
                                "expected a finite number")
            by_step[rec["step"]] = rec
    if not by_step:
        raise UserError(
            f"{run.path / 'metrics.jsonl'}: no evaluation line with '{metric}' "
            "(was the run evaluated yet?)"
        )
    rollouts, tokens, acc = [], [], []
    for s in sorted(by_step):
        rec = by_step[s]
        for key in ("rollouts/cumulative", "tokens/cumulative"):
            if key not in rec and s != 0:
                raise UserError(
                    f"{run.path / 'metrics.jsonl'}: evaluation line of step {s} lacks '{key}'"
                )
        rollouts.append(float(rec.get("rollouts/cumulative", 0)))
        tokens.append(float(rec.get("tokens/cumulative", 0)))
        acc.append(float(rec[metric]))
    return Curve(run.name, Axis(rollouts, acc), Axis(tokens, list(acc)), health=[marks[s] for s in sorted(marks)])


def health_notes(name: str, curve: Curve) -> list[str]:
    """One line per health check that held in a run: its steps, as spans (``steps 3-7, 12``)."""
    steps: dict[str, list[int]] = {}
    for mark in curve.health:
        for check in mark.checks:
            steps.setdefault(check, []).append(mark.step)
    return [f"{name}: health check '{check}' held at {step_spans(held)} (metrics.jsonl health/{check}/alert)"
            for check, held in steps.items()]


def step_spans(steps: list[int]) -> str:
    """``steps 3–7, 12`` (``step 4`` for one)."""
    runs: list[list[int]] = []
    for s in steps:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    text = ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    return ("step " if len(steps) == 1 else "steps ") + text


def first_crossing(xs: Sequence[float], ys: Sequence[float], target: float) -> float | None:
    """x where the curve first reaches ``target`` (rule in the module docstring), else None."""
    for i, (x, y) in enumerate(zip(xs, ys)):
        if y >= target:
            if i == 0:
                return float(x)
            x0, y0 = xs[i - 1], ys[i - 1]
            return float(x0 + (target - y0) / (y - y0) * (x - x0))
    return None


def config_key(run: RunDir) -> str:
    """The run's config without the seed-like keys, as canonical JSON (the group key)."""
    cfg = json.loads(json.dumps(run.config))
    for section, key in SEED_KEYS:
        if isinstance(cfg.get(section), dict):
            cfg[section].pop(key, None)
    return json.dumps(cfg, sort_keys=True)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(_flatten(v, f"{prefix}{k}."))
    return out


@dataclass
class Group:
    label: str
    runs: list[RunDir]
    curves: list[Curve]
    mean: Curve = field(init=False)

    def __post_init__(self) -> None:
        self.mean = mean_curve(self.label, self.curves)

    @property
    def seeds(self) -> list[Any]:
        return [r.config_value("train.seed") for r in self.runs]

    def describe(self) -> str:
        """Which runs were averaged: 'grpo (2 seeds): g0 (seed 0), g1 (seed 1)'."""
        return f"{self.label}: " + ", ".join(f"{r.name} (seed {s})" for r, s in zip(self.runs, self.seeds))


def group_label(key_cfg: dict[str, Any], all_cfgs: list[dict[str, Any]], fallback: str) -> str:
    """A short name for a group: the strategy plus the keys where groups differ."""
    flat = _flatten(key_cfg)
    flats = [_flatten(c) for c in all_cfgs]
    differing = sorted(k for k in flat if any(f.get(k) != flat[k] for f in flats))
    strategy = flat.get("allocation.strategy")
    parts = [str(strategy)] if strategy is not None else []
    for k in differing:
        if k == "allocation.strategy":
            continue
        parts.append(f"{k.split('.')[-1]}={flat[k]}")
    return " ".join(parts[:4]) or fallback


def group_runs(runs: list[RunDir], curves: list[Curve], notes: list[str] | None = None) -> list[Group]:
    """Runs sharing a config apart from the seed, with different seeds, in order of first
    appearance; runs of one config that share a seed stand alone, said in ``notes``."""
    keys = [config_key(r) for r in runs]
    order: list[str] = []
    for k in keys:
        if k not in order:
            order.append(k)
    cfgs = [json.loads(k) for k in order]
    groups = []
    for k, cfg in zip(order, cfgs):
        members = [i for i, kk in enumerate(keys) if kk == k]
        first = runs[members[0]]
        label = group_label(cfg, cfgs, first.name) if len(order) > 1 else (
            str(first.config_value("allocation.strategy", first.name))
        )
        seeds = [runs[i].config_value("train.seed") for i in members]
        repeats = len(members) > 1 and (None in seeds or len(set(seeds)) < len(seeds))
        if not first.config or repeats:  # each run stands alone under its own name
            if first.config and notes is not None:
                names = ", ".join(f"{runs[i].name} (seed {s})" for i, s in zip(members, seeds))
                notes.append(f"{names}: one config, and seeds that do not all differ; repeats of a seed "
                             "are not seeds, so each run is shown alone")
            for i in members:
                groups.append(Group(runs[i].name, [runs[i]], [curves[i]]))
            continue
        if len(members) > 1:
            label = f"{label} ({len(members)} seeds)"
        groups.append(Group(label, [runs[i] for i in members], [curves[i] for i in members]))
    # two groups with the same label would be unreadable: add the first run's name
    labels = [g.label for g in groups]
    for g in groups:
        if labels.count(g.label) > 1:
            g.label = f"{g.label} ({g.runs[0].name})"
            g.mean.label = g.label
    return groups


def _mean_axis(axes: list[Axis]) -> Axis:
    """Seed mean on the union of the runs' x values inside the range all of them cover."""
    xs = [np.asarray(a.x, dtype=float) for a in axes]
    lo = max(x[0] for x in xs)
    hi = min(x[-1] for x in xs)
    grid = np.unique(np.concatenate([x[(x >= lo) & (x <= hi)] for x in xs]))
    if grid.size == 0:
        grid = np.array([lo])
    ys = np.stack([np.interp(grid, x, a.y) for x, a in zip(xs, axes)])
    return Axis(grid.tolist(), ys.mean(0).tolist(), ys.min(0).tolist(), ys.max(0).tolist())


def mean_curve(label: str, curves: list[Curve]) -> Curve:
    """One run's curve as it is, or the seed mean with a min-max band (module docstring)."""
    if len(curves) == 1:
        return Curve(label, curves[0].by_rollouts, curves[0].by_tokens, health=curves[0].health)
    return Curve(
        label,
        _mean_axis([c.by_rollouts for c in curves]),
        _mean_axis([c.by_tokens for c in curves]),
        members=list(curves),
    )


def default_target(curves: Sequence[Curve]) -> float:
    """The lowest final accuracy among the runs: every run reaches it."""
    return min(c.final_accuracy for c in curves)


def target_table(
    runs: list[RunDir],
    curves: list[Curve],
    groups: list[Group],
    target: float,
    baseline_index: int = 0,
) -> dict[str, Any]:
    """Rollouts and tokens to ``target`` per run and per seed group, with speed-ups vs the
    baseline run (and the baseline's group for group rows)."""

    def row(name: str, curve: Curve) -> dict:
        return {
            "name": name,
            "final_accuracy": curve.final_accuracy,
            "rollouts_to_target": first_crossing(curve.by_rollouts.x, curve.by_rollouts.y, target),
            "tokens_to_target": first_crossing(curve.by_tokens.x, curve.by_tokens.y, target),
        }

    run_rows = [
        row(r.name, c) | {"path": str(r.path), "seed": r.config_value("train.seed")}
        for r, c in zip(runs, curves)
    ]
    base = run_rows[baseline_index]
    for r in run_rows:
        _add_speedups(r, base)
    group_rows = []
    if any(len(g.runs) > 1 for g in groups):
        for g in groups:
            group_rows.append(row(g.label, g.mean) | {"runs": [r.name for r in g.runs], "seeds": g.seeds})
        base_group = next(
            gr for gr in group_rows if runs[baseline_index].name in gr["runs"]
        )
        for gr in group_rows:
            _add_speedups(gr, base_group)
    return {
        "target": target,
        "baseline": runs[baseline_index].name,
        "runs": run_rows,
        "groups": group_rows,
    }


def _add_speedups(row: dict, base: dict) -> None:
    for axis in ("rollouts", "tokens"):
        mine, theirs = row[f"{axis}_to_target"], base[f"{axis}_to_target"]
        row[f"{axis}_speedup"] = (theirs / mine) if mine and theirs else None
