"""The policy's weights as an engine that keeps its own copy needs them (vLLM today).

- :func:`policy_weights`: every weight under its Hugging Face checkpoint name, LoRA
  adapters merged into their base weight (``base + scaling * B @ A``, computed without
  touching peft's tensors), 4-bit bases dequantised, one tensor at a time.
- :func:`policy_version`: a fingerprint that changes whenever an optimizer step (or any
  in-place write) modifies a parameter, so an engine pushes only when the policy moved.

Which tokens end a completion is the other thing every engine needs: ``rollout/stops.py``
(:func:`~vigor_cli.rollout.stops.stop_token_ids`, :func:`~vigor_cli.rollout.stops.cut_at_stop`).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from vigor_cli.errors import UserError


def policy_version(model: Any) -> tuple:
    """A cheap fingerprint that changes whenever any policy parameter is modified in place.

    Every in-place write to a tensor (optimizer steps, ``load_state_dict``,
    ``copy_`` under ``no_grad``) bumps its autograd version counter, so the
    tuple of (identity, version) pairs changes after each optimizer step
    without reading any weight. Writes through ``param.data`` do not bump
    the counter and go unseen.
    """
    return tuple((id(p), p._version) for p in model.parameters())


def dense_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight as a float32 dense matrix: bitsandbytes 4-bit weights are dequantised."""
    quant_state = getattr(weight, "quant_state", None)
    if quant_state is not None:
        import bitsandbytes.functional as bnb_functional

        return bnb_functional.dequantize_4bit(weight.data, quant_state).float()
    return weight.detach().float()


@torch.no_grad()
def merged_lora_weight(module: Any, path: str) -> torch.Tensor:
    """``base + sum over active adapters of scaling·B·A`` for one peft LoRA layer, in float32.

    Computed from the layer's tensors without touching them (unlike peft's
    ``merge_adapter``, which rewrites the base weight and drifts on 4-bit).
    """
    base = module.get_base_layer()
    if not isinstance(base, torch.nn.Linear) and not getattr(module, "fan_in_fan_out", False):
        raise UserError(
            f"engine weights: LoRA on {path} ({type(base).__name__}) cannot be merged; "
            "target linear layers only (model.lora.target_modules)"
        )
    weight = dense_weight(base.weight)
    if module.disable_adapters:
        return weight
    for adapter in module.active_adapters:
        if adapter in module.merged_adapters:
            continue  # already folded into the base weight by peft
        if adapter in module.lora_embedding_A or module.lora_variant.get(adapter) is not None:
            raise UserError(
                f"engine weights: adapter '{adapter}' on {path} is an embedding or DoRA-style "
                "LoRA, which the engine cannot merge; use plain LoRA on linear layers"
            )
        if module.lora_bias.get(adapter):
            raise UserError(f"engine weights: adapter '{adapter}' on {path} trains a LoRA bias, "
                            "which the engine cannot merge")
        if adapter not in module.lora_A:
            continue
        a = module.lora_A[adapter].weight.float()
        b = module.lora_B[adapter].weight.float()
        delta = (b @ a) * module.scaling[adapter]
        weight = weight + (delta.T if module.fan_in_fan_out else delta)
    return weight


@torch.no_grad()
def policy_weights(model: Any, dtype: torch.dtype = torch.bfloat16) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight of the policy as (Hugging Face name, tensor), LoRA merged, in ``dtype``.

    The names are the checkpoint names vLLM's ``load_weights`` maps onto its
    own (fused) parameters: peft's ``base_model.model.`` prefix and
    ``.base_layer`` infix are dropped, ``lora_*`` tensors are folded into
    their base weight instead of being sent, and a ``modules_to_save`` copy
    replaces the original module's weight. Tensors are produced one at a
    time, so at most one merged matrix exists beside the policy.
    """
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    is_peft = isinstance(model, PeftModel)
    root = model.get_base_model() if is_peft else model
    active = model.active_adapter if is_peft else None
    lora_layers = {path: m for path, m in root.named_modules() if isinstance(m, LoraLayer)}
    for name, param in root.named_parameters():
        parts = name.split(".")
        if any(p.startswith("lora_") for p in parts) or "original_module" in parts:
            continue
        if any(p.startswith("trainable_tokens_") for p in parts):
            raise UserError(f"engine weights: {name}: peft trainable tokens are not supported")
        if "modules_to_save" in parts:
            i = parts.index("modules_to_save")
            if parts[i + 1] != active:
                continue
            parts = parts[:i] + parts[i + 2 :]
        if "base_layer" in parts:
            i = parts.index("base_layer")
            owner = ".".join(parts[:i])
            parts = parts[:i] + parts[i + 1 :]
            if parts[-1] == "weight" and owner in lora_layers:
                yield ".".join(parts), merged_lora_weight(lora_layers[owner], owner).to(dtype)
                continue
        yield ".".join(parts), dense_weight(param).to(dtype)
