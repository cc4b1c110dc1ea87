"""The root of a run's config (:class:`RunConfig`): one field per section, and the rules
across sections (lengths that must fit, QLoRA, episode keys, the strategy's own rules)."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, model_validator

from vigor_cli.config.allocation import AllocationConfig
from vigor_cli.config.base import _Section
from vigor_cli.config.grpo import GRPOConfig
from vigor_cli.config.health import HealthConfig
from vigor_cli.config.model import ModelConfig
from vigor_cli.config.sampling import EngineConfig, SamplingConfig
from vigor_cli.config.task import EPISODE_KEYS, TaskConfig
from vigor_cli.config.train import TrainConfig


class RunConfig(_Section):
    """Everything one `vigor train` run needs; saved resolved as config.yaml in the run dir."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    allocation: AllocationConfig = Field(default_factory=AllocationConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)

    def completion_tokens(self) -> int:
        """Tokens a rollout may hold after its prompt: sampling.max_new_tokens, or with
        task.env an episode's (task.max_episode_tokens or its default)."""
        if self.task.env is None:
            return self.sampling.max_new_tokens
        return self.task.episode_tokens(self.sampling.max_new_tokens)

    def _completion_key(self) -> str:
        if self.task.env is None:
            return "sampling.max_new_tokens"
        return "task.max_episode_tokens" if self.task.max_episode_tokens else "the episode's tokens (task.max_episode_tokens)"

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> "RunConfig":
        """Rules across sections; the strategy's own rules come from its registry entry, through
        ``strategy_rules(cfg)`` in the validation context (:mod:`vigor_cli.settings`; left out
        by `vigor simulate`, which checks each strategy it compares instead of the config's)."""
        s, g, e, t = self.sampling, self.grpo, self.engine, self.task
        if self.model.load_in_4bit and not self.model.lora.enabled:
            raise ValueError("model.load_in_4bit needs model.lora.enabled=true (QLoRA)")
        if t.env is None:
            given = [k for k in EPISODE_KEYS[1:] if getattr(t, k) != TaskConfig.model_fields[k].default]
            if given:
                raise ValueError(f"task.{given[0]} is read only with task.env (--env NAME or FILE.py:Factory)")
        if g.micro_batch_tokens < s.max_new_tokens:
            raise ValueError(
                f"grpo.micro_batch_tokens ({g.micro_batch_tokens}) must be at least "
                f"sampling.max_new_tokens ({s.max_new_tokens})"
            )
        after, what = self.completion_tokens(), self._completion_key()
        row = t.max_prompt_tokens + after
        if e.gen_batch_tokens < row:
            raise ValueError(
                f"engine.gen_batch_tokens ({e.gen_batch_tokens}) must hold one row: "
                f"task.max_prompt_tokens + {what} ({t.max_prompt_tokens} + {after})"
            )
        if e.max_model_len is not None and e.max_model_len < row:
            raise ValueError(
                f"engine.max_model_len ({e.max_model_len}) must hold task.max_prompt_tokens + "
                f"{what} ({t.max_prompt_tokens} + {after})"
            )
        strategy_rules = (info.context or {}).get("strategy_rules")
        if strategy_rules is not None:
            strategy_rules(self)
        return self
