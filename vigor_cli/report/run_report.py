"""`vigor report`'s work and tables: curves of several runs, rollouts and tokens to a target
accuracy, the plots and report.json (the rule is documented in report/curves.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from vigor_cli.console import literal
from vigor_cli.errors import UserError


def _fmt_count(x: float | None) -> str:
    if x is None:
        return "not reached"
    return f"{x:,.0f}"


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def baseline_index(loaded: list, baseline: Optional[str]) -> int:
    """Index of the run the ratios compare against: named by path or directory name."""
    if baseline is None:
        return 0
    matches = [
        i for i, r in enumerate(loaded)
        if r.name == baseline or r.path.resolve() == Path(baseline).resolve()
    ]
    if not matches:
        raise UserError(f"--baseline {baseline}: not one of the runs given")
    return matches[0]


def build_report(loaded: list, curves: list, target: float, base: int, metric: str, out: Path) -> dict:
    """The rollouts-to-target table, with the two plots and report.json written under ``out``."""
    from vigor_cli.report.curves import first_crossing, group_runs, target_table
    from vigor_cli.report.plots import plot_accuracy

    from vigor_cli.report.curves import health_notes

    notes: list[str] = []
    groups = group_runs(loaded, curves, notes)
    for run, curve in zip(loaded, curves):
        notes += health_notes(run.name, curve)
    met = [run.name for run, curve in zip(loaded, curves)
           if curve.by_rollouts.y and curve.by_rollouts.x[0] == 0 and curve.by_rollouts.y[0] >= target]
    if met:  # e.g. runs that learned nothing: the default target (lowest final accuracy) is their start
        notes.append(f"{', '.join(met)}: the first evaluation already meets the target {target:.3f}, so "
                     "'rollouts to target' is 0 and says nothing; give --target above the start")
    table = target_table(loaded, curves, groups, target, base)
    table["metric"] = metric
    if metric != PASS_RATE:  # the pass rate beside the metric, where the runs log it
        for row, run in zip(table["runs"], loaded):
            row["final_pass_rate"] = final_value(run, PASS_RATE)
    for row, run in zip(table["runs"], loaded):  # rollouts spent without signal over the run
        row["rollouts_zero_variance"], row["rollouts_zero_variance_share"] = no_signal(run)
    if metric == "eval/accuracy" and any(task_name(run) == "custom" for run in loaded):
        notes.append("eval/accuracy of your own task is its mean (weighted) reward; the share of samples that "
                     f"pass (reward >= task.pass_threshold): --metric {PASS_RATE}")
    table["grouped"] = [g.describe() for g in groups if len(g.runs) > 1]
    table["notes"] = notes
    plotted = [g.mean for g in groups]
    out.mkdir(parents=True, exist_ok=True)
    pngs = {}
    for axis in ("rollouts", "tokens"):
        # each marker from the very curve it is drawn on (the table's rows are in run order)
        crossings = [first_crossing(getattr(c, f"by_{axis}").x, getattr(c, f"by_{axis}").y, target)
                     for c in plotted]
        pngs[axis] = str(
            plot_accuracy(plotted, axis, out / f"{plot_stem(metric)}_vs_{axis}.png", target, crossings, metric)
        )
    table["plots"] = pngs
    (out / "report.json").write_text(json.dumps(table, indent=2) + "\n")
    return table


PASS_RATE = "eval/pass_rate"
"""The pass rate's metrics.jsonl key (pass@1 at task.pass_threshold)."""


def plot_stem(metric: str) -> str:
    """A plot's file name before ``_vs_<axis>.png``: the metric it plots, without ``eval/``
    (``eval/pass_rate`` -> ``pass_rate``, ``eval/math500/accuracy`` -> ``math500_accuracy``)."""
    name = metric.removeprefix("eval/").replace("/", "_")
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name) or "metric"


def no_signal(run: Any) -> tuple[int | None, float | None]:
    """Rollouts the run spent in groups whose rewards all came out equal (metrics.jsonl's
    ``rollouts/zero_variance`` summed), and their share of its rollouts; None for a run whose
    lines do not have it (logged before the key existed)."""
    lines = [m for m in run.metrics() if "rollouts/step" in m]
    if not lines or any("rollouts/zero_variance" not in m for m in lines):
        return None, None
    flat, spent = sum(m["rollouts/zero_variance"] for m in lines), sum(m["rollouts/step"] for m in lines)
    return flat, (flat / spent if spent else 0.0)


