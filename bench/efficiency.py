"""Rollout efficiency: does VIGOR reach a target held-out accuracy with fewer rollouts, and when?

The study's command line; its parts live in bench/efficiency_study/ (design, starts, runs,
measures, stats, tables, plots, results). It trains the tiny model with every allocation arm at
the same rollout budget, over several seeds and starting regimes, and reports each arm's cost
to a target accuracy and its paired intervals against grpo.

    python bench/efficiency.py                     # the full study
    python bench/efficiency.py --quick             # minutes: a smoke run of the whole pipeline
    python bench/efficiency.py --aggregate-only    # recompute tables and plots from the runs

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The study's public names, for the tests and for reading the study from Python.
from bench.efficiency_study.design import (  # noqa: E402,F401
    ABLATIONS, ARM_SETS, BASELINE, COMPUTE_ARMS, COMPUTE_LENGTHS, DEFAULT150_ARMS, DEFAULT150_SEEDS, DEFAULT150_STUDY, DEPTH_ARMS, ISSUE7_ARMS, ISSUE7_STUDY,
    ISSUE11_ARMS, ISSUE11_STUDY, ISSUE25_ARMS, PLATEAU_ARMS, QUICK_STUDY, REGIMES, STUDY, TASK_SETS, TASK_SIZES,
    Cell, Plan, Regime, RunSpec, arm_sets, bad_flag, cell_key, make_plan, make_specs, rollouts_per_prompt,
)
from bench.efficiency_study.measures import (  # noqa: E402,F401
    eval_items, kept_measures, run_measures, start_distribution, train_seconds_at_evals, update_signal,
)
from bench.efficiency_study.paths import CHILD_NICE, PUBLISHED, child_env, rel_path, study_child  # noqa: E402,F401
from bench.efficiency_study.plots import ARM_COLORS, PANELS, _finding, plot_cell, plot_compute, plot_summary  # noqa: E402,F401
from bench.efficiency_study.results import (  # noqa: E402,F401
    add_plot, aggregate_cell, cell_dirs, machine, reproduction, restat, run_records, write_results,
)
from bench.efficiency_study.runs import execute, finished, run_one, study_config, timing  # noqa: E402,F401
from bench.efficiency_study.starts import (  # noqa: E402,F401
    PLATEAU, make_plateau, model_digest, model_dir, plateau_reached, regime_model,
)
from bench.efficiency_study.stats import (  # noqa: E402,F401
    accuracy_label, add_intervals, cell_checks, compute_axis, median_with_misses, paired_intervals, speedup_of,
    spread, summarize_arm, target_for, unsettled_arms, verdict,
)
from bench.efficiency_study.tables import (  # noqa: E402,F401
    auto_table, compute_table, interval_tables, law_table, markdown_table, mechanism_table, print_tables,
    render_markdown, settled_verdict, summary_table, timing_table, verdict_table,
)
from vigor_cli.allocation import STRATEGIES  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """Every flag of the study (README, docs/ and BENCHMARKS.md cite its commands)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="Minutes: every strategy, 2 seeds, 8 prompts per step, 192 rollouts per run, default regime.")
    p.add_argument("--study", choices=["issue25", "issue11", "issue7", "default150"], default="issue25",
                   help="issue25 (default): issue 11's 6 regimes, 3 plateau regimes and the compute axis, with Pilot-Commit; "
                   "issue11: 6 regimes x 8 arms; issue7: the earlier tiny-math study (dapo, greso, pods, ablations); "
                   "default150: the default config at its full 150 steps (auto, auto held wide, grpo, grpo-wide; 12 seeds).")
    p.add_argument("--tasks", default=None, help="Only the study's cells of these tasks (comma-separated).")
    p.add_argument("--regimes", default=None, help=f"Only the study's cells of these regimes; a regime not in the study ({list(REGIMES)}) adds cells.")
    p.add_argument("--arms", default=None, help=f"Replace every cell's arms: strategies or ablations {sorted(ARM_SETS)}.")
    p.add_argument("--cells", default=None, help="Only these cells of the study, by key (tiny-math-default, tiny-math-plateau, tiny-math-compute, ...).")
    p.add_argument("--first-seed", type=int, default=0, help="Run only seeds from this one on (the earlier ones kept from --keep-from).")
    p.add_argument("--skip-arms", default=None, help="Leave these arms out of every cell (comma-separated); their finished runs stay.")
    p.add_argument("--seeds", type=int, default=None, help="Seeds per arm (0..N-1); default 8 (--quick: 2).")
    p.add_argument("--prompts-per-step", type=int, default=None, help="Override every cell's batch.")
    p.add_argument("--total-rollouts", type=int, default=None, help="Each run stops once it has generated this many.")
    p.add_argument("--eval-every-rollouts", type=int, default=None)
    p.add_argument("--jobs", type=int, default=2, help="Runs at a time (each uses one thread).")
    p.add_argument("--target-gain", type=float, default=0.8, help="Target = start + gain x grpo's median gain.")
    p.add_argument("--target", type=float, default=None, help="Absolute target accuracy for every cell (overrides --target-gain).")
    p.add_argument("--set", dest="sets", action="append", default=[], help="Extra config override for every run.")
    p.add_argument("--out", type=Path, default=None, help="Results directory (default bench/results/efficiency[-quick]).")
    p.add_argument("--default-model", default=None, help="Starting model of the default, peaked and flat regimes (default: the bundled tiny model).")
    p.add_argument("--aggregate-only", action="store_true", help="Only recompute tables and plots from finished runs.")
    p.add_argument("--publish", action="store_true",
                   help="Write the committed copy (bench/efficiency_results.json) even with --out; --study default150 adds its cell to it.")
    p.add_argument("--keep-from", default=None, metavar="JSON",
                   help="An earlier study's results JSON: its runs (curves and measures) count for the seeds this study did not run, "
                   "measured against this study's targets (issue 25 keeps issue 11's five seeds).")
    p.add_argument("--keep-skip", default=None, help="Arms whose kept runs are not used (their code changed since: auto).")
    p.add_argument("--compare-with", default=None, metavar="JSON",
                   help="An earlier study's results JSON: count the runs (same cell, arm, seed) whose evaluations this study reproduced exactly.")
    p.add_argument("--settle-from", default=None, metavar="JSON",
                   help="Only the runs that settle this results JSON's comparisons on the line (bench/intervals.py): "
                   "seeds --first-seed..--seeds-1 of each such arm and of grpo in its cell (with --cells: those cells) that the JSON "
                   "does not already hold, auto and vigor first; then --restat recomputes the tables.")
    p.add_argument("--restat", default=None, metavar="JSON",
                   help="Recompute every cell's statistics from this results JSON's per-seed curves and the finished runs "
                   "under --out (the seeds it lacks), keeping what the JSON says of each cell's model; builds no model.")
    p.add_argument("--make-plateau", default=None, metavar="REGIME",
                   help="Only build the plateau start of REGIME (plateau-math, plateau-facts, plateau-ladder; 'all': the three) and print where it is.")
    p.add_argument("--timing-steps", type=int, default=None, help="Steps per arm of the interleaved timing of grpo and vigor (default 12; --quick 2; 0 skips it).")
    return p


