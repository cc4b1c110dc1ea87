"""Knapsack-RL (Li et al. 2025): the step's budget split by a knapsack over prompt values.

The source (arXiv 2509.25849 and its public code) gives each prompt of the batch an
item value V(n, p) = P(a group of n is not all-equal | p) x InfoGain(p), with
InfoGain(p) = p (1 - p)^2 and p the prompt's pass rate estimated from earlier epochs,
cost = rollouts, and solves "maximise the sum of values with exactly the step's budget
of rollouts" with every prompt between min_n = 2 and max_n = 128 rollouts. It allocates
once, before sampling.

Details: docs/modules.md.
"""

from __future__ import annotations

import heapq
from typing import Any

from pydantic import Field

from vigor_cli.allocation.base import Request
from vigor_cli.allocation.estimate import knapsack_value, posterior, posterior_mean
from vigor_cli.allocation.registry import default_budget, options, register
from vigor_cli.allocation.rounds import RoundAllocator, RuleError, compact
from vigor_cli.config import ROLLOUTS_MAX, StrategyOptions


def greedy_knapsack(
    marginal, items: list[str], start: dict[str, int], cap: int, budget: int, tie: dict[str, float]
) -> dict[str, int]:
    """Extra units per item maximising a sum of concave item values with ``budget`` units.

    ``marginal(item, n)`` is the value of going from n to n + 1 units; items start at
    ``start[item]`` and may not exceed ``cap``. Spends exactly ``budget`` unless every item
    is at its cap. Ties in marginal value go to the smaller ``tie`` key.
    """
    extra = {u: 0 for u in items}
    heap = [(-marginal(u, start[u]), tie[u], u) for u in items if start[u] < cap]
    heapq.heapify(heap)
    left = budget
    while left > 0 and heap:
        _, key, u = heapq.heappop(heap)
        extra[u] += 1
        left -= 1
        n = start[u] + extra[u]
        if n < cap:
            heapq.heappush(heap, (-marginal(u, n), key, u))
    return extra


def update_history(history: dict[str, list[float]], uid: str, rewards: list[float], window: int) -> None:
    """Append a step's rewards to the prompt's history, keeping the latest ``window``."""
    kept = (history.get(uid, []) + [round(r, 6) for r in rewards])[-window:] if window else []
    if kept:
        history[uid] = kept
    else:
        history.pop(uid, None)


class KnapsackAllocator(RoundAllocator):
    """``knapsack``: min_n each, then the rest of the budget by knapsack on V(n, p)."""

    name = "knapsack"

    def __init__(
        self,
        prompts_per_step: int,
        seed: int,
        *,
        budget: int,
        min_n: int,
        max_n: int,
        history: int,
        prior: tuple[float, float],
    ) -> None:
        super().__init__(prompts_per_step, seed)
        self.rules(budget, min_n, max_n, prompts_per_step)
        self.budget, self.min_n, self.max_n = budget, min_n, max_n
        self.window, self.prior = history, prior
        self.history: dict[str, list[float]] = {}
        """uid -> the latest ``window`` rewards of the prompt from earlier steps."""

    @staticmethod
    def rules(budget: int, min_n: int, max_n: int, prompts_per_step: int) -> None:
        """RuleError naming the keys to change (the constructor and the config both ask)."""
        if max_n < min_n:
            raise RuleError(f"allocation.knapsack.max ({max_n}) must be >= allocation.knapsack.min ({min_n})")
        if budget < min_n * prompts_per_step:
            raise RuleError(
                f"allocation.budget ({budget}) is below knapsack's first round: allocation.knapsack.min x "
                f"train.prompts_per_step ({min_n} x {prompts_per_step} = {min_n * prompts_per_step}); raise "
                f"allocation.budget (or allocation.rollouts_per_prompt) or lower allocation.knapsack.min"
            )

    def p_hat(self, uid: str) -> float:
        """Posterior mean pass rate: prior, then history, then this step's rewards so far."""
        ab = posterior(posterior(self.prior, self.history.get(uid, [])), self._rewards[uid])
        return posterior_mean(ab)

    def _begin(self) -> None:
        self._uids = self._draw(self.prompts_per_step)
        self._round = 0
        self._p: dict[str, float] = {}

    def _next_round(self) -> list[Request]:
        return self._first_then_extra(self.min_n)

    def _after_round(self, uids: list[str]) -> None:
        if self._round != 1:
            return
        self._p = {uid: self.p_hat(uid) for uid in self._uids}
        tie = {uid: self.rng.random() for uid in self._uids}
        left = self.budget - self.min_n * len(self._uids)
        p = self._p
        self._extra = greedy_knapsack(
            lambda u, n: knapsack_value(p[u], n + 1) - knapsack_value(p[u], n),
            self._uids,
            {u: self.min_n for u in self._uids},
            self.max_n,
            left,
            tie,
        )
        for uid in self._uids:
            self._mark(uid, self._extra[uid] > 0)
            self._notes[uid] = {"p_hat": compact(p[uid]), "planned": self.min_n + self._extra[uid]}

    def _end_step(self, groups: dict[str, list[int]]) -> None:
        for uid in self._uids:
            update_history(self.history, uid, self._rewards[uid], self.window)

    def _budget(self) -> int:
        return self.budget

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["history"] = self.history
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.history = {uid: list(h) for uid, h in state["history"].items()}


# --------------------------------------------------------------------------- registry
class KnapsackOptions(StrategyOptions):
    """``allocation.knapsack``."""

    min: int = Field(2, ge=1, le=ROLLOUTS_MAX, description="knapsack: rollouts every prompt gets in round 1 (the source's min_n).")
    max: int = Field(128, ge=1, le=ROLLOUTS_MAX, description="knapsack: most rollouts one prompt may get in a step (the source's max_n).")
    history: int = Field(
        16, ge=0, le=ROLLOUTS_MAX,
        description="knapsack: a prompt's latest rewards from earlier steps that inform its pass "
        "rate (the source's window of 16); 0 = this step's round 1 only.",
    )
    prior_a: float = Field(1.0, gt=0, le=1e6, description="knapsack: Beta prior of pass rates, a (with prior_b: Beta(1, 1) = uniform).")
    prior_b: float = Field(1.0, gt=0, le=1e6, description="knapsack: Beta prior of pass rates, b.")


def check_knapsack(a: Any, p: int, n_train: int | None) -> None:
    o = options(a)
    KnapsackAllocator.rules(default_budget(a, p), o.min, o.max, p)


@register("knapsack", budgeted=True, check=check_knapsack, options=KnapsackOptions, legacy_prefix="knapsack",
          summary="Knapsack-RL: knapsack.min each, then extras by a greedy knapsack on pass-rate estimates")
def build(cfg: Any, prompts_per_step: int, seed: int) -> KnapsackAllocator:
    o = options(cfg)
    return KnapsackAllocator(
        prompts_per_step, seed, budget=default_budget(cfg, prompts_per_step),
        min_n=o.min, max_n=o.max, history=o.history, prior=(o.prior_a, o.prior_b),
    )
