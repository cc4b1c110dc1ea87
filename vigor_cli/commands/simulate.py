"""`vigor simulate`: the real allocators under simulated pass rates, compared in one table."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

from vigor_cli.config import known_names
from vigor_cli.console import console
from vigor_cli.errors import UserError
from vigor_cli.simulate import POOL_PER_PROMPT, TARGET_GAIN, SimSettings

_D = SimSettings()  # the one place simulate's own defaults live

_ALLOC = "Allocation (override allocation.* keys)"
_LEARN = "Learning mode (a toy model)"


def simulate(
    strategy: Annotated[
        str, typer.Option(help=f"Comma-separated strategies to compare ({known_names('strategy')}), or 'all'.")
    ] = "all",
    pass_rates: Annotated[
        Optional[str],
        typer.Option(
            help="Law of per-prompt pass rates: beta:A,B | mix:P0,P1[,A,B] (mass P0 at 0, P1 at 1, "
            "the rest Beta(A,B)) | pareto:K[,XM] (reward variances ~ Pareto(K)) | file:PATH. "
            f"Default {_D.law}."
        ),
    ] = None,
    steps: Annotated[Optional[int], typer.Option(help=f"Steps per strategy (default {_D.steps}).")] = None,
    prompts: Annotated[
        Optional[int], typer.Option(help="Prompts per step (default train.prompts_per_step).")
    ] = None,
    pool: Annotated[
        Optional[int], typer.Option(help=f"Prompts in the pool (default {POOL_PER_PROMPT} x prompts).")
    ] = None,
    tests: Annotated[
        Optional[int],
        typer.Option(
            help="Reward = share of TESTS passed, each with the prompt's pass rate "
            f"(default {_D.tests} = binary)."
        ),
    ] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed (default train.seed).")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the machine-readable summary instead of the table.")
    ] = False,
    config: Annotated[Optional[str], typer.Option(help="YAML run config to read allocation keys from.")] = None,
    set_: Annotated[
        Optional[list[str]],
        typer.Option("--set", help="Override any config key, e.g. --set allocation.greso_p_step=0.02."),
    ] = None,
    rounds: Annotated[Optional[int], typer.Option(help="VIGOR T.", rich_help_panel=_ALLOC)] = None,
    m0: Annotated[Optional[int], typer.Option(help="VIGOR m0.", rich_help_panel=_ALLOC)] = None,
    gamma: Annotated[Optional[float], typer.Option(help="VIGOR gamma.", rich_help_panel=_ALLOC)] = None,
    alpha: Annotated[Optional[float], typer.Option(help="VIGOR alpha.", rich_help_panel=_ALLOC)] = None,
    budget: Annotated[
        Optional[int], typer.Option(help="VIGOR rollouts per step cap.", rich_help_panel=_ALLOC)
    ] = None,
    group_size: Annotated[
        Optional[int], typer.Option(help="G for grpo/dapo/greso.", rich_help_panel=_ALLOC)
    ] = None,
    gen_batch_multiplier: Annotated[
        Optional[float], typer.Option(help="DAPO/GRESO generation batch.", rich_help_panel=_ALLOC)
    ] = None,
    max_gen_batches: Annotated[
        Optional[int], typer.Option(help="DAPO/GRESO limit.", rich_help_panel=_ALLOC)
    ] = None,
    pods_n: Annotated[Optional[int], typer.Option(help="PODS n.", rich_help_panel=_ALLOC)] = None,
    pods_m: Annotated[Optional[int], typer.Option(help="PODS m.", rich_help_panel=_ALLOC)] = None,
    learn: Annotated[
        bool,
        typer.Option(
            help="Let pass rates rise with the signal each prompt receives (a model) and report "
            "rollouts to a target mean pass rate.",
            rich_help_panel=_LEARN,
        ),
    ] = False,
    lr: Annotated[Optional[float], typer.Option(help=f"Pass-rate step per unit of signal (default {_D.lr}).", rich_help_panel=_LEARN)] = None,
    transfer: Annotated[
        Optional[float],
        typer.Option(
            help=f"Weight of signal shared by the whole pool: generalisation (default {_D.transfer}).",
            rich_help_panel=_LEARN,
        ),
    ] = None,
    target: Annotated[
        Optional[float],
        typer.Option(
            help=f"Target mean pass rate (default: initial mean + {TARGET_GAIN}).", rich_help_panel=_LEARN
        ),
    ] = None,
) -> None:
    """Drive the real allocators with simulated rewards and compare where the rollouts go."""
    from vigor_cli.allocation import STRATEGIES
    from vigor_cli.config import build_config
    from vigor_cli.simulate import simulate as run_simulation

    overrides = {
        f"allocation.{k}": v
        for k, v in dict(
            rounds=rounds, m0=m0, gamma=gamma, alpha=alpha, budget=budget, group_size=group_size,
            gen_batch_multiplier=gen_batch_multiplier, max_gen_batches=max_gen_batches,
            pods_n=pods_n, pods_m=pods_m,
        ).items()
    }
    overrides.update({"train.prompts_per_step": prompts, "train.seed": seed})
    cfg = build_config(config, overrides=overrides, sets=set_, strategy_rules=False)  # each compared one: simulate
    names = STRATEGIES if strategy.strip() == "all" else tuple(
        s.strip() for s in strategy.split(",") if s.strip()
    )
    if not names:
        raise UserError("--strategy: give at least one strategy, or all")
    if cfg.allocation.pods_m > cfg.allocation.pods_n and "pods" in names:
        raise UserError(
            f"allocation.pods_m ({cfg.allocation.pods_m}) must be <= allocation.pods_n ({cfg.allocation.pods_n})"
        )
    given = dict(law=pass_rates, steps=steps, pool=pool, tests=tests, lr=lr, transfer=transfer, target=target)
    settings = SimSettings(
        strategies=names,
        prompts=cfg.train.prompts_per_step,
        seed=cfg.train.seed,
        learn=learn,
        **{k: v for k, v in given.items() if v is not None},
    )
    summary = run_simulation(settings, cfg.allocation)
    if json_out:
        typer.echo(json.dumps(summary, indent=2))
    else:
        _print_table(summary)


def _fmt(value: Any, spec: str = "") -> str:
    return "–" if value is None else format(value, spec)


def _print_table(summary: dict[str, Any]) -> None:
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
    console.print(table)
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
                          "signal, depth weighted by the share of prompts seen before, beats the wide "
                          "plan's by allocation.auto_margin; the reason per step is in its record).")
    pareto_rows = {n: r["pareto"] for n, r in summary["strategies"].items() if "pareto" in r}
    if pareto_rows:
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
    if learning:
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