def read_json(flag: str, path: str) -> dict:
    """The results JSON a flag names; one line and exit 2 when it cannot be read."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        bad_flag(f"{flag}: cannot read {path} as a results JSON: {e}")


def run_child(job: dict) -> int:
    """A child process's job (``--child JSON``): a plateau start, the interleaved timing, or one run."""
    if "plateau" in job:
        plateau = job["plateau"]
        print(json.dumps(make_plateau(plateau["regime"], plateau["base"], Path(plateau["out"]))))
    elif "timing" in job:
        t = job["timing"]
        result = timing(t["model"], t["arms"], t["steps"], t["prompts_per_step"], Path(t["workdir"]))
        Path(t["result"]).write_text(json.dumps(result))
    else:
        print(json.dumps(run_one(RunSpec(**job))))
    return 0


def make_plateaus(which: str, out: Path, console: Any) -> int:
    """`--make-plateau REGIME|all`: build (or find) the plateau starts and say where they are."""
    plateaus = [r for r in REGIMES if REGIMES[r].plateau_of]
    for r in plateaus if which == "all" else [which]:
        if r not in plateaus:
            bad_flag(f"--make-plateau: unknown plateau regime {r!r}; choose from {plateaus} or all")
        path = Path(regime_model(r, out.parent / "efficiency-models"))
        info = json.loads((path / "plateau.json").read_text())
        console.print(f"{r}: {rel_path(path)} after {info['steps']} grpo steps; held-out accuracy "
                      + " ".join(f"{e['accuracy']:.3f}" for e in info["evaluations"]), highlight=False)
    return 0


def settle(plan: Plan, source: str, console: Any) -> dict:
    """`--settle-from JSON`: only the cells with comparisons on the line, each with grpo and
    the arms to settle; returns the JSON (its runs are not run again)."""
    held = read_json("--settle-from", source)
    unsettled = unsettled_arms(held)
    plan.cells = [c for c in plan.cells if c.key in unsettled]
    for c in plan.cells:
        c.arms = [BASELINE, *unsettled[c.key]]
    console.print("settling: " + "; ".join(f"{c.key}: {', '.join(c.arms[1:])}" for c in plan.cells), highlight=False)
    return held


