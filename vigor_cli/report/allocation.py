"""Where the rollout budget went: per-step tables and an overview from allocation.jsonl.

Each line of allocation.jsonl is one step's allocator record (format in
vigor_cli/allocation/README.md) with ``step`` and each prompt's ``text``
added by the trainer. :func:`parse_step` turns a record into
:class:`StepAllocation`; the summaries below only use that shape.

Definitions (per step):

- budget used: rollouts generated this step, used in the update or not;
  GRPO at the same budget would give every prompt budget / prompts rollouts.
- zero-variance fraction: share of prompts whose final pool of rewards has
  zero (population) variance, i.e. that add no gradient to the update.
- kept vs dropped variance: at every round where the allocator chose which
  prompts continue, the mean pool variance of the prompts it kept and of
  those it dropped (VIGOR keeps the largest, so kept >= dropped).
- top-10% share: the share of the step's rollouts spent on the 10 % of
  prompts (at least one) that got the most; uniform GRPO gives 10 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vigor_cli.errors import UserError
from vigor_cli.report.rundir import read_jsonl


@dataclass
class RoundInfo:
    added: int
    """New rollouts generated for the prompt in this round."""
    rewards: list[float]
    """Their rewards."""
    pool_variance: float | None
    """Population variance of every reward of the prompt so far."""
    kept: bool | None
    """After this round: True continued, False dropped, None no choice made (last round)."""


@dataclass
class PromptAllocation:
    uid: str
    text: str
    rounds: list[RoundInfo]
    total: int
    status: str
    """'kept' (to the end), 'dropped@t' (after round t), or the allocator's word (e.g. 'filtered')."""

    @property
    def rewards(self) -> list[float]:
        return [r for rnd in self.rounds for r in rnd.rewards]

    @property
    def final_variance(self) -> float:
        return population_variance(self.rewards)


@dataclass
class StepAllocation:
    step: int
    strategy: str
    budget: int | None
    prompts: list[PromptAllocation]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rollouts(self) -> int:
        return sum(p.total for p in self.prompts)


def population_variance(values: list[float]) -> float:
    if not values:
        return 0.0
    m = sum(values) / len(values)
    return sum((v - m) ** 2 for v in values) / len(values)


def parse_step(record: dict, where: str) -> StepAllocation:
    """A StepAllocation from one allocation.jsonl record; ``where`` names it in errors."""
    raise NotImplementedError  # filled in against vigor_cli/allocation/README.md


def summarize_step(sa: StepAllocation) -> dict[str, Any]:
    """The step summary shown under the per-prompt table (definitions in the module doc)."""
    n = len(sa.prompts)
    budget = sa.budget if sa.budget is not None else sa.rollouts
    kept_vars = [r.pool_variance for p in sa.prompts for r in p.rounds
                 if r.kept is True and r.pool_variance is not None]
    dropped_vars = [r.pool_variance for p in sa.prompts for r in p.rounds
                    if r.kept is False and r.pool_variance is not None]
    totals = sorted((p.total for p in sa.prompts), reverse=True)
    top = max(1, math.ceil(0.1 * n)) if n else 0
    return {
        "step": sa.step,
        "strategy": sa.strategy,
        "prompts": n,
        "rounds": max((len(p.rounds) for p in sa.prompts), default=0),
        "rollouts": sa.rollouts,
        "budget": budget,
        "grpo_per_prompt": (budget / n) if n else None,
        "min_per_prompt": min(totals, default=0),
        "max_per_prompt": max(totals, default=0),
        "zero_var_frac": (sum(p.final_variance == 0 for p in sa.prompts) / n) if n else None,
        "mean_var_kept": (sum(kept_vars) / len(kept_vars)) if kept_vars else None,
        "mean_var_dropped": (sum(dropped_vars) / len(dropped_vars)) if dropped_vars else None,
        "top10_share": (sum(totals[:top]) / sa.rollouts) if sa.rollouts else None,
    }


def config_budget(config: dict, prompts: int) -> int | None:
    """The step budget the run was configured with: allocation.budget, else group_size x
    prompts (the budget of GRPO with group_size; see config.AllocationConfig.budget)."""
    alloc = config.get("allocation") or {}
    if alloc.get("budget") is not None:
        return int(alloc["budget"])
    if alloc.get("group_size") is not None:
        return int(alloc["group_size"]) * prompts
    return None


def load_allocation(run_path: Path, config: dict) -> tuple[list[StepAllocation], list[str]]:
    """Every step of the run's allocation.jsonl, in step order, and notes for the reader."""
    path = run_path / "allocation.jsonl"
    if not path.is_file():
        raise UserError(f"{run_path}: no allocation.jsonl yet (has the first step finished?)")
    content = read_jsonl(path)
    steps = []
    for i, rec in enumerate(content.records, start=1):
        sa = parse_step(rec, f"{path} line {i}")
        if sa.budget is None:
            sa.budget = config_budget(config, len(sa.prompts))
        steps.append(sa)
    if not steps:
        raise UserError(f"{path}: no complete record yet (has the first step finished?)")
    steps.sort(key=lambda s: s.step)
    return steps, content.notes
