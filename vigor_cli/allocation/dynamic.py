"""DAPO's dynamic sampling and GRESO's pre-rollout skipping (which then fills the same way).

DAPO (docs/algorithms.md): draw a generation batch of
ceil(gen_batch_multiplier x prompts_per_step) fresh prompts, give each G rollouts,
keep the groups whose rewards are not all equal, and repeat until prompts_per_step
groups are kept; surplus groups of the last batch are dropped in draw order (the
sampler's order is already random). After max_gen_batches generation batches without
a full train batch, a UserError says so. Every generated rollout counts, kept or not.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field

from vigor_cli.allocation.base import Request
from vigor_cli.allocation.registry import options, register
from vigor_cli.allocation.rounds import RoundAllocator, compact
from vigor_cli.config import StrategyOptions
from vigor_cli.errors import UserError


class DynamicSamplingAllocator(RoundAllocator):
    """``dapo``: fill the train batch with non-zero-variance groups from generation batches."""

    name = "dapo"

    def __init__(
        self,
        prompts_per_step: int,
        seed: int,
        *,
        group_size: int,
        gen_batch_multiplier: float,
        max_gen_batches: int,
    ) -> None:
        super().__init__(prompts_per_step, seed)
        self.group_size = group_size
        self.gen_batch_size = max(1, math.ceil(gen_batch_multiplier * prompts_per_step - 1e-9))
        self.max_gen_batches = max_gen_batches

    def _begin(self) -> None:
        self._kept: list[str] = []
        self._batches = 0

    def _full(self) -> bool:
        return len(self._kept) >= self.prompts_per_step

    def _next_round(self) -> list[Request]:
        while not self._full():
            if self._batches >= self.max_gen_batches:
                raise UserError(
                    f"{self.name}: only {len(self._kept)} of {self.prompts_per_step} prompts had "
                    f"non-zero reward variance after allocation.max_gen_batches="
                    f"{self.max_gen_batches} generation batches of {self.gen_batch_size} prompts; "
                    "raise max_gen_batches or gen_batch_multiplier (the prompts may be too easy "
                    "or too hard for the model)"
                )
            self._batches += 1
            drawn = self._draw(self.gen_batch_size)
            requests = [Request(uid, self.group_size) for uid in self._select(drawn)]
            if requests:
                return requests
        return []

    def _select(self, uids: list[str]) -> list[str]:
        """Prompts of a generation batch that are rolled out (DAPO: all of them)."""
        return uids

    def _after_round(self, uids: list[str]) -> None:
        for uid in uids:  # draw order
            stats = self._stats[uid]
            if stats[2] == stats[3] or len(self._rewards[uid]) < 2:  # all (scored) rewards equal
                self._mark(uid, False, "zero_var")
            elif not self._full():
                self._kept.append(uid)
                self._mark(uid, True)
            else:
                self._mark(uid, False, "batch_full")

    def _groups(self) -> dict[str, list[int]]:
        return {uid: list(range(len(self._rewards[uid]))) for uid in self._kept}

    def _extra_totals(self) -> dict[str, Any]:
        return {"gen_batches": self._batches}


class GresoAllocator(DynamicSamplingAllocator):
    """``greso``: skip prompts that were recently all-correct or all-wrong, then fill like DAPO."""

    name = "greso"

    def __init__(
        self,
        prompts_per_step: int,
        seed: int,
        *,
        group_size: int,
        gen_batch_multiplier: float,
        max_gen_batches: int,
        p_init: float,
        p_step: float,
        target_zero_var: float,
        easy_share: float,
        easy_mean: float,
        hard_mean: float,
        p_min: float,
        p_max: float,
        min_keep: float,
    ) -> None:
        super().__init__(
            prompts_per_step,
            seed,
            group_size=group_size,
            gen_batch_multiplier=gen_batch_multiplier,
            max_gen_batches=max_gen_batches,
        )
        self.p_easy = self.p_hard = p_init
        self.p_step, self.p_min, self.p_max = p_step, p_min, p_max
        self.target_easy = target_zero_var * easy_share
        self.target_hard = target_zero_var * (1 - easy_share)
        self.easy_mean, self.hard_mean, self.min_keep = easy_mean, hard_mean, min_keep
        self.history: dict[str, list] = {}
        """uid -> [kind, z]: kind 'easy' or 'hard' of the last epoch, z its streak length."""

    def skip_probability(self, uid: str) -> float:
        """1 - max(p^z, min_keep) from the prompt's history; 0 for a prompt with no streak."""
        h = self.history.get(uid)
        if h is None:
            return 0.0
        kind, z = h
        p = self.p_easy if kind == "easy" else self.p_hard
        return 1.0 - max(p**z, self.min_keep)

    def _begin(self) -> None:
        super()._begin()
        self._step_easy = self._step_hard = self._step_groups = 0
        self._skipped = 0

    def _select(self, uids: list[str]) -> list[str]:
        rolled = []
        for uid in uids:
            p_skip = self.skip_probability(uid)
            if p_skip > 0:
                skipped = self.rng.random() < p_skip
                note: dict[str, Any] = {"p_skip": compact(p_skip)}
                if skipped:
                    note["skipped"] = True
                    self._skipped += 1
                self._notes[uid] = note
                if skipped:
                    continue
            rolled.append(uid)
        return rolled

    def _after_round(self, uids: list[str]) -> None:
        for uid in uids:
            if not self._rewards[uid]:
                continue  # none of its rollouts could be scored (reward None): no evidence either way
            mean = self._stats[uid][0] / len(self._rewards[uid])
            kind = "easy" if mean >= self.easy_mean else "hard" if mean <= self.hard_mean else None
            self._step_groups += 1
            if kind is None:
                self.history.pop(uid, None)
                continue
            if kind == "easy":
                self._step_easy += 1
            else:
                self._step_hard += 1
            h = self.history.get(uid)
            self.history[uid] = [kind, h[1] + 1 if h and h[0] == kind else 1]
        super()._after_round(uids)

    def _move(self, p: float, observed: float, target: float) -> float:
        if observed > target:
            p -= self.p_step
        elif observed < target:
            p += self.p_step
        return min(self.p_max, max(self.p_min, p))

    def _end_step(self, groups: dict[str, list[int]]) -> None:
        self._p_used = (self.p_easy, self.p_hard)
        if self._step_groups:
            self.p_easy = self._move(self.p_easy, self._step_easy / self._step_groups, self.target_easy)
            self.p_hard = self._move(self.p_hard, self._step_hard / self._step_groups, self.target_hard)

    def _extra_totals(self) -> dict[str, Any]:
        totals = super()._extra_totals()
        totals.update(
            skipped=self._skipped,
            easy_groups=self._step_easy,
            hard_groups=self._step_hard,
            p_easy=compact(self._p_used[0]),
            p_hard=compact(self._p_used[1]),
            p_easy_next=compact(self.p_easy),
            p_hard_next=compact(self.p_hard),
        )
        return totals

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(p_easy=self.p_easy, p_hard=self.p_hard, history=self.history)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.p_easy, self.p_hard = state["p_easy"], state["p_hard"]
        self.history = {uid: list(h) for uid, h in state["history"].items()}


