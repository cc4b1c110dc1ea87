"""Pilot-Commit (Kim et al. 2026, arXiv 2605.26606): a pilot round measures each prompt,
the rest of the budget is committed to the prompts whose pilot pass rate is in the middle.

Details: docs/modules.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from vigor_cli.allocation.base import Request
from vigor_cli.allocation.registry import default_budget, options, register
from vigor_cli.allocation.rounds import RoundAllocator, RuleError, check_first_round, compact, first_round_width
from vigor_cli.config import ROLLOUTS_MAX, StrategyOptions


class PilotCommitAllocator(RoundAllocator):
    """``pilot-commit``: a pilot round, then the rest of the budget on the middle prompts."""

    name = "pilot-commit"

    def __init__(
        self,
        prompts_per_step: int,
        seed: int,
        *,
        budget: int,
        pilot: int,
        width: float,
        lower: float,
        upper: float,
        max_rollouts: int,
        evict_after: int,
    ) -> None:
        super().__init__(prompts_per_step, seed)
        self.width_prompts = first_round_width(width, prompts_per_step)
        self.rules(budget, pilot, width, lower, upper, max_rollouts, prompts_per_step)
        self.budget, self.pilot, self.lower, self.upper = budget, pilot, lower, upper
        self.max_rollouts, self.evict_after = max_rollouts, evict_after
        self.streak: dict[str, int] = {}
        """uid -> consecutive correct pilot rewards over its visits (eviction)."""
        self.evicted: set[str] = set()

    @staticmethod
    def rules(budget: int, pilot: int, width: float, lower: float, upper: float, max_rollouts: int,
              prompts_per_step: int, n_train: int | None = None) -> None:
        """RuleError naming the keys to change (the constructor and the config both ask)."""
        if lower > 1 - upper:
            raise RuleError(
                f"allocation.pilot-commit.lower ({lower}) must be <= 1 - allocation.pilot-commit.upper "
                f"({upper}): no pilot pass rate could pass"
            )
        if max_rollouts < pilot:
            raise RuleError(
                f"allocation.pilot-commit.max_rollouts ({max_rollouts}) must be >= allocation.pilot-commit.pilot ({pilot})"
            )
        check_first_round("pilot-commit", "pilot", pilot, width, prompts_per_step, budget, n_train)

    # ------------------------------------------------------------------ rounds
    def _begin(self) -> None:
        drawn = self._draw(self.width_prompts)
        self._uids = [u for u in drawn if u not in self.evicted] or drawn  # all evicted: pilot them anyway
        for uid in drawn:
            if uid not in self._uids:
                self._notes[uid] = {"evicted": True}
        self._round = 0
        self._extra: dict[str, int] = {}
        self._passed: list[str] = []
        self._committed: list[str] = []
        self._counts = {"passed": 0, "deferred": 0, "skipped": 0, "evicted_now": 0}
        self._pilot_mean: float | None = None

    def _next_round(self) -> list[Request]:
        return self._first_then_extra(self.pilot)

    def _after_round(self, uids: list[str]) -> None:
        if self._round != 1:
            return
        scored = [r for uid in self._uids for r in self._rewards[uid]]  # the pilot's, before any commit
        self._pilot_mean = compact(round(sum(scored) / len(scored), 6)) if scored else None
        tie = {uid: self.rng.random() for uid in self._uids}
        for uid in self._uids:
            rewards = self._rewards[uid]
            if not rewards:  # no pilot rollout could be scored (reward None): not now, maybe next visit
                self._counts["deferred"] += 1
                self._notes[uid] = {"pilot": "unscored"}
                continue
            m = sum(rewards) / len(rewards)
            verdict = "pass" if self.lower <= m <= 1 - self.upper else ("deferred" if m < self.lower else "skipped")
            self._counts["passed" if verdict == "pass" else verdict] += 1
            if verdict == "pass":
                self._passed.append(uid)
            self._notes[uid] = {"pilot": verdict}
            if self.evict_after:
                correct = all(r == 1.0 for r in rewards)
                self.streak[uid] = self.streak.get(uid, 0) + len(rewards) if correct else 0
                if self.streak[uid] >= self.evict_after and uid not in self.evicted:
                    self.evicted.add(uid)
                    self._counts["evicted_now"] += 1
                    self._notes[uid]["evicted_now"] = True
        ranked = sorted(self._passed, key=lambda u: (-self._variance(u), tie[u]))
        self._committed = ranked[: self.prompts_per_step]
        left = self.budget - self.pilot * len(self._uids)
        room = self.max_rollouts - self.pilot
        self._extra = self._split_evenly(self._committed, left, room)
        for uid in self._uids:
            self._mark(uid, self._extra.get(uid, 0) > 0)

    def _groups(self) -> dict[str, list[int]]:
        used = self._passed or self._uids  # nothing passed: every pilot (no gradient either way)
        return {uid: list(range(len(self._rewards[uid]))) for uid in used if self._rewards[uid]}

    # ------------------------------------------------------------------ record and state
    def _budget(self) -> int:
        return self.budget

    def _extra_totals(self) -> dict[str, Any]:
        commit = sum(self._extra.values())
        return {"pilot_commit": {
            "piloted": len(self._uids), **self._counts, "committed": len(self._committed),
            "commit_rollouts": commit,
            "unspent": self.budget - self.pilot * len(self._uids) - commit, "evicted_total": len(self.evicted),
            "mean_pilot_reward": self._pilot_mean,
        }}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(streak=self.streak, evicted=sorted(self.evicted))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.streak = {uid: int(n) for uid, n in state["streak"].items()}
        self.evicted = set(state["evicted"])


# --------------------------------------------------------------------------- registry
class PilotCommitOptions(StrategyOptions):
    """``allocation.pilot-commit``."""

    pilot: int = Field(
        2, ge=1, le=ROLLOUTS_MAX,
        description="pilot-commit: rollouts per prompt in the pilot round (the source's n_explore: 8 by "
        "default, a quarter of a committed prompt's rollouts in its scripts).",
    )
    width: float = Field(
        2.0, gt=0, le=100,
        description="pilot-commit: pilot prompts = ceil(this x prompts per step) (the source's generation "
        "batch is 3 x its train batch).",
    )
    lower: float = Field(
        0.125, ge=0, le=1,
        description="pilot-commit: a pilot pass rate below this is too hard (deferred); the source's p_lower.",
    )
    upper: float = Field(
        0.25, ge=0, le=1,
        description="pilot-commit: a pilot pass rate above 1 - this is too easy (skipped); the source's p_upper.",
    )
    max_rollouts: int = Field(
        32, ge=1, le=ROLLOUTS_MAX, description="pilot-commit: most rollouts one prompt gets in a step (pilot and commit)."
    )
    evict_after: int = Field(
        8, ge=0, le=ROLLOUTS_MAX,
        description="pilot-commit: a prompt whose pilot rewards were all correct this many times in a row "
        "(over its visits) is not rolled out again (the source evicts prompts its pilot of 16-32 "
        "found all correct); 0 = never.",
    )


def check_pilot_commit(a: Any, p: int, n_train: int | None) -> None:
    o = options(a)
    PilotCommitAllocator.rules(default_budget(a, p), o.pilot, o.width, o.lower, o.upper, o.max_rollouts, p, n_train)


@register("pilot-commit", budgeted=True, check=check_pilot_commit, options=PilotCommitOptions,
          summary="Pilot-Commit: a pilot round on 2B prompts, the rest of the budget on the mid-pass-rate ones")
def build(cfg: Any, prompts_per_step: int, seed: int) -> PilotCommitAllocator:
    o = options(cfg)
    return PilotCommitAllocator(
        prompts_per_step, seed, budget=default_budget(cfg, prompts_per_step), pilot=o.pilot, width=o.width,
        lower=o.lower, upper=o.upper, max_rollouts=o.max_rollouts, evict_after=o.evict_after,
    )
