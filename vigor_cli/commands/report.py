"""`vigor report RUN...`: accuracy against rollouts and tokens, and rollouts to a target.

The rule behind rollouts-to-target (first crossing, linear interpolation,
seed groups) is documented in :mod:`vigor_cli.report.curves`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from vigor_cli.console import console, err_console
from vigor_cli.errors import UserError


def _fmt_count(x: float | None) -> str:
    if x is None:
        return "not reached"
    return f"{x:,.0f}"


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def report(
    runs: List[Path] = typer.Argument(..., help="Run directories (written by `vigor train`)."),
    target: Optional[float] = typer.Option(
        None, help="Target accuracy; default the lowest final accuracy among the runs."
    ),
    baseline: Optional[str] = typer.Option(
        None, help="The run the ratios compare against (path or directory name); default the first."
    ),
    out: Path = typer.Option(Path("report"), help="Directory for the PNG plots and report.json."),
    metric: str = typer.Option(
        "eval/accuracy", help="metrics.jsonl key on the y-axis, e.g. eval/math500/accuracy."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of tables."),
) -> None:
    """Plot accuracy against cumulative rollouts and tokens; tabulate rollouts to a target."""
    from rich.table import Table

    from vigor_cli.report.curves import default_target, first_crossing, group_runs, run_curve, target_table
    from vigor_cli.report.plots import plot_accuracy
    from vigor_cli.runs import load_run

    loaded = [load_run(p) for p in runs]
    for r in loaded:
        for note in r.notes:
            err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    curves = [run_curve(r, metric) for r in loaded]
    baseline_index = 0
    if baseline is not None:
        matches = [
            i for i, r in enumerate(loaded)
            if r.name == baseline or r.path.resolve() == Path(baseline).resolve()
        ]
        if not matches:
            raise UserError(f"--baseline {baseline}: not one of the runs given")
        baseline_index = matches[0]
    if target is None:
        target = default_target(curves)
    elif not 0.0 <= target <= 1.0:
        raise UserError(f"--target {target}: must be an accuracy in [0, 1]")

    groups = group_runs(loaded, curves)
    table = target_table(loaded, curves, groups, target, baseline_index)
    table["metric"] = metric
    plotted = [g.mean for g in groups]
    out.mkdir(parents=True, exist_ok=True)
    pngs = {}
    for axis in ("rollouts", "tokens"):
        # each marker from the very curve it is drawn on (the table's rows are in run order)
        crossings = [first_crossing(getattr(c, f"by_{axis}").x, getattr(c, f"by_{axis}").y, target)
                     for c in plotted]
        pngs[axis] = str(
            plot_accuracy(plotted, axis, out / f"accuracy_vs_{axis}.png", target, crossings, metric)
        )
    table["plots"] = pngs
    (out / "report.json").write_text(json.dumps(table, indent=2) + "\n")

    if as_json:
        console.print_json(json.dumps(table))
        return

    def render(rows: list[dict], title: str, first_col: str) -> Table:
        t = Table(title=title, title_justify="left")
        t.add_column(first_col)
        t.add_column("final acc", justify="right")
        t.add_column("rollouts to target", justify="right")
        t.add_column("speed-up", justify="right")
        t.add_column("tokens to target", justify="right")
        t.add_column("speed-up (tokens)", justify="right")
        for row in rows:
            t.add_row(
                row["name"],
                f"{row['final_accuracy']:.3f}",
                _fmt_count(row["rollouts_to_target"]),
                _fmt_ratio(row["rollouts_speedup"]),
                _fmt_count(row["tokens_to_target"]),
                _fmt_ratio(row["tokens_speedup"]),
            )
        return t

    console.print(
        render(
            table["runs"],
            f"{metric} >= {target:.4f}: first crossing, linear interpolation; "
            f"speed-up = baseline ({table['baseline']}) / run",
            "run",
        )
    )
    if table["groups"]:
        console.print(render(table["groups"], "seed groups (mean curve; band = min-max)", "group"))
    console.print(f"plots: {pngs['rollouts']}, {pngs['tokens']}; table: {out / 'report.json'}")
