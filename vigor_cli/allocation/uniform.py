"""GRPO's uniform allocation: G rollouts for every prompt of the batch, one round."""

from __future__ import annotations

from typing import Any

from vigor_cli.allocation.base import Request
from vigor_cli.allocation.registry import register
from vigor_cli.allocation.rounds import RoundAllocator


class UniformAllocator(RoundAllocator):
    """``grpo``: prompts_per_step prompts, group_size rollouts each, all used."""

    name = "grpo"

    def __init__(self, prompts_per_step: int, seed: int, *, group_size: int) -> None:
        super().__init__(prompts_per_step, seed)
        self.group_size = group_size

    def _begin(self) -> None:
        self._uids = self._draw(self.prompts_per_step)
        self._asked = False

    def _next_round(self) -> list[Request]:
        if self._asked:
            return []
        self._asked = True
        return [Request(uid, self.group_size) for uid in self._uids]

    def _after_round(self, uids: list[str]) -> None:
        """One round only: nothing to select ("kept" stays null)."""

    def _budget(self) -> int:
        return self.group_size * self.prompts_per_step


@register("grpo", summary="GRPO: allocation.group_size rollouts for every prompt, one round")
def build(cfg: Any, prompts_per_step: int, seed: int) -> UniformAllocator:
    return UniformAllocator(prompts_per_step, seed, group_size=cfg.group_size)
