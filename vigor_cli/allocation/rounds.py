"""Shared bookkeeping for every strategy: rounds, reward pools, checks, the record.

A strategy subclasses :class:`RoundAllocator` and writes three hooks:

- ``_begin()``: draw the step's first prompts;
- ``_next_round()``: the requests of the next round (``[]`` when the step is done);
- ``_after_round(uids)``: look at the new rewards and decide who is kept.

Everything else (validating ``tell``, keeping each prompt's rewards in
generation order, the allocation record, the RNG and its checkpointed state)
lives here, so that all strategies count and record rollouts the same way.
The record format is documented in ``vigor_cli/allocation/README.md``.
"""

from __future__ import annotations

import math
import random
from operator import mul
from typing import Any, Mapping, Sequence

from vigor_cli.allocation.base import Allocator, DrawFn, Request, StepResult
from vigor_cli.errors import UserError


class AllocationError(ValueError):
    """The trainer broke the ask/tell protocol (wrong uids, counts or reward values)."""


class RuleError(UserError, ValueError):
    """A strategy's settings break one of its rules: the user's to fix (exit 2), and a
    ValueError, so the config's validation reports it naming the source of the value."""


def first_round_width(width: float, prompts_per_step: int) -> int:
    """Prompts in a first round over ``width`` x the batch: ceil(width x prompts_per_step), at least 1."""
    return max(1, math.ceil(width * prompts_per_step - 1e-9))


def check_first_round(name: str, round_name: str, each: int, width: float, prompts_per_step: int,
                      budget: int, n_train: int | None) -> int:
    """The rule a strategy with a wide first round (auto's census, pilot-commit's pilot) shares:
    its prompts exist in the training set and the budget pays for the round. ``name`` is the
    strategy's key under allocation, ``round_name`` its key for the rollouts each prompt gets.
    Returns the round's prompt count; RuleError naming the keys to change otherwise."""
    key = f"allocation.{name}"
    wide = first_round_width(width, prompts_per_step)
    if n_train is not None and wide > n_train:
        raise RuleError(
            f"{name}'s {round_name} of ceil({key}.width x train.prompts_per_step) = {wide} "
            f"prompts exceeds the {n_train} training prompts; lower either key"
        )
    if budget < each * wide:
        raise RuleError(
            f"allocation.budget ({budget}) is below {name}'s {round_name}, the first round: {key}.{round_name} x "
            f"ceil({key}.width x train.prompts_per_step) ({each} x {wide} = {each * wide}); "
            f"raise allocation.budget (or allocation.rollouts_per_prompt) or lower {key}.{round_name}"
        )
    return wide


