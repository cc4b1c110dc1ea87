"""The rollout engine interface: transformers ('hf') and vLLM implement it.

The trainer hands an engine token-id prompts with a rollout count each (one
VIGOR round = one ``generate`` call) and gets back, per prompt, that many
completions with the sampled tokens' log-probabilities. The engine never sees
rewards or variances.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None


@dataclass
class Rollout:
    token_ids: list[int]
    """Completion tokens, the stop token (EOS or end of turn, ``rollout/weights.py``) included when
    the model stopped by itself."""
    logprobs: list[float]
    """Log-probability of each sampled token under the sampling distribution."""
    text: str
    """Decoded completion (special tokens skipped)."""
    truncated: bool
    """True when max_new_tokens was reached before EOS."""


class RolloutEngine(ABC):
    name: str = "base"
    shares_policy: bool = False
    """True when the engine samples with the policy module itself (no copy of the weights that
    could go stale); the trainer's weight check then needs no base model of its own."""
    progress: Callable[[int], None] | None = None
    """Set by a caller that shows progress (an evaluation): told the completions finished so
    far during a ``generate`` call, by an engine that can tell (hf: after each batch)."""

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        counts: Sequence[int],
        sampling: SamplingParams,
    ) -> list[list[Rollout]]:
        """``counts[i]`` completions for ``prompts[i]``; returns one list per prompt."""

    def sync_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights (no-op when shared)."""

    def end_generation(self) -> None:
        """The trainer calls this after a step's (or an evaluation's) last ``generate``.

        Engines that hold GPU memory apart from the policy (vLLM) release it
        here, before the update; the default does nothing.
        """

    def memory_report(self) -> dict[str, float]:
        """Bytes (or GiB) each side holds; engines that share the model return {}."""
        return {}

    def close(self) -> None:
        """Release resources."""
