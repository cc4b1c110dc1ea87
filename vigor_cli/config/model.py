"""The model section (``model.*``, ``model.lora.*``): which policy, its dtype and device, LoRA."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from vigor_cli.config.base import ROLLOUTS_MAX, _Section


class LoraConfig(_Section):
    enabled: bool = Field(
        True,
        description="Train a LoRA adapter (peft) instead of all weights. The bundled tiny "
        "model's config turns this off and trains every weight.",
    )
    r: int = Field(16, ge=1, le=ROLLOUTS_MAX, description="LoRA rank.")
    alpha: int = Field(32, ge=1, le=65536, description="LoRA alpha; the update is scaled by alpha/r.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: str | list[str] = Field(
        "all-linear",
        description="Modules that get adapters: 'all-linear' (peft's shorthand, every linear "
        "layer but the output head) or a list of module names.",
    )


class ModelConfig(_Section):
    name_or_path: str = Field(
        "tiny",
        description="Hub id (e.g. Qwen/Qwen2.5-1.5B) or local directory in Hugging Face format. "
        "'tiny' is the bundled tiny Qwen2 model in vigor_cli/assets/tiny.",
    )
    revision: Optional[str] = Field(None, description="Hub revision (branch, tag or commit).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Policy dtype. 'auto': bfloat16 on CUDA, float32 on CPU."
    )
    load_in_4bit: bool = Field(
        False,
        description="Load the frozen base in 4-bit NF4 with bitsandbytes (QLoRA). CUDA only; "
        "needs lora.enabled.",
    )
    device: Literal["auto", "cuda", "cpu"] = Field(
        "auto",
        description="Where the policy runs. 'auto': CUDA when torch can use it, the CPU only when "
        "the machine has no CUDA at all; a machine with an NVIDIA device or driver that torch "
        "cannot use (driver too old for the torch build, a CPU-only torch) is an error naming "
        "the cause, never a silent CPU run. 'cpu' asks for the CPU (--device cpu).",
    )
    enable_thinking: Optional[bool] = Field(
        None,
        description="Passed to the chat template as enable_thinking (Qwen3 and other templates "
        "with a thinking switch); None leaves the template's default (Qwen3: thinking on).",
    )
    gradient_checkpointing: bool | Literal["auto"] = Field(
        "auto",
        description="Recompute each layer's activations in backward instead of keeping them "
        "(about 1/30 of the activation memory for a third more compute). 'auto': on when the "
        "policy trains on CUDA and is not the bundled tiny model, off otherwise.",
    )
    fp32_master_weights: bool = Field(
        True,
        description="Full fine-tuning (lora.enabled=false) with a 16-bit dtype: keep the trained "
        "weights and AdamW's states in float32 and run the forward under autocast in the 16-bit "
        "dtype, so small updates (lr 1e-5) are not rounded away. false: train the 16-bit "
        "weights directly (half the memory; most lr 1e-5 updates of bf16 weights round to "
        "nothing). LoRA adapters are float32 either way (peft).",
    )
    cpu_threads: int = Field(
        0,
        ge=0,
        le=1024,
        description="torch intra-op threads when the policy runs on CPU. 0 = auto: 1 for models "
        "under 50M parameters (their kernels are too small to share between threads, which "
        "would spin beside the reward workers), torch's default otherwise. Ignored on GPU.",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig)
