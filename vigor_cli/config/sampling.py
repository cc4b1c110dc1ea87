"""How rollouts are generated: the sampling section (``sampling.*``) and the rollout engine's
(``engine.*``: hf or vLLM, its memory, the weight check)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field, ValidationInfo, field_validator

from vigor_cli.config.base import TOKENS_MAX, _check_name, _Section, mode_word


class SamplingConfig(_Section):
    temperature: float = Field(1.0, ge=0, le=10, description="Sampling temperature for rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling for rollouts.")
    max_new_tokens: int = Field(
        1024, ge=1, le=TOKENS_MAX, description="Longest completion; longer ones are cut and flagged truncated."
    )



class EngineConfig(_Section):
    kind: str = Field(
        "auto",
        description="Rollout engine: 'auto' or a name in the engine registry "
        "(vigor_cli/rollout/__init__.py: hf, vllm). 'auto': vLLM when the policy runs on CUDA and vllm "
        "imports; transformers ('hf') on the CPU or, with a printed warning, when vllm is not "
        "installed. A vllm that is installed but does not import is an error, as is CUDA "
        "present but unusable (see model.device).",
    )
    gen_batch_tokens: int = Field(
        16384,
        ge=64,
        le=2**30,
        description="hf engine: rows per generate call are bounded so that rows x "
        "(prompt + max_new_tokens) stays under this.",
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0, lt=1)] | Literal["auto"] = Field(
        0.35,
        description="vllm: share of the GPU's memory the engine takes for its bf16 weights, "
        "working memory and KV cache (it sleeps, holding none of it, during the update). "
        "'auto': what is free once the policy is loaded, less AdamW's states and 1 GiB + 5% "
        "headroom, capped at 0.9 (vigor_cli/model/memory_plan.py; `vigor train --dry-run` shows it).",
    )
    max_model_len: Optional[int] = Field(
        None, ge=16, le=TOKENS_MAX, description="vllm: context length; default task.max_prompt_tokens + "
        "sampling.max_new_tokens, capped at the model's max_position_embeddings."
    )
    sleep_level: Literal[1, 2] = Field(
        2,
        description="vllm: sleep level between generation phases. 2 discards the engine's "
        "weights and KV cache (least memory; every phase pushes the policy again); 1 keeps "
        "the weights in CPU memory, so a phase whose policy did not change pushes nothing.",
    )
    enforce_eager: bool = Field(
        False,
        description="vllm: skip torch.compile and CUDA graph capture (faster start, slower "
        "decoding).",
    )
    weight_check: Literal["error", "warn", "off"] = Field(
        "error",
        description="After every step, check that the engine samples from the policy's weights: "
        "compare engine, policy and base-model log-probs on the same sampled tokens (rule in "
        "vigor_cli/rollout/weight_check.py). 'error' stops training when the engine tracks the "
        "base or stale weights, 'warn' prints and logs it, 'off' (or false) skips the check.",
    )
    weight_check_rows: int = Field(
        16,
        ge=1,
        le=4096,
        description="Completions per step the weight check scores with the base model (one "
        "no-grad forward over them; free when grpo.beta > 0, which computes it anyway).",
    )
    logprob_check_threshold: float = Field(
        0.1,
        ge=0,
        le=100,
        description="The weight check also fails when the mean |engine log-prob - policy "
        "log-prob| exceeds this plus ln(1/sampling.top_p) (the most a top-p engine's "
        "renormalised log-probs may differ), whatever the base says: garbage weights. bf16 "
        "numerics stay well below it.",
    )

    @field_validator("weight_check", mode="before")
    @classmethod
    def _weight_check_word(cls, value: Any) -> Any:
        return mode_word(value, ("error", "warn", "off"))

    @field_validator("kind")
    @classmethod
    def _registered_engine(cls, kind: str, info: ValidationInfo) -> str:
        return _check_name(info, "engine.kind", kind)
