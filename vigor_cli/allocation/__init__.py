"""Rollout allocation strategies behind one ask/tell interface (see base.py and README.md).

Every strategy registers itself in its own module (``@register``, registry.py); importing
this package imports the built-in ones. ``make_allocator`` is the one constructor callers need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vigor_cli.allocation import registry
from vigor_cli.allocation.registry import REGISTRY, Builder, Strategy, default_budget, register

# the built-in strategies, in the order `vigor simulate` and the help list them
from vigor_cli.allocation.vigor import VigorAllocator  # vigor, random, difficulty
from vigor_cli.allocation.uniform import UniformAllocator  # grpo
from vigor_cli.allocation.dynamic import DynamicSamplingAllocator, GresoAllocator  # dapo, greso
from vigor_cli.allocation.pods import PodsAllocator  # pods
from vigor_cli.allocation.knapsack import KnapsackAllocator  # knapsack
from vigor_cli.allocation.ada import ReinforceAdaAllocator  # reinforce-ada
from vigor_cli.allocation.pilot import PilotCommitAllocator  # pilot-commit
from vigor_cli.allocation.auto import AutoAllocator  # auto

from vigor_cli.allocation.base import Allocator, DrawFn, Request, StepResult
from vigor_cli.allocation.rounds import AllocationError, population_variance

if TYPE_CHECKING:
    from vigor_cli.config import AllocationConfig


def make_allocator(cfg: "AllocationConfig", prompts_per_step: int, seed: int) -> Allocator:
    """The strategy named by ``cfg.strategy``, seeded."""
    return registry.get(cfg.strategy).build(cfg, prompts_per_step, seed)


def __getattr__(name: str):
    # live views: a strategy registered after this package was imported is listed too
    if name == "STRATEGIES":
        return registry.names()
    if name == "BUDGETED":
        return registry.budgeted()
    raise AttributeError(name)


__all__ = [
    "BUDGETED",
    "REGISTRY",
    "STRATEGIES",
    "AllocationError",
    "Allocator",
    "AutoAllocator",
    "Builder",
    "KnapsackAllocator",
    "ReinforceAdaAllocator",
    "DrawFn",
    "DynamicSamplingAllocator",
    "GresoAllocator",
    "PilotCommitAllocator",
    "PodsAllocator",
    "Request",
    "StepResult",
    "Strategy",
    "UniformAllocator",
    "VigorAllocator",
    "default_budget",
    "make_allocator",
    "register",
    "population_variance",
]