def population_variance(values: Sequence[float]) -> float:
    """Population variance (divide by n): what VIGOR ranks on; 0.0 for fewer than 2 values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return sum((v - mean) ** 2 for v in values) / n


def is_zero_variance(values: Sequence[float]) -> bool:
    """True when every reward is equal (exact test; float round-off cannot fake variance)."""
    return len(values) < 2 or min(values) == max(values)


def compact(value: float) -> float | int:
    """A reward or statistic for the JSON record: integral values as ints, others to 6 places."""
    if value == int(value):
        return int(value)
    return round(value, 6)


def ceil_fraction(alpha: float, n: int) -> int:
    """ceil(alpha * n), robust to float noise (0.1 * 30 must give 3, not 4), at least 1."""
    return max(1, math.ceil(alpha * n - 1e-9))


def rng_state_to_json(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def rng_state_from_json(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


class RoundAllocator(Allocator):
    """Base of every strategy: the ask/tell protocol and the per-step record."""

    name = "base"

    def __init__(self, prompts_per_step: int, seed: int) -> None:
        if prompts_per_step < 1:
            raise UserError(f"prompts per step must be >= 1 (got {prompts_per_step})")
        self.prompts_per_step = prompts_per_step
        self.rng = random.Random(seed)
        self._in_step = False

    def _even_round(self, active: list[str], m: int, max_rounds: int) -> list[Request]:
        """Ask ``m`` rollouts for every prompt in ``active``, within the step's budget.

        Shared by the strategies that grow their prompts in equal rounds under a hard budget
        (``self.budget``, ``self._spent``, ``self._t``, ``self._last``, ``self._cut``). A round
        that would overspend is cut: what is left is spread evenly, the extras go to a seeded
        random few, and it is the last round. So is round ``max_rounds``, and any round that
        uses up the budget: after it nobody could get more rollouts."""
        remaining = self.budget - self._spent
        if len(active) * m <= remaining:
            counts = {uid: m for uid in active}
        else:
            counts = self._split_evenly(active, remaining)
            self._last = True
            self._cut = {"round": self._t, "planned": len(active) * m, "spent": remaining}
        self._spent += sum(counts.values())
        if self._t == max_rounds or self._spent >= self.budget:
            self._last = True
        return [Request(uid, n) for uid, n in counts.items() if n > 0]

    def _split_evenly(self, uids: list[str], left: int, room: int | None = None) -> dict[str, int]:
        """``left`` rollouts evenly over ``uids``, the remainder to a seeded random few, at most
        ``room`` each (None: no cap); every uid gets a count (maybe 0)."""
        if not uids:
            return {}
        base, rest = divmod(max(left, 0), len(uids))
        if room is not None and base >= room:
            return {u: max(room, 0) for u in uids}
        lucky = set(self.rng.sample(uids, rest))
        return {u: base + (u in lucky) for u in uids}

    def _first_then_extra(self, first_n: int) -> list[Request]:
        """Two rounds: ``first_n`` rollouts for each prompt of ``self._uids``, then the extras
        ``self._extra`` that ``_after_round`` planned from the first round's rewards (knapsack,
        auto). Uses ``self._round``, set to 0 at the start of each step."""
        self._round += 1
        if self._round == 1:
            return [Request(uid, first_n) for uid in self._uids]
        if self._round == 2:
            return [Request(uid, n) for uid, n in self._extra.items() if n > 0]
        return []

    # ------------------------------------------------------------------ protocol
    def start_step(self, step: int, draw: DrawFn) -> None:
        if self._in_step:
            raise AllocationError("start_step() called before finish() of the previous step")
        self._in_step = True
        self._step = step
        self._draw_fn = draw
        self._order: list[str] = []  # uids in the order they were drawn
        self._rewards: dict[str, list[float]] = {}
        self._stats: dict[str, list[float]] = {}
        self._rounds: dict[str, list[dict[str, Any]]] = {}
        self._notes: dict[str, dict[str, Any]] = {}  # extra per-prompt record fields
        self._round_totals: list[dict[str, Any]] = []
        self._unscored: dict[str, int] = {}  # rollouts generated but not told (reward None)
        self._pending: dict[str, int] | None = None
        self._done = False
        self._begin()

    def ask(self) -> list[Request]:
        self._require_step("ask")
        if self._pending is not None:
            raise AllocationError("ask() called twice without tell() in between")
        if self._done:
            return []
        requests = self._next_round()
        if not requests:
            self._done = True
            return []
        self._pending = {}
        for r in requests:
            if r.n < 1 or r.uid in self._pending:
                raise AssertionError(f"{self.name}: bad request {r}")
            self._pending[r.uid] = r.n
        return requests

    def tell(self, rewards: Mapping[str, Sequence[float]]) -> None:
        self._require_step("tell")
        if self._pending is None:
            raise AllocationError("tell() called without a pending ask()")
        pending = self._pending
        if len(rewards) != len(pending) or any(uid not in rewards for uid in pending):
            missing = [u for u in pending if u not in rewards][:3]
            extra = [u for u in rewards if u not in pending][:3]
            raise AllocationError(
                f"tell() must answer exactly the asked uids (missing {missing}, unexpected {extra})"
            )
        round_no = len(self._round_totals) + 1
        told: list[str] = []
        added = 0
        pools, all_stats, logs = self._rewards, self._stats, self._rounds
        for uid, n in pending.items():
            values = list(map(float, rewards[uid]))
            if len(values) > n:
                raise AllocationError(f"tell(): prompt {uid!r} asked for {n} rewards, got {len(values)}")
            # Fewer than asked: the rest could not be scored (a reward of None); they count as
            # generated (the budget) but not as rewards (variance, groups, indices).
            lo, hi, total = min(values, default=0.0), max(values, default=0.0), sum(values)
            if not (lo >= 0.0 and hi <= 1.0 and total == total):  # total == total rejects NaN
                bad = next(v for v in values if not 0.0 <= v <= 1.0)
                raise AllocationError(f"tell(): prompt {uid!r} reward {bad!r} is not in [0, 1]")
            if values.count(0.0) + values.count(1.0) == len(values):  # binary: the common case, fast path
                shown = list(map(int, values))
                total_sq = total
            else:
                shown = [round(v, 6) if 0.0 < v < 1.0 else int(v) for v in values]
                total_sq = sum(map(mul, values, values))
            pools[uid].extend(values)
            stats = all_stats[uid]
            stats[0] += total
            stats[1] += total_sq
            if values and lo < stats[2]:
                stats[2] = lo
            if values and hi > stats[3]:
                stats[3] = hi
            entry = {"round": round_no, "added": n, "rewards": shown, "var": compact(self._variance(uid)),
                     "kept": None}
            if len(values) < n:
                entry["unscored"] = n - len(values)
                self._unscored[uid] = self._unscored.get(uid, 0) + n - len(values)
            logs[uid].append(entry)
            told.append(uid)
            added += n
        self._pending = None
        self._round_totals.append({"round": round_no, "prompts": len(told), "rollouts": added})
        self._after_round(told)
        self._round_totals[-1]["kept"] = sum(1 for u in told if self._rounds[u][-1]["kept"])

    def finish(self) -> StepResult:
        self._require_step("finish")
        if self._pending is not None or not self._done:
            raise AllocationError("finish() called before ask() returned [] (the step is not done)")
        groups = self._groups()
        self._end_step(groups)
        record = self._record(groups)
        self._in_step = False
        return StepResult(groups=groups, record=record)

    # ------------------------------------------------------------------ helpers
    def _require_step(self, what: str) -> None:
        if not self._in_step:
            raise AllocationError(f"{what}() called outside a step (call start_step first)")

    def _draw(self, n: int) -> list[str]:
        """Draw n fresh prompts from the trainer's sampler and open their pools."""
        uids = list(self._draw_fn(n))
        if len(uids) != n:
            raise AllocationError(f"draw({n}) returned {len(uids)} prompts")
        for uid in uids:
            if uid in self._rewards:
                raise AllocationError(f"draw() returned prompt {uid!r} twice in one step")
            self._order.append(uid)
            self._rewards[uid] = []
            self._stats[uid] = [0.0, 0.0, 1.0, 0.0]  # sum, sum of squares, min, max
            self._rounds[uid] = []
        return uids

    def _variance(self, uid: str) -> float:
        """Population variance of the prompt's whole pool, from running sums (O(1)).

        Exactly 0.0 when every reward is equal, so round-off never ranks an all-equal pool
        above another one.
        """
        total, total_sq, lo, hi = self._stats[uid]
        n = len(self._rewards[uid])
        if n < 2 or lo == hi:
            return 0.0
        mean = total / n
        return max(0.0, total_sq / n - mean * mean)

    def _mark(self, uid: str, kept: bool | None, reason: str | None = None) -> None:
        """Set kept/dropped on the prompt's latest round entry (and why, when dropped)."""
        entry = self._rounds[uid][-1]
        entry["kept"] = kept
        if reason is not None:
            entry["reason"] = reason

    def _groups(self) -> dict[str, list[int]]:
        """Default: every generated rollout of every prompt that got any is used."""
        return {uid: list(range(len(r))) for uid, r in self._rewards.items() if r}

    def _end_step(self, groups: dict[str, list[int]]) -> None:
        """Hook for cross-step updates (GRESO's p_easy/p_hard)."""

    def _budget(self) -> int | None:
        return None

    def _extra_totals(self) -> dict[str, Any]:
        return {}

    def _record(self, groups: dict[str, list[int]]) -> dict[str, Any]:
        prompts = []
        zero_var_update = zero_var_generated = used_total = generated = 0
        for uid in self._order:
            pool = self._rewards[uid]
            used = groups.get(uid, [])
            unscored = self._unscored.get(uid, 0)
            entry: dict[str, Any] = {
                "uid": uid,
                "rounds": self._rounds[uid],
                "rollouts": len(pool) + unscored,
                "used": len(used),
                "in_update": bool(used),
            }
            if unscored:
                entry["unscored"] = unscored
            if used and len(used) != len(pool):
                entry["used_idx"] = used
            entry.update(self._notes.get(uid, {}))
            prompts.append(entry)
            generated += len(pool) + unscored
            used_total += len(used)
            zero_pool = bool(pool) and self._stats[uid][2] == self._stats[uid][3]
            zero_var_generated += zero_pool
            if used and (zero_pool if len(used) == len(pool) else is_zero_variance([pool[i] for i in used])):
                zero_var_update += 1
        totals = {
            "rollouts": generated,
            "used": used_total,
            "rounds": len(self._round_totals),
            "prompts": len(self._order),
            "in_update": sum(1 for u in self._order if groups.get(u)),
            "zero_var_groups": zero_var_update,
            "zero_var_generated": zero_var_generated,
            "budget": self._budget(),
        }
        if self._unscored:
            totals["unscored"] = sum(self._unscored.values())
        totals.update(self._extra_totals())
        return {
            "strategy": self.name,
            "rounds": self._round_totals,
            "prompts": prompts,
            "totals": totals,
        }

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        if self._in_step:
            raise AllocationError("state_dict() is taken between steps, not inside one")
        return {"strategy": self.name, "rng": rng_state_to_json(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("strategy") != self.name:
            raise UserError(
                f"allocator state is for strategy {state.get('strategy')!r}, "
                f"but this run uses {self.name!r}"
            )
        self.rng.setstate(rng_state_from_json(state["rng"]))

    # ------------------------------------------------------------------ hooks
    def _begin(self) -> None:
        raise NotImplementedError

    def _next_round(self) -> list[Request]:
        raise NotImplementedError

    def _after_round(self, uids: list[str]) -> None:
        raise NotImplementedError
