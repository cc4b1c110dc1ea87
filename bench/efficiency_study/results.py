"""The efficiency study's results JSON: one cell aggregated from its runs (and runs kept from
an earlier study), the provenance of its runs, the reproduction count against an earlier study,
and `--restat` (statistics recomputed from a results JSON); the committed compact copy."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

from .design import BASELINE, COMPUTE_LENGTHS, DEPTH_ARMS
from .measures import kept_measures, run_measures
from .paths import PUBLISHED, rel_path
from .plots import plot_cell, plot_compute, plot_no_signal, plot_summary
from .stats import add_intervals, add_ratios, compute_axis, summarize_arm, target_for
from .tables import print_tables, render_markdown

def aggregate_cell(run_dirs: list[Path], arms: list[str], gain: float, target: float | None, plots_dir: Path,
                   kept: dict[str, list[dict]] | None = None) -> dict:
    """Tables and plots of one task x regime from its run directories, and from ``kept`` runs
    of an earlier study (arm -> per-run measures with curves) for seeds this study did not run."""
    from vigor_cli.report.curves import Group, run_curve
    from vigor_cli.run.directory import load_run

    by_arm: dict[str, list[Any]] = {}
    for d in run_dirs:
        if not (d / "summary.json").is_file():
            continue
        arm = d.name.rsplit("-s", 1)[0]
        by_arm.setdefault(arm, []).append(load_run(d))
    old: dict[str, list[dict]] = {}
    for arm, ms in (kept or {}).items():
        fresh = {r.config_value("train.seed") for r in by_arm.get(arm, [])}
        old[arm] = [m for m in ms if m["seed"] not in fresh]
    if not by_arm and not any(old.values()):
        return {}
    starts = [run_curve(r).by_rollouts.y[0] for runs in by_arm.values() for r in runs]
    starts += [m["curve"]["accuracy"][0] for ms in old.values() for m in ms]
    start = statistics.median(starts)
    if target is None:
        finals = [run_curve(r).final_accuracy for r in by_arm.get(BASELINE, [])]
        finals += [m["final_accuracy"] for m in old.get(BASELINE, [])]
        if not finals:
            finals = [run_curve(r).final_accuracy for r in next(iter(by_arm.values()))]
        target = target_for(start, finals, gain)
    cell: dict[str, Any] = {"start_accuracy": start, "target": target, "target_gain": gain, "arms": {}, "runs": {}}
    names = set(by_arm) | {a for a, ms in old.items() if ms}
    for arm in [a for a in arms if a in names] + sorted(a for a in names if a not in arms):
        measures = [run_measures(r, target) for r in by_arm.get(arm, [])]
        measures += [kept_measures(m, target) for m in old.get(arm, [])]
        measures.sort(key=lambda m: m["seed"])
        cell["runs"][arm] = measures
        cell["arms"][arm] = summarize_arm(measures)
        cell["arms"][arm]["kept_seeds"] = sorted(m["seed"] for m in measures if m.get("kept"))
    add_ratios(cell["arms"], BASELINE)
    add_intervals(cell)
    if any(a in DEPTH_ARMS for a in cell["runs"]):
        unit = cell["runs"][BASELINE][0]["curve"]["rollouts"][-1] / max(COMPUTE_LENGTHS) if BASELINE in cell["runs"] else None
        if unit:
            cell["compute_axis"] = compute_axis(cell, [round(n * unit) for n in COMPUTE_LENGTHS])
    if len(cell["runs"]) > 6 or any(old.values()):  # plot_cell draws small multiples from the measures
        return cell
    from vigor_cli.report.plots import plot_accuracy

    groups = [Group(arm, runs, [run_curve(r) for r in runs]) for arm, runs in by_arm.items()]
    crossings = {}
    for axis in ("rollouts", "tokens"):
        from vigor_cli.report.curves import first_crossing

        crossings[axis] = [
            first_crossing(getattr(g.mean, f"by_{axis}").x, getattr(g.mean, f"by_{axis}").y, target) for g in groups
        ]
        cell[f"plot_{axis}"] = rel_path(
            plot_accuracy([g.mean for g in groups], axis, plots_dir / f"accuracy_vs_{axis}.png", target, crossings[axis])
        )
    return cell


def reproduction(results: dict, earlier: dict) -> dict:
    """Runs of an earlier study (same cell, arm and seed) whose evaluation curve this study
    reproduced exactly (to the 4 places the committed JSON rounds accuracies to)."""
    same, differ = 0, []
    for key, cell in results["cells"].items():
        old_cell = earlier.get("cells", {}).get(key)
        if not old_cell:
            continue
        for arm, runs in cell["runs"].items():
            old = {m["seed"]: m for m in old_cell.get("runs", {}).get(arm, [])}
            for m in runs:
                if m["seed"] not in old or m.get("kept"):
                    continue
                a, b = m["curve"]["accuracy"], old[m["seed"]]["curve"]["accuracy"]
                if len(a) == len(b) and all(abs(x - y) <= 6e-5 for x, y in zip(a, b)):  # b rounded to 4 places
                    same += 1
                else:
                    differ.append(f"{key}/{arm}-s{m['seed']}")
    return {"compared": same + len(differ), "identical": same, "different": differ}


def _rounded(obj: Any) -> Any:
    if isinstance(obj, float):
        return round(obj, 4)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def machine() -> dict:
    from vigor_cli.run.provenance import cpu_model

    return {"cpus": os.cpu_count(), "cpu_model": cpu_model(), "load_average": list(os.getloadavg()),
            "python": sys.version.split()[0]}


CELL_FACTS = ("model", "regime", "model_sha256", "start_distribution", "plateau", "auto_recency")
"""What --restat keeps of a cell as the results JSON says it (how its start was made and measured,
and ``auto_recency``: the allocation.auto.recency its ``auto`` runs ran, where not the default)."""


def restat(source: Path, out: Path, seeds: int | None, gain: float, console: Any) -> int:
    """`--restat JSON`: every cell of an earlier results JSON again, its statistics recomputed
    (bench/intervals.py) from the JSON's per-seed curves and the finished runs under ``out``
    for the seeds it lacks (``--settle-from`` made them); seeds 0..``seeds``-1 when given. A
    cell another study merged in (it carries ``study``) is copied as it is.
    Writes the results, tables and the committed copy as a study does; builds no model."""
    from vigor_cli.run import provenance

    earlier = json.loads(source.read_text())
    results = {k: earlier[k] for k in ("plan", "machine", "command", "kept_from", "reproduction") if k in earlier}
    results.update(cells={}, failures=[], aggregated_only=True, study_seconds=None,
                   restat={"from": rel_path(source), "intervals": "bench/intervals.py", "seeds": seeds,
                           "provenance": provenance.environment()})
    for key, cell in earlier["cells"].items():
        if "study" in cell:  # a cell its own study added (default150): its study republishes it
            results["cells"][key] = cell
            continue
        dirs = cell_dirs(out / "runs", key, seeds)
        kept = {arm: [m for m in ms if seeds is None or m["seed"] < seeds] for arm, ms in cell["runs"].items()}
        new = aggregate_cell(dirs, list(cell["arms"]), gain, None, out / key, kept)
        new.update({k: cell[k] for k in CELL_FACTS if k in cell})
        new["records"] = merged_records(cell.get("records", []), run_records(dirs))
        add_plot(key, new, out)
        results["cells"][key] = new
    restated = {**results, "cells": {k: c for k, c in results["cells"].items() if "study" not in c}}
    results["summary_plot"] = rel_path(plot_summary(restated, out / "summary_rollouts.png"))
    json_path, md_path = write_results(results, out, console, publish=True)
    console.print(f"results: {json_path}; tables: {md_path}; committed copy: {rel_path(PUBLISHED)}")
    return 0


def merged_records(earlier: list[dict], fresh: list[dict]) -> list[dict]:
    """A cell's run records after --restat: the earlier JSON's (runs made before, whose
    directories are not here) with the fresh runs' added; a run made again counts as fresh."""
    again = {r for g in fresh for r in g["runs"]}
    groups: dict[str, dict] = {}
    for g, is_fresh in [*((g, False) for g in earlier), *((g, True) for g in fresh)]:
        made = {k: v for k, v in g.items() if k != "runs"}
        runs = [r for r in g["runs"] if is_fresh or r not in again]
        if runs:
            group = groups.setdefault(json.dumps(made, sort_keys=True), {**made, "runs": []})
            group["runs"] = sorted(set(group["runs"]) | set(runs))
    return list(groups.values())


