"""Reinforce-Ada (Xiong et al. 2025): sample in rounds until each prompt holds enough
positive and negative rollouts, then train on a balanced group of ``keep`` of them.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from vigor_cli.allocation.base import Request
from vigor_cli.allocation.registry import default_budget, options, register
from vigor_cli.allocation.rounds import RoundAllocator
from vigor_cli.config import ROLLOUTS_MAX, StrategyOptions
from vigor_cli.errors import UserError

AdaExit = Literal["balanced", "positive"]


def balanced_subset(positive: list[bool], keep: int, variant: AdaExit = "balanced", resolved: bool = True) -> list[int]:
    """Indices (ascending) of the rollouts the update uses, the source's rule.

    ``positive[i]`` classifies rollout i (generation order). Earliest of each class first.
    """
    pos = [i for i, p in enumerate(positive) if p]
    neg = [i for i, p in enumerate(positive) if not p]
    take = min(keep, len(positive))
    if variant == "positive" and not resolved:
        ratio = len(pos) / len(positive) if positive else 0.0
        t_pos = max(min(math.ceil(ratio * keep), take - 1), 1)
        t_neg = take - t_pos
    else:
        t_pos = keep // 2
        t_neg = keep - t_pos
    t_pos = min(t_pos, len(pos))
    t_neg = min(t_neg, len(neg))
    short = take - t_pos - t_neg
    if short > 0:
        if len(pos) > t_pos:
            t_pos += min(len(pos) - t_pos, short)
        elif len(neg) > t_neg:
            t_neg += min(len(neg) - t_neg, short)
    return sorted(pos[:t_pos] + neg[:t_neg])


class ReinforceAdaAllocator(RoundAllocator):
    """``reinforce-ada``: rounds of M per active prompt until each is resolved, under a cap."""

    name = "reinforce-ada"

    def __init__(
        self,
        prompts_per_step: int,
        seed: int,
        *,
        budget: int,
        round_size: int,
        rounds: int,
        keep: int,
        threshold: float,
        exit_rule: AdaExit = "balanced",
    ) -> None:
        super().__init__(prompts_per_step, seed)
        if budget < 1:
            raise UserError(f"allocation.budget must be >= 1 (got {budget})")
        self.budget, self.round_size, self.rounds = budget, round_size, rounds
        self.keep, self.threshold, self.exit_rule = keep, threshold, exit_rule

    def _begin(self) -> None:
        self._active = self._draw(self.prompts_per_step)
        self._resolved: set[str] = set()
        self._t = 0
        self._spent = 0
        self._last = False
        self._cut: dict[str, int] | None = None

    def _counts(self, uid: str) -> tuple[int, int]:
        pos = sum(1 for r in self._rewards[uid] if r > self.threshold)
        return pos, len(self._rewards[uid]) - pos

    def _enough(self, uid: str) -> bool:
        pos, neg = self._counts(uid)
        if self.exit_rule == "positive":
            return pos >= 1
        return pos >= self.keep // 2 and neg >= self.keep - self.keep // 2

    def _next_round(self) -> list[Request]:
        if self._last or not self._active:
            return []
        self._t += 1
        return self._even_round(self._active, self.round_size, self.rounds)

    def _after_round(self, uids: list[str]) -> None:
        still = []
        for uid in uids:
            if self._enough(uid):
                self._resolved.add(uid)
                self._mark(uid, False, "resolved")
            elif self._last:
                pass  # no further round: "kept" stays null
            else:
                still.append(uid)
                self._mark(uid, True)
        # Prompts that got no rollout in a cut round stay as they were (not active any more).
        self._active = [] if self._last else still

    def _groups(self) -> dict[str, list[int]]:
        groups = {}
        for uid, pool in self._rewards.items():
            if not pool:
                continue
            positive = [r > self.threshold for r in pool]
            groups[uid] = balanced_subset(positive, self.keep, self.exit_rule, uid in self._resolved)
        return groups

    def _budget(self) -> int:
        return self.budget

    def _extra_totals(self) -> dict[str, Any]:
        return {"cut": self._cut, "resolved": len(self._resolved)}


# --------------------------------------------------------------------------- registry
class AdaOptions(StrategyOptions):
    """``allocation.reinforce-ada``."""

    round_size: int = Field(
        4, ge=1, le=ROLLOUTS_MAX,
        description="reinforce-ada: new rollouts per active prompt per round (the source's M is 8, "
        "with no budget cap).",
    )
    rounds: int = Field(4, ge=1, le=64, description="reinforce-ada: most sampling rounds per step (N).")
    keep: int = Field(
        4, ge=1, le=ROLLOUTS_MAX, description="reinforce-ada: rollouts per prompt in the update (n), balanced by class."
    )
    positive_threshold: float = Field(
        0.7, ge=0, lt=1, description="reinforce-ada: a rollout is positive iff its reward > this."
    )
    exit: AdaExit = Field(
        "balanced",
        description="reinforce-ada: a prompt stops sampling once it holds floor(n/2) positives and "
        "the rest negatives ('balanced', the paper's main variant) or one positive ('positive').",
    )


@register("reinforce-ada", budgeted=True, options=AdaOptions, legacy_prefix="ada",
          summary="Reinforce-Ada: rounds until a prompt holds a balanced set, reinforce-ada.keep per prompt in the update")
def build(cfg: Any, prompts_per_step: int, seed: int) -> ReinforceAdaAllocator:
    o = options(cfg)
    return ReinforceAdaAllocator(
        prompts_per_step, seed, budget=default_budget(cfg, prompts_per_step),
        round_size=o.round_size, rounds=o.rounds, keep=o.keep,
        threshold=o.positive_threshold, exit_rule=o.exit,
    )
