"""`vigor simulate`'s tables: where each strategy's rollouts went, the signal they bought,
and (under a Pareto law) the measured gain against the closed form."""

from __future__ import annotations

from typing import Any


def _fmt(value: Any, spec: str = "") -> str:
    return "–" if value is None else format(value, spec)


def strategies_table(summary: dict[str, Any]) -> tuple[Any, list[str]]:
    """The main table, and a note per strategy that stopped early."""
    from rich.table import Table

    learning = "learning" in summary
    title = (
        f"{summary['mode']}\nlaw {summary['law']}, pool {summary['pool']} prompts "
        f"(mean pass rate {summary['pool_mean_pass_rate']}), {summary['prompts']} prompts/step, "
        f"{summary['steps']} steps, seed {summary['seed']}"
    )
    table = Table(title=title, title_justify="left")
    for header in ("strategy", "rollouts /step", "per round", "used /step", "zero-var rollouts",
                   "signal /step", "signal /rollout"):
        table.add_column(header, justify="left" if header == "strategy" else "right", overflow="fold")
    if learning:
        table.add_column(f"rollouts to {summary['learning']['target']}", justify="right")
    notes = []
    for name, r in summary["strategies"].items():
        row = [
            name,
            _fmt(r["rollouts_per_step"], ".0f"),
            "/".join(f"{x:.0f}" for x in r["rollouts_per_round"]),
            _fmt(r["used_per_step"], ".0f"),
            _fmt(r["zero_var_rollout_share"], ".1%"),
            _fmt(r["signal_per_step"], ".1f"),
            _fmt(r["signal_per_rollout"], ".3f"),
        ]
        if learning:
            row.append(_fmt(r["rollouts_to_target"], ",d") if r["rollouts_to_target"] else "not reached")
        if "error" in r:
            row[0] = f"[red]{name}[/]"
            notes.append(f"{name}: stopped after {r['steps_run']} steps: {r['error']}")
        table.add_row(*row)
    return table, notes


def print_signal_notes(summary: dict[str, Any], console: Any) -> None:
    """What 'signal' means, the ratios to grpo, and auto's plan choices."""
    console.print(
        "signal = sum over the update's groups of (rollouts used x reward std): each used rollout "
        "weighs the same in the GRPO loss, and a zero-variance group adds nothing. zero-var "
        "rollouts = share of generated rollouts whose prompt's rewards were all equal. Per round "
        "for dapo/greso = per generation batch.",
        style="dim",
    )
    base = summary["strategies"].get("grpo", {}).get("signal_per_rollout")
    if base:
        ratios = ", ".join(
            f"{name} {r['signal_per_rollout'] / base:.2f}x"
            for name, r in summary["strategies"].items()
            if name != "grpo" and r.get("signal_per_rollout") is not None
        )
        if ratios:
            console.print(f"Signal per rollout relative to grpo: {ratios}.")
    for name, r in summary["strategies"].items():
        if r.get("decisions"):
            chosen = ", ".join(f"{plan} in {n} steps" for plan, n in r["decisions"].items())
            console.print(f"{name} chose {chosen} (a census, then the deep plan when its expected "
                          "signal, depth weighted by how recently the census prompts recurred, beats the wide "
                          "plan's by allocation.auto.margin; the reason per step is in its record).")


def print_pareto(summary: dict[str, Any], console: Any) -> None:
    """Under a Pareto law: measured gain, oracle ranking and the closed form per strategy."""
    from rich.table import Table

    pareto_rows = {n: r["pareto"] for n, r in summary["strategies"].items() if "pareto" in r}
    if not pareto_rows:
        return
    pt = Table(title="Gain under the Pareto law (variance-weighted rollouts / uniform spread)",
               title_justify="left")
    for header in ("strategy", "measured", "oracle ranking", "closed-form η", "speed-up η^(1/3)"):
        pt.add_column(header, justify="left" if header == "strategy" else "right")
    for name, p in pareto_rows.items():
        pt.add_row(name, f"{p['eta_measured']:.2f}", _fmt(p.get("eta_oracle_ranking"), ".2f"),
                   _fmt(p.get("eta_closed_form"), ".2f"), _fmt(p.get("speedup_closed_form"), ".2f"))
    console.print(pt)
    console.print(
        "measured: the allocator's own (noisy) ranking; oracle: the same schedule ranking on the "
        "true variances; closed form: the paper's formula, for an untruncated Pareto law (the "
        "simulated one stops at variance 1/4).",
        style="dim",
    )


def print_table(summary: dict[str, Any], console: Any) -> None:
    """Everything `vigor simulate` prints without --json."""
    table, notes = strategies_table(summary)
    console.print(table)
    print_signal_notes(summary, console)
    print_pareto(summary, console)
    if "learning" in summary:
        console.print(
            f"[bold]Learning mode is a model[/], not evidence about real training: pass rates rise "
            f"by lr x (own signal + transfer x shared signal) x (1 - p), lr "
            f"{summary['learning']['lr']}, transfer {summary['learning']['transfer']}.",
        )
    elif summary["strategies"]:
        console.print("Try --learn for rollouts to a target pass rate under a toy learning model, "
                      "or --json for the full summary.", style="dim")
    for note in notes:
        console.print(f"[red]{note}[/]", highlight=False)
