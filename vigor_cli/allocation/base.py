"""The allocator interface: an ask/tell state machine, engine-agnostic, no torch.

One training step, as the trainer (and `vigor simulate`) drives it::

    alloc.start_step(step, draw)          # draw(n) -> n fresh prompt uids from the sampler
    while requests := alloc.ask():        # [Request(uid, n_new), ...] for this round
        rewards = {r.uid: generate_and_score(r.uid, r.n) for r in requests}
        alloc.tell(rewards)               # exactly r.n rewards in [0, 1] per requested uid
    result = alloc.finish()               # which rollouts go into the GRPO update + the record

Rollouts of a prompt are indexed 0, 1, 2, ... in the order they were generated
across rounds; ``StepResult.groups`` names, per uid, the indices the update
uses (all of them for VIGOR; a subset for PODS; none for groups DAPO filters).
Every generated rollout counts towards the budget, used or not.
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
