"""Rollout allocation strategies behind one ask/tell interface (see base.py and README.md)."""

from __future__ import annotations

from vigor_cli.allocation.ada import ReinforceAdaAllocator
from vigor_cli.allocation.auto import AutoAllocator
from vigor_cli.allocation.base import Allocator, DrawFn, Request, StepResult
from vigor_cli.allocation.dynamic import DynamicSamplingAllocator, GresoAllocator
from vigor_cli.allocation.knapsack import KnapsackAllocator
from vigor_cli.allocation.pods import PodsAllocator
from vigor_cli.allocation.rounds import AllocationError, population_variance
from vigor_cli.allocation.uniform import UniformAllocator
from vigor_cli.allocation.vigor import VigorAllocator
from vigor_cli.config import AllocationConfig

STRATEGIES = (
    "vigor", "grpo", "dapo", "greso", "pods", "random", "difficulty", "knapsack", "reinforce-ada", "auto",
)
BUDGETED = ("vigor", "random", "difficulty", "knapsack", "reinforce-ada", "auto")
"""Strategies capped by allocation.budget (default_budget)."""


def default_budget(cfg: AllocationConfig, prompts_per_step: int) -> int:
    """The per-step rollout cap of BUDGETED strategies: allocation.budget, or group_size x
    prompts (GRPO's spend)."""
    return cfg.budget if cfg.budget is not None else cfg.group_size * prompts_per_step


def make_allocator(cfg: AllocationConfig, prompts_per_step: int, seed: int) -> Allocator:
    """The strategy named by ``cfg.strategy``, seeded; the only constructor callers need."""
    s = cfg.strategy
    if s in ("vigor", "random", "difficulty"):
        keep_by = {"vigor": "variance", "random": "random", "difficulty": "difficulty"}[s]
        return VigorAllocator(
            prompts_per_step,
            seed,
            rounds=cfg.rounds,
            m0=cfg.m0,
            gamma=cfg.gamma,
            alpha=cfg.alpha,
            budget=default_budget(cfg, prompts_per_step),
            keep_by=keep_by,
        )
    if s == "grpo":
        return UniformAllocator(prompts_per_step, seed, group_size=cfg.group_size)
    if s == "dapo":
        return DynamicSamplingAllocator(
            prompts_per_step,
            seed,
            group_size=cfg.group_size,
            gen_batch_multiplier=cfg.gen_batch_multiplier,
            max_gen_batches=cfg.max_gen_batches,
        )
    if s == "greso":
        return GresoAllocator(
            prompts_per_step,
            seed,
            group_size=cfg.group_size,
            gen_batch_multiplier=cfg.gen_batch_multiplier,
            max_gen_batches=cfg.max_gen_batches,
            p_init=cfg.greso_p_init,
            p_step=cfg.greso_p_step,
            target_zero_var=cfg.greso_target_zero_var,
            easy_share=cfg.greso_easy_share,
            easy_mean=cfg.greso_easy_mean,
            hard_mean=cfg.greso_hard_mean,
            p_min=cfg.greso_p_min,
            p_max=cfg.greso_p_max,
            min_keep=cfg.greso_min_keep,
        )
    if s == "pods":
        return PodsAllocator(prompts_per_step, seed, n=cfg.pods_n, m=cfg.pods_m)
    budget = default_budget(cfg, prompts_per_step)
    if s == "knapsack":
        return KnapsackAllocator(
            prompts_per_step,
            seed,
            budget=budget,
            min_n=cfg.knapsack_min,
            max_n=cfg.knapsack_max,
            history=cfg.knapsack_history,
            prior=(cfg.knapsack_prior_a, cfg.knapsack_prior_b),
        )
    if s == "reinforce-ada":
        return ReinforceAdaAllocator(
            prompts_per_step,
            seed,
            budget=budget,
            round_size=cfg.ada_round_size,
            rounds=cfg.ada_rounds,
            keep=cfg.ada_keep,
            threshold=cfg.ada_positive_threshold,
            exit_rule=cfg.ada_exit,
        )
    if s == "auto":
        return AutoAllocator(
            prompts_per_step,
            seed,
            budget=budget,
            width=cfg.auto_width,
            census=cfg.auto_census,
            margin=cfg.auto_margin,
            max_rollouts=cfg.auto_max_rollouts,
            history=cfg.auto_history,
        )
    raise AssertionError(f"unknown strategy {s!r}")  # the config's Literal rules this out


__all__ = [
    "BUDGETED",
    "STRATEGIES",
    "AllocationError",
    "Allocator",
    "AutoAllocator",
    "KnapsackAllocator",
    "ReinforceAdaAllocator",
    "DrawFn",
    "DynamicSamplingAllocator",
    "GresoAllocator",
    "PodsAllocator",
    "Request",
    "StepResult",
    "UniformAllocator",
    "VigorAllocator",
    "default_budget",
    "make_allocator",
    "population_variance",
]