def final_value(run: Any, key: str) -> float | None:
    """The run's last evaluation value of ``key`` (None when it logs none)."""
    values = [r[key] for r in run.read_log("metrics.jsonl").records if isinstance(r.get(key), (int, float))]
    return float(values[-1]) if values else None


def task_name(run: Any) -> str | None:
    from vigor_cli.run.directory import read_config

    try:
        return (read_config(run.path).get("task") or {}).get("name")
    except UserError:
        return None


def metric_range(loaded: list, metric: str) -> tuple[float, float] | None:
    """The values ``metric`` can take in these runs, where vigor knows it: a pass rate [0, 1];
    a mean reward (``eval/accuracy``, a set's) the task's reward range (the bundled tasks'
    [0, 1]; your own rewards': allocation.reward_range, by default their weights' range, so
    1,0.5 gives [0, 1.5]). None for any other metric."""
    if metric.endswith("pass_rate"):
        return 0.0, 1.0
    if not (metric.startswith("eval/") and metric.endswith("/accuracy") or metric == "eval/accuracy"):
        return None
    from vigor_cli.allocation.base import reward_range
    from vigor_cli.run.directory import read_config

    ranges = []
    for run in loaded:
        try:
            cfg = read_config(run.path)
        except UserError:
            return None
        task, allocation = cfg.get("task") or {}, cfg.get("allocation") or {}
        if task.get("name") != "custom":
            ranges.append((0.0, 1.0))
            continue
        weights = task.get("reward_weights") or [1.0] * len(task.get("rewards") or [1])
        ranges.append(reward_range(allocation.get("reward_range", "auto"), weights))
    return (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else None


def check_target(loaded: list, metric: str, target: float) -> None:
    """``--target`` within the metric's range (:func:`metric_range`), or one line saying it."""
    span = metric_range(loaded, metric)
    if span is not None and not span[0] <= target <= span[1]:
        raise UserError(f"--target {target:g}: {metric} of these runs lies in [{span[0]:g}, {span[1]:g}]; "
                        "give a target in that range")


def target_rows(rows: list[dict], title: str, first_col: str, metric: str = "eval/accuracy") -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column(first_col)
    t.add_column(f"final {metric}", justify="right")
    passes = metric != PASS_RATE and any(row.get("final_pass_rate") is not None for row in rows)
    if passes:
        t.add_column("final pass rate", justify="right")
    t.add_column("rollouts to target", justify="right")
    t.add_column("speed-up", justify="right")
    t.add_column("tokens to target", justify="right")
    t.add_column("speed-up (tokens)", justify="right")
    flat = any(row.get("rollouts_zero_variance_share") is not None for row in rows)
    if flat:
        t.add_column("no signal", justify="right")
    for row in rows:
        pass_rate = row.get("final_pass_rate")
        t.add_row(
            literal(row["name"]),
            f"{row['final_accuracy']:.3f}",
            *([("-" if pass_rate is None else f"{pass_rate:.3f}")] if passes else []),
            _fmt_count(row["rollouts_to_target"]),
            _fmt_ratio(row["rollouts_speedup"]),
            _fmt_count(row["tokens_to_target"]),
            _fmt_ratio(row["tokens_speedup"]),
            *([_no_signal_text(row)] if flat else []),
        )
    return t


def _no_signal_text(row: dict) -> str:
    """``12,345 (42.6%)``: the run's rollouts spent in all-equal groups."""
    share = row.get("rollouts_zero_variance_share")
    return "-" if share is None else f"{row['rollouts_zero_variance']:,} ({100 * share:.1f}%)"


def print_report(console: Any, table: dict, metric: str, target: float, out: Path) -> None:
    console.print(
        target_rows(
            table["runs"],
            f"{metric} >= {target:.4f}: first crossing, linear interpolation; "
            f"speed-up = baseline ({table['baseline']}) / run; no signal = rollouts in groups whose "
            "rewards all came out equal",
            "run", metric,
        )
    )
    if table["groups"]:
        console.print(target_rows(table["groups"], "seed groups (mean curve over the rollouts every seed "
                                  "reached; band = min-max)", "group", metric))
    from vigor_cli.console import shown

    for line in table.get("grouped", []):
        console.print(f"seed group {shown(line)}", highlight=False)
    for note in table.get("notes", []):
        console.print(f"[yellow]note:[/] {shown(note)}", highlight=False)
    pngs = table["plots"]
    console.print(f"plots: {shown(pngs['rollouts'])}, {shown(pngs['tokens'])}; table: {shown(out / 'report.json')}",
                  highlight=False)
