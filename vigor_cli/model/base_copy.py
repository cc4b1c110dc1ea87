"""Whether a run keeps a frozen copy of its starting weights for the weight check.

The learner (vigor_cli/train/learner.py) loads that copy and the memory plan
(vigor_cli/model/memory_plan.py) counts it; both ask this one rule, which imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vigor_cli.config import RunConfig


def loads_base_copy(cfg: RunConfig, shares_policy: bool) -> bool:
    """Whether the weight check loads a frozen copy of the starting weights of its own (after
    the engine has started, see :meth:`vigor_cli.train.learner.Learner.watch_engine`): full
    fine-tuning without a KL reference, with an engine that holds its own weights and the
    check on."""
    m = cfg.model
    return (cfg.engine.weight_check != "off" and cfg.grpo.beta == 0 and not m.lora.enabled
            and not m.load_in_4bit and not shares_policy)
