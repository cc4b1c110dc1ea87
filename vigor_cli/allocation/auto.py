"""``auto``: measure the step's variance law with a small census, then go wide or deep.

Round 1, the census, gives ``census`` rollouts to each of ceil(width x prompts_per_step)
prompts. :meth:`AutoAllocator.plan` fits an empirical-Bayes Beta prior of pass rates to it
(and to earlier censuses), scores two plans for the rest of the budget by the expected
gradient signal they buy under each prompt's posterior (``wide``: evenly over the census
prompts; ``deep``: greedily where the signal grows most) and picks one; round 2 gives its
extra rollouts. The ratio's noise, from the census prompts resampled, sets how far past the
margin it must be to change the last step's plan. The rule, its choices and ``totals.auto``
are stated in this folder's README.md ("auto: the rule").
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from typing import Any

from pydantic import Field

from vigor_cli.allocation.base import Request
from vigor_cli.allocation.estimate import (
    beta_zero_variance,
    expected_signal,
    fit_beta_prior,
    hill_tail_index,
    pair_disagreement,
    pareto_eta,
    posterior,
    posterior_mean,
)
from vigor_cli.allocation.knapsack import update_history
from vigor_cli.allocation.registry import default_budget, options, register
from vigor_cli.allocation.rounds import RoundAllocator, RuleError, check_first_round, compact, first_round_width
from vigor_cli.config import ROLLOUTS_MAX, StrategyOptions

MEMORY = 0.5
"""Weight of earlier steps in the census moments (exponential moving average)."""
BLOCKS = (1, 2, 4, 8, 16)
"""Block sizes the deep plan's greedy looks ahead over."""
ETA_SCHEDULE = dict(rounds=4, alpha=0.5, gamma=2.0)
"""VIGOR's default schedule, for the eta(k) the record reports."""


def _histogram(census: dict[str, list[float]], n: int) -> list[int]:
    """Census prompts by successes 0..n (fractional rewards: rounded)."""
    histogram = [0] * (n + 1)
    for rewards in census.values():
        histogram[min(n, max(0, round(sum(rewards))))] += 1
    return histogram


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


