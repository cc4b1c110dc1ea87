"""`vigor simulate`: the real allocators under simulated pass rates, compared in one table."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.console import console
from vigor_cli.errors import UserError
from vigor_cli.simulate import POOL_PER_PROMPT, TARGET_GAIN, SimSettings

_D = SimSettings()  # the one place simulate's own defaults live

_ALLOC = "Allocation (override allocation.* keys)"
_LEARN = "Learning mode (a toy model)"


def simulate(
    strategy: Annotated[
        str, typer.Option(help="Comma-separated strategies to compare, or 'all'.")
    ] = "all",
    pass_rates: Annotated[
        Optional[str],
        typer.Option(
            help="Law of per-prompt pass rates: beta:A,B | mix:P0,P1[,A,B] (mass P0 at 0, P1 at 1, "
            "the rest Beta(A,B)) | pareto:K[,XM] (reward variances ~ Pareto(K)) | file:PATH. "
            f"Default {_D.law}."
        ),
    ] = None,
    steps: Annotated[Optional[int], opt.count("--steps", help=f"Steps per strategy (default {_D.steps}).")] = None,
    prompts: Annotated[
        Optional[int], opt.for_key("train.prompts_per_step", "--prompts", help="Prompts per step (default train.prompts_per_step).")
    ] = None,
    pool: Annotated[
        Optional[int], opt.count("--pool", help=f"Prompts in the pool (default {POOL_PER_PROMPT} x prompts).")
    ] = None,
    tests: Annotated[
        Optional[int],
        opt.count(
            "--tests",
            help="Reward = share of TESTS passed, each with the prompt's pass rate "
            f"(default {_D.tests} = binary)."
        ),
    ] = None,
    seed: Annotated[Optional[int], opt.seed(help="Seed (default train.seed).")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the machine-readable summary instead of the table.")
    ] = False,
    config: Annotated[Optional[str], typer.Option(help="YAML run config to read allocation keys from.")] = None,
    set_: Annotated[
        Optional[list[str]],
        typer.Option("--set", help="Override any config key, e.g. --set allocation.greso_p_step=0.02."),
    ] = None,
    rounds: Annotated[Optional[int], opt.for_key("allocation.rounds", "--rounds", help="VIGOR T.", rich_help_panel=_ALLOC)] = None,
    m0: Annotated[Optional[int], opt.for_key("allocation.m0", "--m0", help="VIGOR m0.", rich_help_panel=_ALLOC)] = None,
    gamma: Annotated[Optional[float], opt.for_key("allocation.gamma", "--gamma", help="VIGOR gamma.", rich_help_panel=_ALLOC)] = None,
    alpha: Annotated[Optional[float], opt.for_key("allocation.alpha", "--alpha", help="VIGOR alpha.", rich_help_panel=_ALLOC)] = None,
    budget: Annotated[
        Optional[int], opt.for_key("allocation.budget", "--budget", help="VIGOR rollouts per step cap.", rich_help_panel=_ALLOC)
    ] = None,
    group_size: Annotated[
        Optional[int], opt.for_key("allocation.group_size", "--group-size", help="G for grpo/dapo/greso.", rich_help_panel=_ALLOC)
    ] = None,
    gen_batch_multiplier: Annotated[
        Optional[float], opt.for_key("allocation.gen_batch_multiplier", "--gen-batch-multiplier", help="DAPO/GRESO generation batch.", rich_help_panel=_ALLOC)
    ] = None,
    max_gen_batches: Annotated[
        Optional[int], opt.for_key("allocation.max_gen_batches", "--max-gen-batches", help="DAPO/GRESO limit.", rich_help_panel=_ALLOC)
    ] = None,
    pods_n: Annotated[Optional[int], opt.for_key("allocation.pods_n", "--pods-n", help="PODS n.", rich_help_panel=_ALLOC)] = None,
    pods_m: Annotated[Optional[int], opt.for_key("allocation.pods_m", "--pods-m", help="PODS m.", rich_help_panel=_ALLOC)] = None,
    learn: Annotated[
        bool,
        typer.Option(
            help="Let pass rates rise with the signal each prompt receives (a model) and report "
            "rollouts to a target mean pass rate.",
            rich_help_panel=_LEARN,
        ),
    ] = False,
    lr: Annotated[Optional[float], opt.number("--lr", low=0, low_open=True, integer=False, help=f"Pass-rate step per unit of signal (default {_D.lr}).", rich_help_panel=_LEARN)] = None,
    transfer: Annotated[
        Optional[float],
        opt.number(
            "--transfer", low=0, integer=False,
            help=f"Weight of signal shared by the whole pool: generalisation (default {_D.transfer}).",
            rich_help_panel=_LEARN,
        ),
    ] = None,
    target: Annotated[
        Optional[float],
        opt.number(
            "--target", low=0, low_open=True, high=1, integer=False,
            help=f"Target mean pass rate (default: initial mean + {TARGET_GAIN}).", rich_help_panel=_LEARN
        ),
    ] = None,
) -> None:
    """Drive the real allocators with simulated rewards and compare where the rollouts go."""
    from vigor_cli.config import build_config
    from vigor_cli.report.simulate_table import print_table
    from vigor_cli.simulate import simulate as run_simulation

    allocation = dict(
        rounds=rounds, m0=m0, gamma=gamma, alpha=alpha, budget=budget, group_size=group_size,
        gen_batch_multiplier=gen_batch_multiplier, max_gen_batches=max_gen_batches,
        pods_n=pods_n, pods_m=pods_m,
    )
    overrides = {f"allocation.{k}": v for k, v in allocation.items()}
    overrides.update({"train.prompts_per_step": prompts, "train.seed": seed})
    cfg = build_config(config, overrides=overrides, sets=set_)
    names = strategy_names(strategy)
    check_like_train(cfg, names)
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
        print_table(summary, console)


def strategy_names(text: str) -> tuple[str, ...]:
    """--strategy: 'all' or a comma-separated list (unknown names are refused by the simulator)."""
    from vigor_cli.allocation import STRATEGIES

    names = STRATEGIES if text.strip() == "all" else tuple(s.strip() for s in text.split(",") if s.strip())
    if not names:
        raise UserError("--strategy: give at least one strategy, or all")
    return names


def check_like_train(cfg: Any, names: tuple[str, ...]) -> None:
    """Refuse the allocation settings `vigor train` would refuse for any simulated strategy
    (a budget below a strategy's first round, PODS keeping more than it generates), with
    train's own check and message."""
    from vigor_cli.allocation import STRATEGIES
    from vigor_cli.trainer import validate_config

    if cfg.allocation.pods_m > cfg.allocation.pods_n and "pods" in names:
        raise UserError(
            f"allocation.pods_m ({cfg.allocation.pods_m}) must be <= allocation.pods_n ({cfg.allocation.pods_n})"
        )
    for name in names:
        if name in STRATEGIES:  # an unknown name is the simulator's to report
            as_train = cfg.model_copy(deep=True)
            as_train.allocation.strategy = name
            validate_config(as_train)
