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
    """Up to 8 binary rewards as 0/1 digits; more as 'correct/n'; others by their mean."""
    if all(r in (0.0, 1.0) for r in rewards):
        if len(rewards) <= 8:
            return "".join("1" if r else "0" for r in rewards)
        return f"{int(sum(rewards))}/{len(rewards)}"
    return f"mean {sum(rewards) / len(rewards):.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _truncate(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def step_summary(summary: dict) -> Any:
    """The step's summary as a two-column grid (definitions in report/allocation.py)."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rollouts, budget = summary["rollouts"], summary["budget"]
    if summary["budget_is_cap"]:
        spent = f"{rollouts} of {budget} rollouts"
    else:
        spent = f"{rollouts} rollouts (no cap; GRPO with group_size would use {budget})"
    spent += f", {summary['used']} of them in the update"
    if summary["skipped"]:
        spent += f"; {summary['skipped']} prompts skipped before rollout"
    grid.add_row("budget", spent)
    grid.add_row(
        "vs GRPO",
        f"GRPO spending these rollouts: {_num(summary['grpo_per_prompt'], 1)} per prompt; "
        f"here {summary['min_per_prompt']} to {summary['max_per_prompt']}",
    )
    grid.add_row("concentration", f"top 10% of prompts got {_pct(summary['top10_share'])} of the "
                 "rollouts (uniform: 10%)")
    grid.add_row("zero variance", f"{_pct(summary['zero_var_frac'])} of prompts (all rewards equal)")
    grid.add_row("kept vs dropped", f"mean pool variance {_num(summary['mean_var_kept'])} kept vs "
                 f"{_num(summary['mean_var_dropped'])} dropped, at each selection")
    if summary.get("decision"):
        grid.add_row("auto", summary["decision_reason"] or summary["decision"])
    return grid


def inspect_allocation(
    run: Path = typer.Argument(..., help="Run directory (written by `vigor train`)."),
    step: Optional[int] = typer.Option(None, help="Show this step."),
    last: Optional[int] = typer.Option(None, help="Show the last K steps (default: the last one)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    text_width: int = typer.Option(60, help="Characters of prompt text shown per row."),
    overview_rows: int = typer.Option(
        20, min=1, help="Rows of the across-steps overview (steps are sampled evenly beyond this)."
    ),
) -> None:
    """Per-step tables of prompts and their rollouts per round, and an overview across steps."""
    from rich.table import Table

    from vigor_cli.report.allocation import load_allocation, summarize_step
    from vigor_cli.runs import check_run_dir, read_config

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
        rows = []
        for p in sorted(s.prompts, key=lambda p: -p.total):
            by_round = {r.round: r for r in p.rounds}
            cells = []
            for i in range(1, rounds + 1):
                r = by_round.get(i)
                if r is None or r.added == 0:
                    cells.append(("", ""))
                    continue
                cell = f"+{r.added} {_rewards_text(r.rewards)} {_num(r.pool_variance, 2)}"
                cells.append((cell, {True: "green", False: "dim red", None: ""}[r.kept]))
            status_style = "green" if p.status == "kept" else "dim"
            rows.append([(p.uid, ""), *cells, (str(p.total), ""), (p.status, status_style)])
        headers = ["prompt", *(f"round {i}" for i in range(1, rounds + 1)), "total", "status"]
        t = Table(
            title=f"step {s.step} ({s.strategy}): {summary['prompts']} prompts, "
            f"{summary['rollouts']} rollouts",
            title_justify="left",
        )
        # every column but the prompt text keeps its full width; the text takes what is left
        widths = [max([len(h)] + [len(row[j][0]) for row in rows]) for j, h in enumerate(headers)]
        for header, width in zip(headers, widths):
            t.add_column(header, no_wrap=True, min_width=width,
                         justify="right" if header == "total" else "left")
        room = console.width - sum(widths) - 3 * len(widths) - 4
        t.add_column("text", overflow="ellipsis", no_wrap=True, max_width=max(8, room))
        for row, p in zip(rows, sorted(s.prompts, key=lambda p: -p.total)):
            t.add_row(
                *(f"[{style}]{text}[/]" if style and text else text for text, style in row),
                _truncate(p.text, text_width),
            )
        console.print(t)
        console.print(
            "[dim]round cells: +new rollouts, their rewards (1 = correct), variance of the pool so "
            "far; green = kept for the next round, red = dropped[/]"
        )
        console.print(step_summary(summary))

    o = Table(
        title=f"overview: {len(summaries)} steps (top10% = share of rollouts on the 10 % of "
        "prompts that got most; zero-var = share of prompts with all rewards equal)",
        title_justify="left",
    )
    decided = any(row.get("decision") for row in summaries)
    for col in ("step", "prompts", "rollouts", "used", "top10%", "zero-var", "var kept",
                "var drop", "max", *(("plan",) if decided else ())):
        o.add_column(col, justify="right")
    for row in overview:
        o.add_row(
            str(row["step"]), str(row["prompts"]), str(row["rollouts"]), str(row["used"]),
            _pct(row["top10_share"]), _pct(row["zero_var_frac"]),
            _num(row["mean_var_kept"]), _num(row["mean_var_dropped"]), str(row["max_per_prompt"]),
            *((row.get("decision") or "-",) if decided else ()),
        )
    console.print(o)
    if decided:
        counts = {}
        for row in summaries:
            if row.get("decision"):
                counts[row["decision"]] = counts.get(row["decision"], 0) + 1
        console.print("auto's plan per step: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                      + " (plan column; the reason is under each step's table)")
