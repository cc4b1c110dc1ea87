"""The GRPO section (``grpo.*``): the loss, its aggregation and clipping, the advantage scale,
the optimiser and the importance-sampling correction."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from vigor_cli.config.base import STEPS_MAX, TOKENS_MAX, _check_name, _Section, mode_word


class GRPOConfig(_Section):
    loss_agg: str = Field(
        "dapo",
        description="Loss aggregation, a name in vigor_cli/grpo.py's LOSS_AGGREGATIONS: 'dapo' token sum / tokens in step; 'grpo' mean of "
        "per-sequence token means; 'dr_grpo' sum / (sequences x max_new_tokens); "
        "'prompt_mean' mean over prompts of each prompt's token mean over all its rollouts "
        "(every prompt weighs the same, however many rollouts it got).",
    )
    scale_rewards: str = Field(
        "group",
        description="Advantage scale, a name in vigor_cli/grpo.py's ADVANTAGE_SCALINGS: group std "
        "(GRPO), batch std, or none (Dr. GRPO).",
    )
    epsilon: float = Field(0.2, ge=0, lt=1, description="PPO clip: lower bound 1 - epsilon (below 1).")
    epsilon_high: float = Field(0.28, ge=0, le=10, description="PPO clip: upper bound 1 + epsilon_high (DAPO).")
    beta: float = Field(0.0, ge=0, le=100, description="KL coefficient to the reference (k3 estimator).")
    mu: int = Field(1, ge=1, le=64, description="Optimisation passes over each step's rollouts.")
    mask_truncated: bool = Field(
        False, description="Exclude truncated completions from the loss (DAPO overlong filtering)."
    )
    learning_rate: float = Field(1e-5, gt=0, le=1.0, description="AdamW learning rate (at most 1).")
    weight_decay: float = Field(0.0, ge=0, le=10, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, le=1e6, description="Gradient clipping norm.")
    warmup_steps: int = Field(0, ge=0, le=STEPS_MAX, description="Linear learning-rate warm-up steps.")
    micro_batch_tokens: int = Field(
        8192,
        ge=16,
        le=2**30,
        description="Token budget of one forward/backward micro-batch; gradients accumulate "
        "so the loss is the same as one big batch.",
    )
    logits_chunk_tokens: int = Field(
        512,
        ge=0,
        le=TOKENS_MAX,
        description="Completion positions per output-layer chunk: log-probs and entropies are "
        "computed on completion positions only, this many at a time under checkpointing, so "
        "no [tokens, vocabulary] float32 tensor exists (about 20 bytes x this x vocabulary at "
        "the chunk's peak). 0: the full logits at every position (the old path; about 10.6 "
        "bytes per token per vocabulary entry).",
    )

    importance_sampling: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Correct the policy-gradient term for the gap between the engine that sampled "
        "(vLLM: bf16, its own kernels) and the policy that trains: each token's loss is weighted by "
        "min(pi_policy / pi_engine, grpo.importance_sampling_cap), the ratio of the policy's "
        "probability (before the update) to the engine's (TRL's and verl's token-level truncated "
        "importance sampling; vigor_cli/grpo.py). 'auto': on with an engine that holds its own "
        "copy of the weights (vllm), off with one that samples with the policy itself (hf). "
        "engine.weight_check stays the alarm for an engine on stale weights.",
    )
    importance_sampling_cap: float = Field(
        3.0, ge=1.0, le=1000.0,
        description="Upper bound of the importance-sampling ratio (its truncation, as TRL's "
        "vllm_importance_sampling_cap).",
    )
    importance_sampling_level: str = Field(
        "token",
        description="The PPO ratio pi / pi_old of the clipped loss, a name in vigor_cli/grpo.py's "
        "RATIO_LEVELS (TRL's importance_sampling_level, the same names): 'token' one ratio per "
        "token (GRPO, DAPO); 'sequence' one per completion, exp of the mean log-ratio over its "
        "tokens, clipped as a whole (GSPO). Not the engine correction (grpo.importance_sampling).",
    )

    @field_validator("importance_sampling", mode="before")
    @classmethod
    def _importance_sampling_word(cls, value: Any) -> Any:
        return mode_word(value, ("auto", "on", "off"), true="on")

    @field_validator("loss_agg", "scale_rewards", "importance_sampling_level")
    @classmethod
    def _registered_function(cls, name: str, info: ValidationInfo) -> str:
        return _check_name(info, f"grpo.{info.field_name}", name)
