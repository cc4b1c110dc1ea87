"""What every engine needs from the policy: its weights, and the tokens that end a completion.

Details: docs/modules.md.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

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


# --------------------------------------------------------------------------- stop tokens
_PROBE = "VIGOR_END_OF_TURN_PROBE"
"""Assistant content used to find what a chat template writes after it."""


def _special_ids(tokenizer: Any) -> set[int]:
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i, tok in decoder.items() if getattr(tok, "special", False))
    return ids


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """The special token a chat template writes right after an assistant turn's content.

    Renders ``[user, assistant=<probe>]`` with the template and tokenizes what
    follows the probe; the first token that is not whitespace is the
    end-of-turn token if it is a special token (a template that closes a turn
    with ordinary text, e.g. a newline, gives no stop: stopping there would cut
    every multi-line answer). No template, or a template that refuses this
    conversation: [].
    """
    from vigor_cli.tasks.prompts import has_chat_template

    if tokenizer is None or not has_chat_template(tokenizer):  # none, or plain text (the tiny model's)
        return []
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "1"}, {"role": "assistant", "content": _PROBE}],
            tokenize=False,
            **dict(getattr(tokenizer, "vigor_chat_template_kwargs", None) or {}),
        )
    except Exception:  # templates raise on conversations they do not accept; no stop from them
        return []
    at = text.rfind(_PROBE) if isinstance(text, str) else -1
    if at < 0:
        return []
    suffix = text[at + len(_PROBE):]
    if not suffix.strip():
        return []
    ids = tokenizer(suffix, add_special_tokens=False)["input_ids"]
    special = _special_ids(tokenizer)
    for token in ids:
        if tokenizer.decode([token]).strip() == "":
            continue  # leading whitespace before the end-of-turn marker
        return [int(token)] if int(token) in special else []
    return []


def generation_eos_ids(model: Any) -> list[int]:
    """``model.generation_config.eos_token_id`` as a list (peft wrappers pass it through)."""
    gen_cfg = getattr(model, "generation_config", None)
    extra = getattr(gen_cfg, "eos_token_id", None) if gen_cfg is not None else None
    if extra is None:
        return []
    if isinstance(extra, int):
        return [extra]
    return [int(i) for i in extra]


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every token id that ends a completion (sorted): EOS, generation-config EOS, end of turn."""
    ids: set[int] = set(generation_eos_ids(model))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    ids.update(end_of_turn_ids(tokenizer))
    return sorted(ids)


def cut_at_stop(token_ids: Sequence[int], stops: Sequence[int] | set[int]) -> int | None:
    """Length of ``token_ids`` up to and including its first stop token; None when it has none."""
    stop_set = set(stops)
    for i, token in enumerate(token_ids):
        if token in stop_set:
            return i + 1
    return None
