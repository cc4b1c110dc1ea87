"""VIGOR (variance-guided online rollout allocation) and its two ablations.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from vigor_cli.allocation.base import Request
from vigor_cli.allocation.registry import default_budget, register
from vigor_cli.allocation.rounds import RoundAllocator, ceil_fraction
from vigor_cli.errors import UserError

KeepBy = Literal["variance", "random", "difficulty"]


def rollouts_in_round(m0: int, gamma: float, t: int) -> int:
    """New rollouts per active prompt in round t (1-based): round-half-up of m0 * gamma^(t-1)."""
    return max(1, math.floor(m0 * gamma ** (t - 1) + 0.5))


class VigorAllocator(RoundAllocator):
    """Rounds of growing size on a shrinking set of high-variance prompts, under a hard cap."""

    def __init__(
        self,
        prompts_per_step: int,
        seed: int,
        *,
        rounds: int,
        m0: int,
        gamma: float,
        alpha: float,
        budget: int,
        keep_by: KeepBy = "variance",
    ) -> None:
        super().__init__(prompts_per_step, seed)
        if budget < 1:
            raise UserError(f"allocation.budget must be >= 1 (got {budget})")
        self.rounds, self.m0, self.gamma, self.alpha = rounds, m0, gamma, alpha
        self.budget = budget
        self.keep_by = keep_by
        self.name = {"variance": "vigor", "random": "random", "difficulty": "difficulty"}[keep_by]

    def _begin(self) -> None:
        self._active = self._draw(self.prompts_per_step)
        self._t = 0
        self._spent = 0
        self._last = False
        self._cut: dict[str, int] | None = None

    def _next_round(self) -> list[Request]:
        if self._last:
            return []
        self._t += 1
        return self._even_round(self._active, rollouts_in_round(self.m0, self.gamma, self._t), self.rounds)

    def _after_round(self, uids: list[str]) -> None:
        if self._last:
            return  # no selection after the final round; "kept" stays null
        # Sort key, smallest first = kept first; a seeded random number per prompt breaks
        # ties (drawn in the active list's order, so the same seed gives the same choice).
        tie = self.rng.random
        if self.keep_by == "variance":
            # rounded: running sums of fractional rewards differ in the last bits with the
            # order rewards arrived in, and that must not decide a tie
            keyed = [(-round(self._variance(uid), 12), tie(), uid) for uid in self._active]
        elif self.keep_by == "difficulty":
            # a prompt none of whose rollouts could be scored (reward None) ranks last
            keyed = [(round(self._stats[uid][0] / len(self._rewards[uid]), 12) if self._rewards[uid] else math.inf,
                      tie(), uid) for uid in self._active]
        else:
            keyed = [(0.0, tie(), uid) for uid in self._active]
        keyed.sort()
        n_keep = ceil_fraction(self.alpha, len(keyed))
        self._active = [uid for _, _, uid in keyed[:n_keep]]
        logs = self._rounds
        for i, (_, _, uid) in enumerate(keyed):
            logs[uid][-1]["kept"] = i < n_keep

    def _budget(self) -> int:
        return self.budget

    def _extra_totals(self) -> dict[str, Any]:
        return {"cut": self._cut}


# --------------------------------------------------------------------------- registry
def check_first_round(a: Any, p: int, n_train: int | None) -> None:
    """The budget must pay for round 1: m0 rollouts for every prompt of the step."""
    budget, first = default_budget(a, p), a.m0 * p
    if budget < first:
        raise ValueError(
            f"allocation.budget ({budget}) is below the first round's allocation.m0 x "
            f"train.prompts_per_step ({a.m0} x {p} = {first}); raise allocation.budget (or "
            f"allocation.rollouts_per_prompt) or lower allocation.m0"
        )


def _builder(keep_by: KeepBy):
    def build(cfg: Any, prompts_per_step: int, seed: int) -> VigorAllocator:
        return VigorAllocator(
            prompts_per_step, seed, rounds=cfg.rounds, m0=cfg.m0, gamma=cfg.gamma, alpha=cfg.alpha,
            budget=default_budget(cfg, prompts_per_step), keep_by=keep_by,
        )

    build.__qualname__ = f"build_{keep_by}"
    return build


register("vigor", budgeted=True, family="vigor", check=check_first_round,
         summary="VIGOR: rounds of m0*gamma^(t-1) new rollouts, keeping the alpha share with the "
         "largest reward variance")(_builder("variance"))
register("random", budgeted=True, family="vigor", check=check_first_round,
         summary="VIGOR's ablation: keeps a random alpha share each round")(_builder("random"))
register("difficulty", budgeted=True, family="vigor", check=check_first_round,
         summary="VIGOR's ablation: keeps the alpha share with the lowest mean reward")(_builder("difficulty"))
