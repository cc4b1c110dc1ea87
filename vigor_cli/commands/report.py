"""`vigor report RUN...`: accuracy against rollouts and tokens, and rollouts to a target.

The rule behind rollouts-to-target (first crossing, linear interpolation,
seed groups) is documented in :mod:`vigor_cli.report.curves`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.console import console, err_console, print_json, shown


def report(
    runs: Annotated[List[Path], typer.Argument(help="Run directories (written by `vigor train`).")],
    target: Annotated[Optional[float], opt.number("--target", integer=False, help="Target value of --metric, in its own range (a pass rate in [0, 1]; a mean reward in the task's reward range: with --reward-weights 1,0.5, [0, 1.5]); default the lowest final value among the runs.")] = None,
    baseline: Annotated[Optional[str], typer.Option(help="The run the ratios compare against (path or directory name); default the first.")] = None,
    out: Annotated[Path, opt.output_dir("--out", help="Directory for the PNG plots and report.json.")] = Path("report"),
    metric: Annotated[str, typer.Option(help="metrics.jsonl key on the y-axis: eval/accuracy (the mean reward: accuracy for the bundled tasks), eval/pass_rate (share of samples at reward >= task.pass_threshold), eval/<set>/accuracy, eval/<set>/pass_rate, eval/<set>/reward/<name>/mean, ...")] = "eval/accuracy",
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of tables.")] = False,
) -> None:
    """Plot a metric (accuracy, mean reward, pass rate) against cumulative rollouts and tokens; tabulate rollouts to a target."""
    from vigor_cli.run import provenance
    from vigor_cli.report.curves import default_target, run_curve
    from vigor_cli.report.provenance_view import print_records
    from vigor_cli.report.run_report import baseline_index, build_report, check_target, print_report
    from vigor_cli.run.directory import load_run

    loaded = [load_run(p) for p in runs]
    if target is not None:
        check_target(loaded, metric, target)
    for r in loaded:
        for note in r.notes:
            err_console.print(f"[yellow]note:[/] {shown(note)}", highlight=False, soft_wrap=True)
    curves = [run_curve(r, metric) for r in loaded]
    base = baseline_index(loaded, baseline)
    if target is None:
        target = default_target(curves)
    table = build_report(loaded, curves, target, base, metric, out)
    records = {r.name: provenance.read(r.path) for r in loaded}
    if as_json:
        print_json({**table, "provenance": records})
        return
    print_report(console, table, metric, target, out)
    print_records(console, records)
