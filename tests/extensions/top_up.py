"""A strategy added from outside vigor_cli (vigor_cli/allocation/README.md, "Adding a strategy").

``top-up``: round 1 gives every prompt ``first`` rollouts; round 2 spreads the rest of the
step's budget evenly over the prompts whose round-1 rewards were mixed (all of them when
none was). Nothing in vigor_cli names it: this module registers it, its test imports it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from vigor_cli.allocation import default_budget, register
from vigor_cli.allocation.base import Request
from vigor_cli.allocation.registry import options
from vigor_cli.allocation.rounds import RoundAllocator
from vigor_cli.config import StrategyOptions


class TopUpOptions(StrategyOptions):
    """The strategy's own keys: the section allocation.top-up (allocation.top-up.first)."""

    first: int = Field(2, ge=1, le=64, description="Rollouts per prompt in round 1.")


class TopUpAllocator(RoundAllocator):
    name = "top-up"

    def __init__(self, prompts_per_step: int, seed: int, *, first: int, budget: int) -> None:
        super().__init__(prompts_per_step, seed)
        self.first, self.budget = first, budget

    def _begin(self) -> None:
        self._uids = self._draw(self.prompts_per_step)
        self._round = 0

    def _next_round(self) -> list[Request]:
        self._round += 1
        if self._round == 1:
            return [Request(uid, self.first) for uid in self._uids]
        if self._round == 2:
            mixed = [uid for uid in self._uids if self._variance(uid) > 0] or self._uids
            each = (self.budget - self.first * len(self._uids)) // len(mixed)
            return [Request(uid, each) for uid in mixed] if each > 0 else []
        return []

    def _after_round(self, uids: list[str]) -> None:
        for uid in uids:
            self._mark(uid, self._round == 1 and self._variance(uid) > 0)

    def _budget(self) -> int:
        return self.budget


def check(a: Any, p: int, n_train: int | None) -> None:
    """Round 1 must fit in the budget; the message names the keys to change."""
    first = options(a).first
    if first * p > default_budget(a, p):
        raise ValueError(
            f"allocation.top-up.first x train.prompts_per_step ({first} x {p}) exceeds "
            f"allocation.budget ({default_budget(a, p)})"
        )


@register("top-up", budgeted=True, check=check, options=TopUpOptions,
          summary="first rollouts per prompt, then the rest of the budget to the mixed prompts")
def build(cfg: Any, prompts_per_step: int, seed: int) -> TopUpAllocator:
    return TopUpAllocator(prompts_per_step, seed, first=options(cfg).first,
                          budget=default_budget(cfg, prompts_per_step))
