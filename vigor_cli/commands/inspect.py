"""`vigor inspect-allocation RUN`: which prompts got which rollouts, and why.

Reads allocation.jsonl as it is (a run still training included: a partial
last line is skipped with a note). Definitions of the summary figures are in
:mod:`vigor_cli.report.allocation`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from vigor_cli.console import console, err_console
from vigor_cli.errors import UserError


def _rewards_text(rewards: list[float]) -> str:
    """Binary rewards as a string of 0/1 digits, others as two-decimal numbers."""
    if all(r in (0.0, 1.0) for r in rewards):
        return "".join("1" if r else "0" for r in rewards)
    return ",".join(f"{r:.2f}" for r in rewards)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _truncate(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def inspect_allocation(
    run: Path = typer.Argument(..., help="Run directory (written by `vigor train`)."),
    step: Optional[int] = typer.Option(None, help="Show this step."),
    last: Optional[int] = typer.Option(None, help="Show the last K steps (default: the last one)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    text_width: int = typer.Option(60, help="Characters of prompt text shown per row."),
    overview_rows: int = typer.Option(
        20, help="Rows of the across-steps overview (steps are sampled evenly beyond this)."
    ),
) -> None:
    """Per-step tables of prompts and their rollouts per round, and an overview across steps."""
    from rich.table import Table

    from vigor_cli.report.allocation import load_allocation, summarize_step
    from vigor_cli.report.rundir import check_run_dir, read_config

    if step is not None and last is not None:
        raise UserError("give --step or --last, not both")
    if last is not None and last < 1:
        raise UserError(f"--last {last}: must be >= 1")
    run_path = check_run_dir(run)
    steps, notes = load_allocation(run_path, read_config(run_path))
    for note in notes:
        err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    if step is not None:
        chosen = [s for s in steps if s.step == step]
        if not chosen:
            have = f"{steps[0].step}..{steps[-1].step}"
            raise UserError(f"--step {step}: no record for that step in allocation.jsonl (has {have})")
    else:
        chosen = steps[-(last or 1):]

    summaries = [summarize_step(s) for s in steps]
    every = max(1, -(-len(summaries) // overview_rows))
    overview = summaries[::every]
    if overview[-1] is not summaries[-1]:
        overview.append(summaries[-1])

    if as_json:
        payload: dict[str, Any] = {
            "run": str(run_path),
            "steps": [
                {
                    "summary": summarize_step(s),
                    "prompts": [
                        {
                            "uid": p.uid,
                            "text": p.text,
                            "total": p.total,
                            "status": p.status,
                            "rounds": [r.__dict__ for r in p.rounds],
                        }
                        for p in s.prompts
                    ],
                }
                for s in chosen
            ],
            "overview": summaries,
            "notes": notes,
        }
        console.print_json(json.dumps(payload))
        return

    for s in chosen:
        summary = summarize_step(s)
        rounds = summary["rounds"]
        t = Table(
            title=f"step {s.step} ({s.strategy}): {summary['prompts']} prompts, "
            f"{summary['rollouts']} rollouts",
            title_justify="left",
        )
        t.add_column("prompt")
        for i in range(rounds):
            t.add_column(f"round {i + 1}\n+n rewards var")
        t.add_column("total", justify="right")
        t.add_column("status")
        t.add_column("text", overflow="ellipsis", no_wrap=True)
        for p in sorted(s.prompts, key=lambda p: -p.total):
            cells = []
            for i in range(rounds):
                if i >= len(p.rounds) or p.rounds[i].added == 0:
                    cells.append("")
                    continue
                r = p.rounds[i]
                cell = f"+{r.added} {_rewards_text(r.rewards)} {_num(r.pool_variance, 2)}"
                style = {True: "green", False: "dim red", None: ""}[r.kept]
                cells.append(f"[{style}]{cell}[/]" if style else cell)
            status_style = "green" if p.status == "kept" else "dim"
            t.add_row(
                p.uid, *cells, str(p.total), f"[{status_style}]{p.status}[/]",
                _truncate(p.text, text_width),
            )
        console.print(t)
        grpo = summary["grpo_per_prompt"]
        console.print(
            f"budget used {summary['rollouts']} of {summary['budget']} "
            f"(GRPO at this budget: {_num(grpo, 1)} per prompt; here "
            f"{summary['min_per_prompt']}..{summary['max_per_prompt']}), "
            f"zero-variance prompts {_pct(summary['zero_var_frac'])}, "
            f"mean pool variance kept {_num(summary['mean_var_kept'])} vs dropped "
            f"{_num(summary['mean_var_dropped'])}, top-10% prompts got "
            f"{_pct(summary['top10_share'])} of the rollouts",
            highlight=False,
        )

    o = Table(title=f"overview: {len(summaries)} steps", title_justify="left")
    for col in ("step", "prompts", "rollouts", "top-10% share", "zero-var", "var kept",
                "var dropped", "max/prompt"):
        o.add_column(col, justify="right")
    for row in overview:
        o.add_row(
            str(row["step"]), str(row["prompts"]), str(row["rollouts"]),
            _pct(row["top10_share"]), _pct(row["zero_var_frac"]),
            _num(row["mean_var_kept"]), _num(row["mean_var_dropped"]), str(row["max_per_prompt"]),
        )
    console.print(o)
