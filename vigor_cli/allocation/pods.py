"""PODS (policy optimisation with down-sampling): generate n, train on the max-variance m.

The subset search (docs/algorithms.md): sort the n rewards; for i = 0..m try
the i largest plus the (m - i) smallest and keep the subset with the largest
population variance. Equal rewards are ordered by a seeded random key, and ties
between values of i are broken by a seeded random choice, so which rollouts are
kept never depends on their position in the batch.
"""

from __future__ import annotations

import random
from itertools import accumulate

from typing import Any

from pydantic import Field

from vigor_cli.allocation.base import Request
from vigor_cli.allocation.registry import options, register
from vigor_cli.allocation.rounds import RoundAllocator, RuleError
from vigor_cli.config import ROLLOUTS_MAX, StrategyOptions


def max_variance_subset(rewards: list[float], m: int, rng: random.Random) -> list[int]:
    """Indices (ascending) of the best top-i/bottom-(m-i) subset of size m.

    Equal rewards are ordered by a seeded random key; several best i are chosen among
    at random (seeded).
    """
    n = len(rewards)
    m = min(m, n)  # fewer rewards than asked when some rollouts could not be scored
    if m == 0:
        return []
    rand = rng.random
    ranked = sorted(zip(rewards, [rand() for _ in range(n)], range(n)))  # ties: seeded random
    order = [j for _, _, j in ranked]
    values = [v for v, _, _ in ranked]
    prefix = [0.0, *accumulate(values)]
    prefix_sq = [0.0, *accumulate([v * v for v in values])]
    variances = []
    for i in range(m + 1):  # the i largest plus the (m - i) smallest
        low = m - i
        total = prefix[low] + prefix[n] - prefix[n - i]
        total_sq = prefix_sq[low] + prefix_sq[n] - prefix_sq[n - i]
        mean = total / m
        variances.append(max(0.0, total_sq / m - mean * mean))
    best = max(variances)
    ties = [i for i, v in enumerate(variances) if v >= best - 1e-12]
    i = ties[0] if len(ties) == 1 else rng.choice(ties)
    return sorted(order[: m - i] + order[n - i :])


class PodsAllocator(RoundAllocator):
    """``pods``: n rollouts per prompt, the update uses the max-variance m of them."""

    name = "pods"

    def __init__(self, prompts_per_step: int, seed: int, *, n: int, m: int) -> None:
        super().__init__(prompts_per_step, seed)
        self.rules(n, m)
        self.n, self.m = n, m

    @staticmethod
    def rules(n: int, m: int) -> None:
        """ValueError (a UserError from the constructor) naming the keys to change."""
        if m > n:
            raise RuleError(f"allocation.pods.m ({m}) must be <= allocation.pods.n ({n})")

    def _begin(self) -> None:
        self._uids = self._draw(self.prompts_per_step)
        self._asked = False
        self._chosen: dict[str, list[int]] = {}

    def _next_round(self) -> list[Request]:
        if self._asked:
            return []
        self._asked = True
        return [Request(uid, self.n) for uid in self._uids]

    def _after_round(self, uids: list[str]) -> None:
        for uid in uids:
            self._chosen[uid] = max_variance_subset(self._rewards[uid], self.m, self.rng)

    def _groups(self) -> dict[str, list[int]]:
        return self._chosen

    def _budget(self) -> int:
        return self.n * self.prompts_per_step


# --------------------------------------------------------------------------- registry
class PodsOptions(StrategyOptions):
    """``allocation.pods``."""

    n: int = Field(16, ge=2, le=ROLLOUTS_MAX, description="PODS: rollouts generated per prompt.")
    m: int = Field(8, ge=1, le=ROLLOUTS_MAX, description="PODS: rollouts per prompt kept for the update.")


def check_pods(a: Any, p: int, n_train: int | None) -> None:
    o = options(a)
    PodsAllocator.rules(o.n, o.m)


@register("pods", check=check_pods, options=PodsOptions, legacy_prefix="pods",
          summary="PODS: allocation.pods.n rollouts per prompt, the max-variance pods.m of them in the update")
def build(cfg: Any, prompts_per_step: int, seed: int) -> PodsAllocator:
    o = options(cfg)
    return PodsAllocator(prompts_per_step, seed, n=o.n, m=o.m)