def cell_dirs(runs_dir: Path, key: str, seeds: int | None) -> list[Path]:
    """A cell's run directories (runs_dir/key/<arm>-s<seed>), of seeds below ``seeds`` (None: all)."""
    where = runs_dir / key
    dirs = sorted(where.glob("*-s*")) if where.is_dir() else []
    return [d for d in dirs if seeds is None or int(d.name.rsplit("-s", 1)[1]) < seeds]


def add_plot(key: str, cell: dict, out: Path) -> None:
    """The cell's figure under out/key: the compute axis, or its arms in panels (two or more)."""
    if "compute_axis" in cell:
        cell["plot"] = rel_path(plot_compute(key, cell, out / key / "compute_axis.png"))
    elif len(cell["arms"]) > 1:
        cell["plot"] = rel_path(plot_cell(key, cell, out / key / "accuracy_vs_rollouts_panels.png"))
    if any(m["curve"].get("no_signal") for ms in cell["runs"].values() for m in ms) and len(cell["runs"]) <= 6:
        cell["plot_no_signal"] = rel_path(plot_no_signal(key, cell, out / key / "accuracy_and_no_signal.png"))


def write_results(results: dict, out: Path, console: Any, publish: bool, merge: bool = False,
                  side_arms: Sequence[str] = ()) -> tuple[Path, Path]:
    """<out>.json and <out>.md beside ``out``, the committed compact copy when ``publish``, and
    the tables on the console. ``merge``: a study of its own cells (default150) adds them to
    the committed copy, each with the command, plan and provenance that made it, its seeds
    per arm and ``seeds``, the fewest of any arm but ``side_arms`` (--skip-arms: arms kept at
    the seeds an earlier run of the study gave them), and keeps the other cells as they are."""
    json_path, md_path = out.parent / f"{out.name}.json", out.parent / f"{out.name}.md"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(render_markdown(results))
    if publish and merge and PUBLISHED.is_file():
        published = json.loads(PUBLISHED.read_text())
        for key, cell in results["cells"].items():
            per_arm = {arm: a.get("seeds", 0) for arm, a in cell.get("arms", {}).items()}
            seeds = min((n for arm, n in per_arm.items() if arm not in side_arms), default=0)
            published["cells"][key] = _rounded({**cell, "seeds": seeds, "seeds_per_arm": per_arm, "study": {k: results.get(k) for k in (
                "command", "plan", "machine", "provenance", "study_seconds", "failures")}})
        PUBLISHED.write_text(json.dumps(published, separators=(",", ":")) + "\n")
    elif publish:
        PUBLISHED.write_text(json.dumps(_rounded(results), separators=(",", ":")) + "\n")
    print_tables(results, console)
    return json_path, md_path


def run_records(dirs: Sequence[Path]) -> list[dict]:
    """What made a cell's fresh runs (their provenance.json): each distinct version set, with
    the runs that share it; runs kept from an earlier study have none, and a run that did not
    finish (no summary.json: not in the tables either) is left out."""
    from vigor_cli.run import provenance

    groups: dict[str, dict] = {}
    for d in dirs:
        record = provenance.read(d) if (d / "summary.json").is_file() else None
        if record is None:
            continue
        made = {"vigor": record.get("vigor"), "python": record.get("python", {}).get("version"),
                "libraries": {k: v for k, v in record.get("libraries", {}).items() if v},
                "machine": {k: record.get("machine", {}).get(k) for k in ("cpu", "cpu_capability", "device")},
                "torch_threads": record.get("threads", {}).get("torch_intra_op")}
        group = groups.setdefault(json.dumps(made, sort_keys=True), {**made, "runs": []})
        group["runs"].append(d.name)
    return list(groups.values())
