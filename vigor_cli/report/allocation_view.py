"""Tables of `vigor inspect-allocation`: each step's prompts and their rollouts per round,
the step's summary, and the overview across steps (definitions in report/allocation.py)."""

from __future__ import annotations

from typing import Any

from vigor_cli.console import literal


def _rewards_text(rewards: list[float]) -> str:
    """Up to 8 binary rewards as 0/1 digits, more as 'correct/n'; up to 4 others as their
    values (``0.5,1.5``), more by their mean."""
    if all(r in (0.0, 1.0) for r in rewards):
        if len(rewards) <= 8:
            return "".join("1" if r else "0" for r in rewards)
        return f"{int(sum(rewards))}/{len(rewards)}"
    if len(rewards) <= 4:
        return ",".join(f"{r:.3g}" for r in rewards)
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
    grid.add_row("zero variance", f"{_pct(summary['zero_var_frac'])} of prompts (all rewards equal); "
                 f"{summary['zero_var_rollouts']} rollouts ({_pct(summary['zero_var_rollouts_share'])}) spent without signal")
    if summary["given_more"] and summary["given_none"]:
        grid.add_row("more vs none", f"after a round, mean pool variance {_num(summary['mean_var_more'])} of the "
                     f"{summary['given_more']} prompts given more rollouts vs {_num(summary['mean_var_none'])} of "
                     f"the {summary['given_none']} given none")
    elif summary["given_more"]:
        grid.add_row("more vs none", f"every prompt was given more rollouts after its round (mean pool "
                     f"variance {_num(summary['mean_var_more'])}); none was stopped")
    else:
        grid.add_row("more vs none", "no prompt was given more rollouts after its first round")
    if summary["left_out"]:
        grid.add_row("in update", f"mean pool variance {_num(summary['mean_var_in_update'])} of the prompts in "
                     f"the update vs {_num(summary['mean_var_left_out'])} of the {summary['left_out']} left out")
    if summary.get("rule"):
        grid.add_row("rule", f"{summary['strategy']}: {summary['rule']}")
    if summary.get("decision"):
        grid.add_row("decided", summary["decision_reason"] or summary["decision"])
        if summary.get("decision_record"):
            grid.add_row("measured", record_text(summary["decision_record"]))
    return grid


def _value_text(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value_text(v)}" for k, v in value.items())
    return str(value)


def record_text(record: dict) -> str:
    """A decision record's fields as recorded (``census: prompts 64, ...; signal: ...``)."""
    return "; ".join(f"{key}: {_value_text(value)}" for key, value in record.items())


def as_json(run_path: Any, chosen: list, summaries: list[dict], notes: list[str],
            health: dict[int, dict[str, float]] | None = None) -> dict:
    """The machine-readable form of the chosen steps and the overview."""
    from vigor_cli.report.allocation import summarize_step

    health = health or {}
    return {
        "run": str(run_path),
        "steps": [
            {
                "summary": {**summarize_step(s), "health": health.get(s.step, {})},
                "prompts": [
                    {
                        "uid": p.uid,
                        "text": p.text,
                        "total": p.total,
                        "status": p.status,
                        "rounds": [r.__dict__ for r in p.rounds],
                        **({"notes": p.notes} if p.notes else {}),
                    }
                    for p in s.prompts
                ],
            }
            for s in chosen
        ],
        "overview": summaries,
        "notes": notes,
    }


def _round_cells(p: Any, rounds: int) -> list[tuple[str, str]]:
    """(text, style) per round of one prompt: +new rollouts, their rewards, pool variance."""
    by_round = {r.round: r for r in p.rounds}
    cells = []
    for i in range(1, rounds + 1):
        r = by_round.get(i)
        if r is None or r.added == 0:
            cells.append(("", ""))
            continue
        cell = f"+{r.added} {_rewards_text(r.rewards)} {_num(r.pool_variance, 2)}"
        cells.append((cell, {True: "green", False: "dim red", None: ""}[r.kept]))
    return cells


def step_table(s: Any, summary: dict, text_width: int, width: int) -> Any:
    """One step: a row per prompt (most rollouts first), a column per round."""
    from rich.table import Table

    rounds = summary["rounds"]
    prompts = sorted(s.prompts, key=lambda p: -p.total)
    rows = []
    noted = any(p.notes for p in prompts)
    for p in prompts:
        status_style = "green" if p.status == "kept" else "dim"
        notes = [(_value_text(p.notes), "")] if noted else []
        rows.append([(p.uid, ""), *_round_cells(p, rounds), (str(p.total), ""), (p.status, status_style), *notes])
    headers = ["prompt", *(f"round {i}" for i in range(1, rounds + 1)), "total", "status", *(["notes"] if noted else [])]
    t = Table(
        title=f"step {s.step} ({s.strategy}): {summary['prompts']} prompts, "
        f"{summary['rollouts']} rollouts",
        title_justify="left",
    )
    # every column but the prompt text keeps its full width; the text takes what is left
    widths = [max([len(h)] + [len(row[j][0]) for row in rows]) for j, h in enumerate(headers)]
    for header, w in zip(headers, widths):
        t.add_column(header, no_wrap=True, min_width=w,
                     justify="right" if header == "total" else "left")
    room = width - sum(widths) - 3 * len(widths) - 4
    t.add_column("text", overflow="ellipsis", no_wrap=True, max_width=max(8, room))
    for row, p in zip(rows, prompts):
        t.add_row(
            *(f"[{style}]{text}[/]" if style and text else text for text, style in row),
            literal(_truncate(p.text, text_width)),
        )
    return t