class AutoAllocator(RoundAllocator):
    """``auto``: a census round, then the wide or the deep plan by expected signal."""

    name = "auto"

    def __init__(
        self,
        prompts_per_step: int,
        seed: int,
        *,
        budget: int,
        width: float,
        census: int,
        margin: float,
        max_rollouts: int,
        history: int,
        saturated: float = 1.0,
        warmup: int = 0,
        hold: float = 0.0,
        resamples: int = 0,
        recency: float = 1.0,
    ) -> None:
        super().__init__(prompts_per_step, seed)
        self.seed, self.hold, self.resamples, self.recency = seed, hold, resamples, recency
        self.width_prompts = first_round_width(width, prompts_per_step)
        self.rules(budget, width, census, max_rollouts, prompts_per_step)
        self.budget, self.census, self.margin = budget, census, margin
        self.max_rollouts, self.window = max_rollouts, history
        self.saturated, self.warmup = saturated, warmup
        self.history: dict[str, list[float]] = {}
        self.seen_at: dict[str, int] = {}
        """uid -> the census (1, 2, ...) that last drew it: how recently a prompt recurred."""
        self.moments: list[float] | None = None
        """[mean reward, pairwise disagreement] of past censuses (moving average)."""
        self.censuses = 0
        """Censuses taken so far in the run (this step's included once planned)."""
        self.last_decision = "wide"
        """The plan of the last step (hysteresis: kept while the ratio is within its noise)."""

    @staticmethod
    def rules(budget: int, width: float, census: int, max_rollouts: int, prompts_per_step: int,
              n_train: int | None = None) -> None:
        """RuleError naming the keys to change (the constructor and the config both ask;
        ``n_train``, the training prompts, once the task's data is read)."""
        if max_rollouts < census:
            raise RuleError(
                f"allocation.auto.max_rollouts ({max_rollouts}) must be >= allocation.auto.census ({census})"
            )
        check_first_round("auto", "census", census, width, prompts_per_step, budget, n_train)

    # ------------------------------------------------------------------ rounds
    def _begin(self) -> None:
        self._uids = self._draw(self.width_prompts)
        self._round = 0
        self._extra: dict[str, int] = {}
        self._decision: dict[str, Any] = {}

    def _next_round(self) -> list[Request]:
        return self._first_then_extra(self.census)

    def _after_round(self, uids: list[str]) -> None:
        if self._round != 1:
            return
        plan = self.plan({uid: self._rewards[uid] for uid in self._uids})
        self._extra = plan["extra"]
        self._decision = plan["record"]
        for uid in self._uids:
            self._mark(uid, self._extra[uid] > 0)
            self._notes[uid] = {"p_hat": compact(round(plan["p_hat"][uid], 6))}

    # ------------------------------------------------------------------ the decision
    def plan(self, census: dict[str, list[float]]) -> dict[str, Any]:
        """The decision for a census (uid -> its rewards); uses and updates the moments."""
        uids = list(census)
        n = self.census
        self.censuses += 1
        rewards = [r for uid in uids for r in census[uid]]  # scored ones: a None reward is not told
        prior = fit_beta_prior(*self._update_moments(census, rewards), n)
        histogram = _histogram(census, n)
        post = {u: posterior(posterior(prior, self.history.get(u, [])), census[u]) for u in uids}
        p_hat = {u: posterior_mean(post[u]) for u in uids}
        succ = {u: float(sum(census[u])) for u in uids}
        zero_var = sum(1 for u in uids if len(set(census[u])) <= 1) / len(uids)
        k = hill_tail_index([p * (1 - p) for p in p_hat.values()])
        eta = pareto_eta(k, **ETA_SCHEDULE) if k is not None and math.isfinite(k) and k > 1 else None

        cache: dict[tuple[str, int], float] = {}

        def depth(u: str, extra: int) -> float:
            """E[(census + extra) x std of the prompt's rewards]: the signal the update gets."""
            key = (u, extra)
            if key not in cache:
                cache[key] = expected_signal(succ[u], len(census[u]), extra, post[u])
            return cache[key]

        left = self.budget - n * len(uids)
        room = self.max_rollouts - n
        revisit = sum(1 for u in uids if self.history.get(u)) / len(uids)
        recurring = self._recurring(uids)
        n_bar = (n * len(uids) + left) / len(uids)  # rollouts per prompt of a uniform spend
        n_wide = min(self.max_rollouts, max(n, round(n_bar)))
        # the law the run has reached (moments averaged over recent censuses): the share of the
        # wide plan's groups expected to be all-equal; past the warm-up, at or above
        # `saturated` the signal is in a tail that breadth does not reach, and depth counts
        zero_wide = beta_zero_variance(prior, n_wide)
        warm = self.censuses > self.warmup
        saturated = warm and zero_wide >= self.saturated
        weight = 1.0 if saturated else recurring

        def value(u: str, extra: int) -> float:
            """weight x depth + (1 - weight) x n_bar x E[std]: equal for a uniform plan."""
            d = depth(u, extra)
            return weight * d + (1 - weight) * n_bar * d / (n + extra)

        wide = self._split_evenly(uids, left, room)
        deep = self._greedy(uids, left, room, value)
        s_wide = sum(value(u, wide[u]) for u in uids)
        s_deep = sum(value(u, deep[u]) for u in uids)
        ratio = s_deep / s_wide if s_wide > 0 else (math.inf if s_deep > 0 else 1.0)
        sd = self._ratio_sd(uids, left, room, value)
        choice, held, said = self._decide(ratio, sd)
        tail = "flat" if k is not None and not math.isfinite(k) else (f"{k:.2f}" if k is not None else "n/a")
        why = self._why(f"zero-var at {n_wide} {zero_wide:.0%}", saturated, warm)
        reason = (
            f"{choice}: expected signal {s_deep:.1f} deep vs {s_wide:.1f} wide, {said}; {why}; prompts seen before {revisit:.0%} (recurring weight {recurring:.2f}), census zero-var {zero_var:.0%} "
            f"(successes 0..{n}: {'/'.join(map(str, histogram))}), tail k {tail}"
            + (f" (eta {eta:.2f})" if eta is not None else "")
            + f", prior Beta({prior[0]:.2f}, {prior[1]:.2f})"
        )
        chosen = deep if choice == "deep" else wide
        record = {
            "decision": choice,
            "reason": reason,
            "census": {"prompts": len(uids), "rollouts_each": n, "mean_reward": _r(sum(rewards) / len(rewards) if rewards else 0.0),
                       "zero_var_share": _r(zero_var), "seen_before": _r(revisit), "recurring": _r(recurring),
                       "histogram": histogram},
            "law": {"wide_rollouts": n_wide, "zero_var_at_wide": _r(zero_wide), "saturated": saturated,
                    "threshold": self.saturated, "census_number": self.censuses, "warm": warm},
            "depth_weight": _r(weight),
            "prior": [_r(prior[0]), _r(prior[1])],
            "tail_k": _r(k) if k is not None and math.isfinite(k) else None,
            "tail_flat": bool(k is not None and not math.isfinite(k)),
            "eta": _r(eta),
            "signal": {"wide": _r(s_wide), "deep": _r(s_deep), "ratio": _r(ratio) if math.isfinite(ratio) else None,
                       "ratio_sd": _r(sd), "resamples": self.resamples},
            "margin": self.margin,
            "margin_sds": _r((ratio - self.margin) / sd) if sd and math.isfinite(ratio) else None,
            "hold": self.hold,
            "previous": self._previous,
            "held": held,
            "extra": sum(chosen.values()),
        }
        return {"extra": chosen, "record": record, "p_hat": p_hat}

    def _decide(self, ratio: float, sd: float | None) -> tuple[str, bool, str]:
        """deep or wide, whether the last plan was kept only because the ratio was within
        ``hold`` sd of the margin (the plain rule would have switched), and the words for it.
        Hysteresis: from wide, go deep when ratio - hold x sd >= margin; from deep, go wide
        when ratio + hold x sd < margin; in between, the last plan stands."""
        self._previous = previous = self.last_decision
        band = self.hold * (sd or 0.0)
        if previous == "deep":
            choice = "wide" if ratio + band < self.margin else "deep"
        else:
            choice = "deep" if ratio - band >= self.margin else "wide"
        plain = "deep" if ratio >= self.margin else "wide"
        held = choice != plain
        self.last_decision = choice
        shown = f"{ratio:.2f}x" if math.isfinite(ratio) else "inf x"
        if not sd or not math.isfinite(ratio):
            return choice, held, f"{shown} {'>=' if choice == 'deep' else '<'} margin {self.margin:g}" + (
                "" if sd is None else " (ratio without noise)")
        sds = (ratio - self.margin) / sd
        side = "above" if sds >= 0 else "below"
        said = f"{shown} +- {sd:.2f} (sd over {self.resamples} resampled censuses), {abs(sds):.1f} sd {side} margin {self.margin:g}"
        if held:
            said += f": within {self.hold:g} sd, kept the last step's {previous}"
        elif choice != previous:
            said += f": past {self.hold:g} sd, switched from {previous}"
        return choice, held, said

    def _ratio_sd(self, uids: list[str], left: int, room: int, value) -> float | None:
        """The deep/wide ratio's own noise: its sd over ``resamples`` censuses drawn from this
        one's prompts with replacement (each plan made again on the draw), seeded by the run's
        seed and the census number; None when not measured (resamples < 2, one prompt)."""
        if self.resamples < 2 or len(uids) < 2:
            return None
        rng = random.Random(f"{self.seed}:auto-resample:{self.censuses}")
        ratios = []
        for _ in range(self.resamples):
            draw = [rng.choice(uids) for _ in uids]
            keys = list(range(len(draw)))

            def signal(i: int, extra: int) -> float:
                return value(draw[i], extra)

            base, rest = divmod(max(left, 0), len(keys))
            lucky = set(rng.sample(keys, rest)) if base < room else set()
            wide = sum(signal(i, min(room, base + (i in lucky))) for i in keys)
            deep_plan = self._greedy(keys, left, room, signal, rng)
            deep = sum(signal(i, deep_plan[i]) for i in keys)
            if wide > 0:
                ratios.append(deep / wide)
        return statistics.stdev(ratios) if len(ratios) > 1 else None

    def _update_moments(self, census: dict[str, list[float]], rewards: list[float]) -> tuple[float, float]:
        """The law's moments (mean reward, pairwise disagreement) of this census, averaged with
        the earlier censuses' (weight MEMORY on the past) and kept for the next one."""
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        mixed = sum(pair_disagreement(r) for r in census.values()) / len(census)
        if self.moments is not None:
            mean = MEMORY * self.moments[0] + (1 - MEMORY) * mean
            mixed = MEMORY * self.moments[1] + (1 - MEMORY) * mixed
        self.moments = [mean, mixed]
        return mean, mixed

    def _recurring(self, uids: list[str]) -> float:
        """How much the census prompts recur, 0..1: each prompt seen before counts
        ``recency`` ** (censuses since it was last drawn - 1) (1 when drawn the step before,
        halved per step between at 0.5; every prompt seen before in full at 1), averaged over
        the census. A prompt with history but no census number (an older checkpoint) counts
        as drawn the step before."""
        total = 0.0
        for u in uids:
            if self.history.get(u):
                gap = self.censuses - self.seen_at.get(u, self.censuses - 1)
                total += self.recency ** max(0, gap - 1)
        return total / len(uids)

    def _why(self, law: str, saturated: bool, warm: bool) -> str:
        """Why depth counts as it does, for the decision's reason: the law saturated, the
        saturation rule off, the warm-up, or a law not saturated."""
        if saturated:
            return f"law saturated ({law} >= {self.saturated:.0%}): depth counts"
        if self.saturated >= 1:
            return f"law {law} (saturation rule off): depth counts as prompts recur"
        if not warm:
            return f"law {law}, warm-up (census {self.censuses} of {self.warmup}): depth counts as prompts recur"
        return f"law not saturated ({law} < {self.saturated:.0%}): depth counts as prompts recur"

    def _greedy(self, uids: list, left: int, room: int, signal, rng: random.Random | None = None) -> dict:
        """Greedy on the best average gain of ``signal(uid, extra)`` per rollout over the next
        block; ties by ``rng`` (the allocator's own when None)."""
        extra = {u: 0 for u in uids}
        rng = rng or self.rng
        tie = {u: rng.random() for u in uids}

        def best(u: str, budget_left: int) -> tuple[float, int]:
            j = extra[u]
            base = signal(u, j)
            top, size = -1.0, 0
            for b in BLOCKS:
                if b > room - j or b > budget_left:
                    break
                gain = (signal(u, j + b) - base) / b
                if gain > top + 1e-12:
                    top, size = gain, b
            return top, size

        heap = []
        for u in uids:
            g, b = best(u, left)
            if b:
                heap.append((-g, tie[u], u, b))
        heapq.heapify(heap)
        while left > 0 and heap:
            _, key, u, b = heapq.heappop(heap)
            if b > left:  # the budget shrank since this entry was scored
                g, b = best(u, left)
                if b:
                    heapq.heappush(heap, (-g, key, u, b))
                continue
            extra[u] += b
            left -= b
            g, b = best(u, left)
            if b:
                heapq.heappush(heap, (-g, key, u, b))
        return extra

    # ------------------------------------------------------------------ cross-step
    def _end_step(self, groups: dict[str, list[int]]) -> None:
        for uid in self._uids:
            update_history(self.history, uid, self._rewards[uid], self.window)
            self.seen_at[uid] = self.censuses

    def _budget(self) -> int:
        return self.budget

    def _extra_totals(self) -> dict[str, Any]:
        return {"auto": self._decision}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(history=self.history, seen_at=self.seen_at, moments=self.moments, censuses=self.censuses, last_decision=self.last_decision,
                     seed=self.seed)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.history = {uid: list(h) for uid, h in state["history"].items()}
        self.seen_at = {uid: int(c) for uid, c in state.get("seen_at", {}).items()}
        self.moments = None if state.get("moments") is None else list(state["moments"])
        self.censuses = int(state.get("censuses", 0))
        self.last_decision = state.get("last_decision", "wide")  # older checkpoints: as a new run
        self.seed = state.get("seed", self.seed)  # the resampling's seed is the run's, as the rng's


