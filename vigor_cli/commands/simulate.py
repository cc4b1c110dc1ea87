"""`vigor simulate`: the real allocators under simulated pass rates, compared in one table."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.settings import known_names
from vigor_cli.console import console
from vigor_cli.errors import UserError
from vigor_cli.study.simulate import POOL_PER_PROMPT, TARGET_GAIN, SimSettings

_D = SimSettings()  # the one place simulate's own defaults live

_ALLOC = "Allocation (override allocation.* keys)"
_LEARN = "Learning mode (a toy model)"


_LAW_HELP = ("Law of per-prompt pass rates: beta:A,B | mix:P0,P1[,A,B] (mass P0 at 0, P1 at 1, the rest "
             "Beta(A,B)) | pareto:K[,XM] (reward variances ~ Pareto(K)) | file:PATH. "
             f"Default {_D.law}.")
_LEARN_HELP = ("Let pass rates rise with the signal each prompt receives (a model) and report rollouts to "
               "a target mean pass rate.")


def _alloc(key: str, help: str):
    """The flag that overrides allocation.KEY, with that key's bounds (``pods.n``: --pods-n)."""
    return opt.for_key(f"allocation.{key}", "--" + key.replace("_", "-").replace(".", "-"), help=help,
                       rich_help_panel=_ALLOC)


def simulate(
    strategy: Annotated[str, typer.Option(help=f"Comma-separated strategies to compare ({known_names('strategy')}), or 'all'.")] = "all",
    pass_rates: Annotated[Optional[str], typer.Option(help=_LAW_HELP)] = None,
    steps: Annotated[Optional[int], opt.count("--steps", help=f"Steps per strategy (default {_D.steps}).")] = None,
    prompts: Annotated[Optional[int], opt.for_key("train.prompts_per_step", "--prompts", help="Prompts per step (default train.prompts_per_step).")] = None,
    pool: Annotated[Optional[int], opt.count("--pool", help=f"Prompts in the pool (default {POOL_PER_PROMPT} x prompts).")] = None,
    tests: Annotated[Optional[int], opt.count("--tests", help=f"Reward = share of TESTS passed, each with the prompt's pass rate (default {_D.tests} = binary).")] = None,
    seed: Annotated[Optional[int], opt.seed(help="Seed (default train.seed).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the machine-readable summary instead of the table.")] = False,
    config: Annotated[Optional[str], typer.Option(help="YAML run config to read allocation keys from.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override any config key, e.g. --set allocation.greso.p_step=0.02.")] = None,
    rounds: Annotated[Optional[int], _alloc("rounds", "VIGOR T.")] = None,
    m0: Annotated[Optional[int], _alloc("m0", "VIGOR m0.")] = None,
    gamma: Annotated[Optional[float], _alloc("gamma", "VIGOR gamma.")] = None,
    alpha: Annotated[Optional[float], _alloc("alpha", "VIGOR alpha.")] = None,
    budget: Annotated[Optional[int], _alloc("budget", "VIGOR rollouts per step cap.")] = None,
    group_size: Annotated[Optional[int], _alloc("group_size", "G for grpo/dapo/greso.")] = None,
    gen_batch_multiplier: Annotated[Optional[float], _alloc("gen_batch_multiplier", "DAPO/GRESO generation batch.")] = None,
    max_gen_batches: Annotated[Optional[int], _alloc("max_gen_batches", "DAPO/GRESO limit.")] = None,
    pods_n: Annotated[Optional[int], _alloc("pods.n", "PODS n.")] = None,
    pods_m: Annotated[Optional[int], _alloc("pods.m", "PODS m.")] = None,
    learn: Annotated[bool, typer.Option(help=_LEARN_HELP, rich_help_panel=_LEARN)] = False,
    lr: Annotated[Optional[float], opt.number("--lr", low=0, low_open=True, integer=False, help=f"Pass-rate step per unit of signal (default {_D.lr}).", rich_help_panel=_LEARN)] = None,
    transfer: Annotated[Optional[float], opt.number("--transfer", low=0, integer=False, help=f"Transfer between prompts: every prompt, sampled or not, moves by this x the step's breadth (how many prompts its signal spans; default {_D.transfer}).", rich_help_panel=_LEARN)] = None,
    target: Annotated[Optional[float], opt.number("--target", low=0, low_open=True, high=1, integer=False, help=f"Target mean pass rate (default: initial mean + {TARGET_GAIN}).", rich_help_panel=_LEARN)] = None,
) -> None:
    """Drive the real allocators with simulated rewards and compare where the rollouts go."""
    from vigor_cli.settings import build_config
    from vigor_cli.report.simulate_table import print_table
    from vigor_cli.study.simulate import simulate as run_simulation

    allocation = dict(
        rounds=rounds, m0=m0, gamma=gamma, alpha=alpha, budget=budget, group_size=group_size,
        gen_batch_multiplier=gen_batch_multiplier, max_gen_batches=max_gen_batches,
    )
    allocation.update({"pods.n": pods_n, "pods.m": pods_m})
    overrides = {f"allocation.{k}": v for k, v in allocation.items()}
    overrides.update({"train.prompts_per_step": prompts, "train.seed": seed})
    cfg = build_config(config, overrides=overrides, sets=set_, strategy_rules=False)  # each compared one: simulate.check_settings
    names = strategy_names(strategy)
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