# --------------------------------------------------------------------------- registry
def check_generation_batch(a: Any, p: int, n_train: int | None) -> None:
    """DAPO's generation batch must fit in the training set (it draws distinct prompts)."""
    if n_train is not None and math.ceil(a.gen_batch_multiplier * p) > n_train:
        raise ValueError(
            f"allocation.gen_batch_multiplier x train.prompts_per_step ({a.gen_batch_multiplier} x "
            f"{p}) exceeds the {n_train} training prompts; lower either key"
        )


@register("dapo", check=check_generation_batch,
          summary="DAPO: fill the batch with non-zero-variance groups of allocation.group_size")
def build_dapo(cfg: Any, prompts_per_step: int, seed: int) -> DynamicSamplingAllocator:
    return DynamicSamplingAllocator(
        prompts_per_step, seed, group_size=cfg.group_size,
        gen_batch_multiplier=cfg.gen_batch_multiplier, max_gen_batches=cfg.max_gen_batches,
    )


class GresoOptions(StrategyOptions):
    """``allocation.greso``: GRESO's own keys (the generation batch is DAPO's, shared)."""

    p_init: float = Field(0.5, gt=0, lt=1, description="GRESO: initial p_easy and p_hard.")
    p_step: float = Field(0.01, gt=0, le=1, description="GRESO: change of p per step.")
    target_zero_var: float = Field(0.25, ge=0, le=1, description="GRESO: target fraction of zero-variance groups.")
    easy_share: float = Field(1 / 3, ge=0, le=1, description="GRESO: share of the target that is all-correct groups.")
    easy_mean: float = Field(0.98, ge=0, le=1, description="GRESO: a group with mean reward >= this was 'easy'.")
    hard_mean: float = Field(0.11, ge=0, le=1, description="GRESO: a group with mean reward <= this was 'hard'.")
    p_min: float = Field(0.05, gt=0, lt=1, description="GRESO: lower clip of p_easy/p_hard.")
    p_max: float = Field(0.95, gt=0, lt=1, description="GRESO: upper clip of p_easy/p_hard.")
    min_keep: float = Field(
        0.01, ge=0, le=1,
        description="GRESO: a prompt is rolled out with probability at least this "
        "(skip probability 1 - max(p^z, this)), so skipped prompts are re-explored.",
    )


@register("greso", options=GresoOptions, legacy_prefix="greso",
          summary="GRESO: skip prompts recently all-correct or all-wrong, then fill like DAPO")
def build_greso(cfg: Any, prompts_per_step: int, seed: int) -> GresoAllocator:
    o = options(cfg)
    return GresoAllocator(
        prompts_per_step, seed, group_size=cfg.group_size,
        gen_batch_multiplier=cfg.gen_batch_multiplier, max_gen_batches=cfg.max_gen_batches,
        p_init=o.p_init, p_step=o.p_step, target_zero_var=o.target_zero_var,
        easy_share=o.easy_share, easy_mean=o.easy_mean, hard_mean=o.hard_mean,
        p_min=o.p_min, p_max=o.p_max, min_keep=o.min_keep,
    )