def settling_runs(specs: list[RunSpec], plan: Plan, held: dict) -> list[RunSpec]:
    """The settling runs the results JSON does not already hold (same cell, arm and seed): a
    seed it has is kept, not run again."""
    cell_of = {(c.task, c.regime): c.key for c in plan.cells}
    have = {(key, arm, m["seed"]) for key, cell in held.get("cells", {}).items()
            for arm, ms in cell.get("runs", {}).items() for m in ms}
    return [s for s in specs if (cell_of[(s.task, s.regime)], s.arm, s.seed) not in have]


SETTLING_TIERS = {"auto": 0, "vigor": 0, "grpo-wide": 1}
"""auto (the default strategy) and vigor (the method) first, then grpo-wide, then the rest."""


def settling_order(specs: list[RunSpec], plan: Plan, cells: str | None) -> None:
    """Settling runs in order of SETTLING_TIERS, grpo with the first arm of its cell it pairs
    with; within a tier, a cell's runs before the next cell's (--cells order), seed by seed."""
    order = {key: i for i, key in enumerate((cells or "").split(","))}
    cell_of = {(c.task, c.regime): c.key for c in plan.cells}
    first = {c.key: min((SETTLING_TIERS.get(a, 2) for a in c.arms if a != BASELINE), default=2) for c in plan.cells}

    def tier(s: RunSpec) -> int:
        return first[cell_of[(s.task, s.regime)]] if s.arm == BASELINE else SETTLING_TIERS.get(s.arm, 2)

    specs.sort(key=lambda s: (tier(s), order.get(cell_of[(s.task, s.regime)], len(order)), s.seed))


def list_runs(specs: list[RunSpec], console: Any) -> None:
    """The runs to do, in order: per cell and arm, its seeds; and their count."""
    groups: dict[str, list[int]] = {}
    for s in specs:
        groups.setdefault(f"{Path(s.run_dir).parent.name} {s.arm}", []).append(s.seed)
    console.print(f"{len(specs)} runs to settle: " + "; ".join(f"{k} s{','.join(map(str, v))}" for k, v in groups.items()),
                  highlight=False)


def start_models(plan: Plan, out: Path, default_model: str | None) -> dict[str, str]:
    """Regime -> its starting model (built once), ``--default-model`` for the bundled model's regimes."""
    regimes = list(dict.fromkeys(c.regime for c in plan.cells))
    models = {r: regime_model(r, out.parent / "efficiency-models") for r in regimes}
    if default_model:
        for r in regimes:
            if REGIMES[r].warmup_target is None and not REGIMES[r].recipe:
                models[r] = str(Path(default_model).resolve())
    if "tiny" in models.values() and not (model_dir("tiny") / "config.json").is_file():
        raise SystemExit(f"the bundled tiny model is missing at {model_dir('tiny')}: rebuild it with `vigor make-tiny`")
    return models


def run_timing(plan: Plan, models: dict[str, str], out: Path, steps: int, console: Any) -> None:
    """grpo, vigor and auto timed in one child process, their steps interleaved (out/timing.json)."""
    math_cell = next((c for c in plan.cells if c.task == "tiny-math" and c.regime == "default"), None)
    if not steps or not math_cell:
        return
    timed = [BASELINE, "vigor"] + (["auto"] if "auto" in STRATEGIES else [])
    console.print(f"timing: {', '.join(timed)} interleaved, {steps} steps each, one process")
    job = {"timing": {"model": models["default"], "arms": timed, "steps": steps,
                      "prompts_per_step": math_cell.prompts_per_step, "workdir": str(out / "timing"),
                      "result": str(out / "timing.json")}}
    with open(out / "logs" / "timing.log", "w") as log:
        subprocess.run(study_child(job), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=child_env())


def new_results(plan: Plan, args: argparse.Namespace, argv: list[str] | None, seconds: float | None,
                failures: list[dict]) -> dict[str, Any]:
    """The results JSON before its cells: the plan, the machine, the command, the provenance."""
    from vigor_cli.run import provenance

    given = sys.argv[1:] if argv is None else argv
    return {
        "plan": asdict(plan), "machine": machine(),  # the study's command (tables recomputed later still name it)
        "command": " ".join(["python bench/efficiency.py", *(a for a in given if a != "--aggregate-only")]),
        "study_seconds": seconds, "aggregated_only": args.aggregate_only, "failures": failures, "cells": {},
        "provenance": provenance.environment(),  # the code and machine that ran (or aggregated) it
    }


