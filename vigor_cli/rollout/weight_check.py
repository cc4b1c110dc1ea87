"""Does the engine sample from the policy's weights? A check that can fail.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from vigor_cli.errors import UserError

STATUS_CODE = {"ok": 1, "not-discriminating": 0, "stale": -1, "disagree": -1, "nonfinite": -1}
"""``engine/weight_check`` in metrics.jsonl: 1 passed, 0 cannot tell yet, -1 failed."""


class EngineWeightsError(UserError):
    """The engine does not sample from the policy's weights (``engine.weight_check=error``)."""


@dataclass
class WeightCheck:
    status: str
    tokens: int
    engine_policy: float
    """err: mean |engine - policy| log-prob per token."""
    policy_base: float
    """gap: mean |policy - base|."""
    engine_base: float
    """stale: mean |engine - base|."""
    limit: float
    nonfinite: int = 0
    """Sampled tokens whose engine log-prob was NaN or infinite (left out of the distances)."""

    @property
    def failed(self) -> bool:
        return STATUS_CODE.get(self.status) == -1

    @property
    def code(self) -> int | None:
        return STATUS_CODE.get(self.status)

    def metrics(self) -> dict[str, float | None]:
        has = self.tokens > 0
        based = has and self.status != "unchecked"
        return {
            "engine/logprob_diff": self.engine_policy if has else None,
            "engine/policy_base_diff": self.policy_base if based else None,
            "engine/engine_base_diff": self.engine_base if based else None,
            "engine/weight_check": self.code,
            "engine/nonfinite_logprobs": self.nonfinite,
        }

    def describe(self) -> str:
        numbers = (f"mean |engine - policy| {self.engine_policy:.4g}, |engine - base| "
                   f"{self.engine_base:.4g}, |policy - base| {self.policy_base:.4g} nats/token "
                   f"over {self.tokens} tokens")
        if self.status == "nonfinite":
            return (f"the engine returned {self.nonfinite} NaN or infinite log-probs for tokens it sampled "
                    f"(of {self.tokens + self.nonfinite} checked): its weights or kernels are broken; the "
                    "update left those tokens out of the importance correction")
        if self.status == "stale":
            return ("the engine samples from stale weights: its log-probs are closer to the base "
                    f"model's than to the policy's ({numbers}); the policy's weights are not "
                    "reaching it (a dropped LoRA delta, a skipped push, a reload from disk)")
        if self.status == "disagree":
            return (f"the engine's log-probs disagree with the policy's beyond numerical noise "
                    f"({numbers}; limit {self.limit:.4g}): it is not sampling from the policy's "
                    "weights")
        if self.status == "not-discriminating":
            return (f"not yet discriminating: the policy is not measurably away from the base "
                    f"({numbers})")
        if self.status == "ok":
            return f"the engine tracks the policy ({numbers})"
        return "no tokens to check"


def judge(err: float, gap: float, stale: float, tokens: int, threshold: float,
          top_p: float = 1.0) -> WeightCheck:
    """Apply the rule of the module docstring to the three mean distances."""
    limit = threshold + (math.log(1.0 / top_p) if 0 < top_p < 1 else 0.0)
    discriminating = gap > 0 and gap >= 2 * min(err, stale)
    if tokens == 0:
        status = "no-tokens"
    elif discriminating and err > stale:
        status = "stale"
    elif err > limit:
        status = "disagree"
    elif not discriminating:
        status = "not-discriminating"
    else:
        status = "ok"
    return WeightCheck(status, tokens, err, gap, stale, limit)


class WeightCheckSums:
    """Accumulates |e - p|, |p - b|, |e - b| over the rows of one step.

    Rows added without base log-probs (no base model: ``engine.weight_check=off``,
    or an engine that samples with the policy itself under full fine-tuning)
    give ``err`` alone and the status ``unchecked``.
    """

    def __init__(self) -> None:
        self.err = self.gap = self.stale = 0.0
        self.tokens = 0
        self.nonfinite = 0
        self.has_base = True

    def add(self, engine: Sequence[float], policy: Sequence[float], base: Sequence[float] | None) -> None:
        if len(engine) != len(policy) or (base is not None and len(base) != len(engine)):
            raise ValueError(f"log-prob rows differ in length: {len(engine)}, {len(policy)}, "
                             f"{None if base is None else len(base)}")
        if base is None:
            self.has_base = False
        for i, (e, p) in enumerate(zip(engine, policy)):
            if e is None or not math.isfinite(e):
                self.nonfinite += 1
                continue
            self.err += abs(e - p)
            if base is not None:
                self.gap += abs(p - base[i])
                self.stale += abs(e - base[i])
            self.tokens += 1

    def result(self, threshold: float, top_p: float = 1.0) -> WeightCheck:
        n = max(self.tokens, 1)
        if self.nonfinite:
            return WeightCheck("nonfinite", self.tokens, self.err / n, self.gap / n, self.stale / n,
                               threshold, self.nonfinite)
        if not self.has_base:
            return WeightCheck("unchecked" if self.tokens else "no-tokens", self.tokens,
                               self.err / n, 0.0, 0.0, threshold)
        return judge(self.err / n, self.gap / n, self.stale / n, self.tokens, threshold, top_p)