def print_step(console: Any, s: Any, text_width: int, health: dict[str, float] | None = None) -> None:
    from vigor_cli.report.allocation import summarize_step

    summary = summarize_step(s)
    console.print(step_table(s, summary, text_width, console.width))
    low, high = s.reward_range
    read = "" if (low, high) == (0.0, 1.0) else (f"; the allocator read them as pass rates over "
                                                 f"allocation.reward_range [{low:g}, {high:g}]")
    console.print(
        f"[dim]round cells: +new rollouts, their raw rewards (as the task gave them; 1 = correct for the "
        f"bundled tasks){read}, variance of the pool so far; green = given more rollouts in a later round, "
        "red = given none; notes: the allocator's own fields for the prompt[/]"
    )
    console.print(step_summary(summary))
    if health:
        console.print(f"[yellow]health checks that held at step {s.step}:[/] " + health_text(health)
                      + " [dim](vigor_cli/train/health.py; thresholds in the config's health section)[/]", highlight=False)


def health_text(health: dict[str, float]) -> str:
    """``truncated 0.94, zero_variance 1.00``: the checks that held and their values."""
    return ", ".join(f"{name} {_num(value, 2)}" for name, value in health.items())


def overview_rows(summaries: list[dict], rows: int) -> list[dict]:
    """At most about ``rows`` summaries, sampled evenly, always with the last one."""
    every = max(1, -(-len(summaries) // rows))
    overview = summaries[::every]
    if overview[-1] is not summaries[-1]:
        overview.append(summaries[-1])
    return overview


def no_signal_line(summaries: list[dict]) -> str:
    """Rollouts spent without signal over every step (and, for auto, in its deep and wide steps)."""
    spent = sum(row["rollouts"] for row in summaries)
    flat = sum(row.get("zero_var_rollouts") or 0 for row in summaries)
    line = f"rollouts spent without signal (groups with all rewards equal): {flat} of {spent} ({_pct(flat / spent if spent else None)})"
    parts = []
    for plan in ("deep", "wide"):
        rows = [row for row in summaries if row.get("decision") == plan]
        n = sum(row["rollouts"] for row in rows)
        if rows:
            parts.append(f"{_pct(sum(row.get('zero_var_rollouts') or 0 for row in rows) / n if n else None)} "
                         f"in the {len(rows)} {plan} steps")
    return line + (f"; {', '.join(parts)}" if parts else "")


def print_overview(console: Any, summaries: list[dict], rows: int) -> None:
    """The across-steps table, and auto's plan counts when the run used auto."""
    from rich.table import Table

    o = Table(
        title=f"overview: {len(summaries)} steps (top10% = share of rollouts on the 10 % of "
        "prompts that got most; zero-var = share of prompts with all rewards equal; no-signal = share of "
        "rollouts spent in them; var more / "
        "var none = mean pool variance after a round of the prompts given more rollouts / none)",
        title_justify="left",
    )
    decided = any(row.get("decision") for row in summaries)
    flagged = any(row.get("health") for row in summaries)
    for col in ("step", "prompts", "rollouts", "used", "top10%", "zero-var", "no-signal", "var more",
                "var none", "max", *(("plan",) if decided else ()), *(("health",) if flagged else ())):
        o.add_column(col, justify="right")
    for row in overview_rows(summaries, rows):
        o.add_row(
            str(row["step"]), str(row["prompts"]), str(row["rollouts"]), str(row["used"]),
            _pct(row["top10_share"]), _pct(row["zero_var_frac"]), _pct(row.get("zero_var_rollouts_share")),
            _num(row["mean_var_more"]), _num(row["mean_var_none"]), str(row["max_per_prompt"]),
            *((row.get("decision") or "-",) if decided else ()),
            *((", ".join(row.get("health") or {}) or "-",) if flagged else ()),
        )
    console.print(o)
    console.print(no_signal_line(summaries), highlight=False)
    if flagged:
        from vigor_cli.report.curves import step_spans

        held: dict[str, list[int]] = {}
        for row in summaries:
            for name in row.get("health") or {}:
                held.setdefault(name, []).append(row["step"])
        console.print("[yellow]health checks held:[/] " + "; ".join(f"{n} at {step_spans(st)}" for n, st in held.items()),
                      highlight=False)
    if decided:
        counts: dict[str, int] = {}
        for row in summaries:
            if row.get("decision"):
                counts[row["decision"]] = counts.get(row["decision"], 0) + 1
        strategy = next(row["strategy"] for row in summaries if row.get("decision"))
        console.print(f"{strategy}'s decision per step: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                      + " (plan column; why, and what it measured, under each step's table)")