def table_cells(plan: Plan) -> list[Cell]:
    """The plan's cells as tables: rows of one task and regime make one table."""
    merged: dict[str, Cell] = {}
    for c in plan.cells:
        if c.key in merged:
            merged[c.key].arms = merged[c.key].arms + [a for a in c.arms if a not in merged[c.key].arms]
        else:
            merged[c.key] = Cell(**asdict(c))
    return list(merged.values())


def study_cell(c: Cell, plan: Plan, args: argparse.Namespace, out: Path, model: str,
               keep_from: dict | None) -> dict:
    """One table's cell: its runs (and kept runs) aggregated, with what made its start."""
    dirs = cell_dirs(out / "runs", c.key, plan.seeds)  # only the seeds asked for
    kept = {}
    if keep_from and c.key in keep_from.get("cells", {}):
        skip = set((args.keep_skip or "").split(","))
        kept = {arm: [m for m in ms if m["seed"] < plan.seeds] for arm, ms in keep_from["cells"][c.key]["runs"].items()
                if arm in c.arms and arm not in skip}
    cell = aggregate_cell(dirs, c.arms, plan.target_gain, args.target, out / c.key, kept)
    if not cell:
        return cell
    cell["model"] = rel_path(model) if model != "tiny" else "tiny"
    cell["regime"] = asdict(REGIMES[c.regime])
    cell["model_sha256"] = model_digest(model)
    cell["start_distribution"] = start_distribution(
        c.task, model, REGIMES[c.regime].temperature, out / c.key / "start_pass_rates.json"
    )
    cell["records"] = run_records(dirs)  # what made the cell's runs (their provenance.json)
    made = model_dir(model) / "plateau.json"
    if made.is_file():  # how the plateau start was made
        cell["plateau"] = json.loads(made.read_text())
    add_plot(c.key, cell, out)
    return cell


def report(results: dict, plan: Plan, args: argparse.Namespace, out: Path, models: dict[str, str]) -> None:
    """The study's cells, timing, kept runs and reproduction into ``results``."""
    if (out / "timing.json").is_file():
        results["timing"] = json.loads((out / "timing.json").read_text())
    keep_from = read_json("--keep-from", args.keep_from) if args.keep_from else None
    if keep_from:
        results["kept_from"] = {"command": keep_from.get("command"), "seeds": keep_from.get("plan", {}).get("seeds"),
                                "skipped_arms": args.keep_skip}
    for c in table_cells(plan):
        cell = study_cell(c, plan, args, out, models[c.regime], keep_from)
        if cell:
            results["cells"][c.key] = cell
    if len(results["cells"]) > 1:
        results["summary_plot"] = rel_path(plot_summary(results, out / "summary_rollouts.png"))
    if args.compare_with:
        results["reproduction"] = reproduction(results, read_json("--compare-with", args.compare_with))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        return run_child(json.loads(args.child))
    for flag in ("restat", "settle_from", "keep_from", "compare_with"):  # bad input before any work
        if getattr(args, flag):
            read_json("--" + flag.replace("_", "-"), getattr(args, flag))
    from rich.console import Console

    console = Console()
    out = args.out or ROOT / "bench" / "results" / ("efficiency-quick" if args.quick else "efficiency")
    if args.make_plateau:
        return make_plateaus(args.make_plateau, out, console)
    if args.restat:
        return restat(Path(args.restat), out, args.seeds, args.target_gain, console)
    plan = make_plan(args)
    held = settle(plan, args.settle_from, console) if args.settle_from else None
    models = start_models(plan, out, args.default_model)
    specs = make_specs(plan, out / "runs", models)
    if held is not None:
        specs = settling_runs(specs, plan, held)
        settling_order(specs, plan, args.cells)
        list_runs(specs, console)
    started = time.time()
    failures = [] if args.aggregate_only else execute(specs, plan.jobs, out / "logs", console)
    if args.settle_from:  # the tables come from --restat, with the seeds the JSON holds
        console.print(f"{len(specs) - len(failures)} of {len(specs)} runs done in {time.time() - started:.0f} s")
        return 1 if failures else 0
    results = new_results(plan, args, argv, None if args.aggregate_only else time.time() - started, failures)
    if not args.aggregate_only:
        steps = args.timing_steps if args.timing_steps is not None else (2 if args.quick else 12)
        run_timing(plan, models, out, steps, console)
    report(results, plan, args, out, models)
    json_path, md_path = write_results(results, out, console, publish=not args.quick and (args.out is None or args.publish),
                                       merge=args.study == "default150",
                                       side_arms=args.skip_arms.split(",") if args.skip_arms else ())
    console.print(f"results: {json_path}; tables: {md_path}; plots under {out}")
    if failures:
        console.print(f"[red]{len(failures)} runs failed:[/] " + "; ".join(f"{f['run']}: {f['last_line']}" for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