def replay(allocator: AutoAllocator, records: list[dict]) -> list[dict[str, Any]]:
    """Each recorded step's decision again (allocation.jsonl records of an ``auto`` run): the
    census (round 1's rewards) planned on the state the run had, then every reward the run
    recorded for the step into the history, as the run did. ``allocator``'s settings (hold,
    resamples, margin) make the decisions; the censuses and histories are the run's."""
    out = []
    for rec in records:
        census = {p["uid"]: list(p["rounds"][0]["rewards"]) for p in rec["prompts"] if p.get("rounds")}
        out.append(allocator.plan(census)["record"])
        for p in rec["prompts"]:
            update_history(allocator.history, p["uid"], [r for rd in p.get("rounds", []) for r in rd["rewards"]],
                           allocator.window)
            allocator.seen_at[p["uid"]] = allocator.censuses
    return out


# --------------------------------------------------------------------------- registry
class AutoOptions(StrategyOptions):
    """``allocation.auto``."""

    width: float = Field(
        2.0, gt=0, le=100,
        description="auto: census prompts = ceil(this x prompts per step); the wide plan spreads "
        "the budget over all of them.",
    )
    census: int = Field(2, ge=1, le=ROLLOUTS_MAX, description="auto: rollouts per census prompt (round 1).")
    margin: float = Field(
        1.25, gt=0, le=100,
        description="auto: go deep only when the deep plan's expected signal is at least this x "
        "the wide plan's.",
    )
    max_rollouts: int = Field(
        32, ge=1, le=ROLLOUTS_MAX, description="auto: most rollouts one prompt may get in a step (deep plan)."
    )
    history: int = Field(
        16, ge=0, le=ROLLOUTS_MAX,
        description="auto: a prompt's latest rewards from earlier steps that inform its pass rate; "
        "a prompt with history counts as seen before, which is what lets depth pay (0: no "
        "memory, auto scores plans by breadth only).",
    )
    saturated: float = Field(
        1.0, ge=0, le=1,
        description="auto: treat the law as saturated (depth counts in full, as when every prompt "
        "recurs) once the expected share of all-equal groups at the wide plan's rollouts per "
        "prompt, from the census law averaged over recent steps, is at least this. Default 1 = "
        "never: in the issue 25 study depth did not pay even at the most saturated law measured "
        "(the tiny-facts plateau, 96 % of groups of 8 all-equal); e.g. 0.9 to let auto go deep "
        "on saturated laws on a larger model.",
    )
    hold: float = Field(
        1.0, ge=0, le=100,
        description="auto: hysteresis in units of the deep/wide ratio's own noise (its sd over "
        "resampled censuses): from wide, go deep only when the ratio is this many sd above the "
        "margin; from deep, go wide only when it is this many sd below; in between the last "
        "step's plan stands (0: the plain margin, a decision that may flip on census noise).",
    )
    resamples: int = Field(
        32, ge=0, le=1000,
        description="auto: censuses drawn from the step's census prompts with replacement to "
        "measure the ratio's noise (0 or 1: not measured, the plain margin decides).",
    )
    recency: float = Field(
        0.5, ge=0, le=1,
        description="auto: how much a prompt seen before counts toward depth, by how recently it "
        "recurred: recency ** (steps since it was last drawn - 1), averaged over the census (the "
        "depth weight when the law is not saturated). 0.5: a prompt drawn the step before counts "
        "in full, one drawn an epoch of 17 steps ago (the default run) not at all; 1: any prompt "
        "seen before counts in full (the rule before: on the default run auto then went deep on "
        "126-133 of 150 steps and was 3.7 points of held-out accuracy behind auto held wide).",
    )
    warmup: int = Field(
        3, ge=0, le=10**6,
        description="auto: censuses before the saturation rule may act (the first steps' law is "
        "one or two censuses).",
    )


def check_auto(a: Any, p: int, n_train: int | None) -> None:
    o = options(a)
    AutoAllocator.rules(default_budget(a, p), o.width, o.census, o.max_rollouts, p, n_train)


@register("auto", budgeted=True, check=check_auto, options=AutoOptions, legacy_prefix="auto",
          summary="a census round, then a wide or a deep plan chosen by expected signal")
def build(cfg: Any, prompts_per_step: int, seed: int) -> AutoAllocator:
    o = options(cfg)
    return AutoAllocator(
        prompts_per_step, seed, budget=default_budget(cfg, prompts_per_step),
        width=o.width, census=o.census, margin=o.margin, max_rollouts=o.max_rollouts, history=o.history,
        saturated=o.saturated, warmup=o.warmup, hold=o.hold, resamples=o.resamples, recency=o.recency,
    )
