"""`vigor report RUN...`: accuracy against rollouts and tokens, and rollouts to a target.

The rule behind rollouts-to-target (first crossing, linear interpolation,
seed groups) is documented in :mod:`vigor_cli.report.curves`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.console import console, err_console, shown


def report(
    runs: Annotated[List[Path], typer.Argument(help="Run directories (written by `vigor train`).")],
    target: Annotated[Optional[float], opt.number("--target", low=0, high=1, integer=False, help="Target accuracy; default the lowest final accuracy among the runs.")] = None,
    baseline: Annotated[Optional[str], typer.Option(help="The run the ratios compare against (path or directory name); default the first.")] = None,
    out: Annotated[Path, opt.output_dir("--out", help="Directory for the PNG plots and report.json.")] = Path("report"),
    metric: Annotated[str, typer.Option(help="metrics.jsonl key on the y-axis, e.g. eval/math500/accuracy.")] = "eval/accuracy",
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of tables.")] = False,
) -> None:
    """Plot accuracy against cumulative rollouts and tokens; tabulate rollouts to a target."""
    from vigor_cli import provenance
    from vigor_cli.report.curves import default_target, run_curve
    from vigor_cli.report.provenance_view import print_records
    from vigor_cli.report.run_report import baseline_index, build_report, print_report
    from vigor_cli.runs import load_run

    loaded = [load_run(p) for p in runs]
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
        console.print_json(json.dumps({**table, "provenance": records}))
        return
    print_report(console, table, metric, target, out)
    print_records(console, records)
