"""Typed run configuration: the one place where defaults live.

Every key carries its documentation in ``Field(description=...)``; YAML files
under ``configs/`` and CLI flags only override keys. Unknown keys and wrong
types raise :class:`ConfigError` with a one-line message naming the key.

Override syntax on the command line: ``--set section.key=value`` (value parsed
as YAML, so ``--set allocation.alpha=0.25`` gives a float and
``--set model.lora.target_modules=[q_proj,v_proj]`` a list).

Details: docs/modules.md.
"""

from vigor_cli.config.allocation import (
    LEGACY_PREFIXES, STRATEGY_SECTIONS, AllocationConfig, StrategyOptions,
)
from vigor_cli.config.base import (
    FALSE_WORDS, ROLLOUTS_MAX, SEED_MAX, STEPS_MAX, TOKENS_MAX, TOTAL_ROLLOUTS_MAX, TRUE_WORDS,
    ConfigError, mode_word,
)
from vigor_cli.config.grpo import GRPOConfig
from vigor_cli.config.health import HEALTH_DEFAULTS, HealthConfig, HealthRule, JumpRule
from vigor_cli.config.keys import describe, field_bounds, field_info
from vigor_cli.config.loading import assemble, dump_config, load_yaml, parse_override
from vigor_cli.config.model import LoraConfig, ModelConfig
from vigor_cli.config.run import RunConfig
from vigor_cli.config.sampling import EngineConfig, SamplingConfig
from vigor_cli.config.task import EPISODE_KEYS, EVERY_TASK_KEYS, TaskConfig
from vigor_cli.config.train import TrainConfig

__all__ = [
    "AllocationConfig", "ConfigError", "EPISODE_KEYS", "EVERY_TASK_KEYS", "EngineConfig",
    "FALSE_WORDS", "GRPOConfig", "HEALTH_DEFAULTS", "HealthConfig", "HealthRule", "JumpRule",
    "LEGACY_PREFIXES", "LoraConfig", "ModelConfig", "ROLLOUTS_MAX", "RunConfig", "SEED_MAX",
    "STEPS_MAX", "STRATEGY_SECTIONS", "SamplingConfig", "StrategyOptions", "TOKENS_MAX",
    "TOTAL_ROLLOUTS_MAX", "TRUE_WORDS", "TaskConfig", "TrainConfig", "assemble", "describe",
    "dump_config", "field_bounds", "field_info", "load_yaml", "mode_word", "parse_override",
]
