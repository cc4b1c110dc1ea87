"""The allocator interface: an ask/tell state machine, engine-agnostic, no torch.

Details: docs/modules.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

DrawFn = Callable[[int], list[str]]


@dataclass(frozen=True)
class Request:
    uid: str
    n: int  # new rollouts to generate for this prompt in this round


@dataclass
class StepResult:
    groups: dict[str, list[int]]
    """uid -> indices (generation order) of that prompt's rollouts used in the update."""
    record: dict[str, Any]
    """JSON-serialisable allocation record for allocation.jsonl (see allocation/README)."""


class Allocator(ABC):
    """Base class of every strategy. Subclasses hold only plain-Python state."""

    name: str = "base"

    @abstractmethod
    def start_step(self, step: int, draw: DrawFn) -> None: ...

    @abstractmethod
    def ask(self) -> list[Request]: ...

    @abstractmethod
    def tell(self, rewards: Mapping[str, Sequence[float]]) -> None: ...

    @abstractmethod
    def finish(self) -> StepResult: ...

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state that crosses steps (RNG, GRESO history)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


# --------------------------------------------------------------------------- the rounds
def reward_range(setting: Any, weights: Sequence[float] | None = None) -> tuple[float, float]:
    """``allocation.reward_range`` as (low, high). ``auto``: the range of the weighted sum of
    the task's reward functions when each gives 0 to 1 (TRL's weighted sum: ``weights``, one per
    function; None or one function of weight 1: [0, 1])."""
    if setting != "auto":
        low, high = setting
        return float(low), float(high)
    weights = list(weights) if weights else [1.0]
    low = sum(min(0.0, float(w)) for w in weights)
    high = sum(max(0.0, float(w)) for w in weights)
    return (low, high) if low < high else (0.0, 1.0)
