"""A model's shape for the memory plan (vigor_cli/model/memory_plan.py), read from its config.json
alone: the model is built on PyTorch's ``meta`` device (shapes, no weights, no memory) to count
its parameters, the linear layers 4-bit quantizes and the ones the run's LoRA config adapts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs from a model's config (counted on the meta device)."""

    name: str
    params: int
    quantizable_params: int  # weights of the decoder's linear layers (NF4 under 4-bit)
    lora_params: int  # adapter parameters for the run's LoRA config (0 without LoRA)
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    max_positions: int | None
    lora_targets: int  # adapted linear layers per decoder layer
    lora_linears: tuple[tuple[str, int, int], ...] = ()
    """(name, in_features, out_features) of each adapted linear layer of a decoder layer."""
    qk_norm: bool = False  # RMSNorm on each head's queries and keys (Qwen3)


def _lora_matches(path: str, targets: str | list[str], head_path: str) -> bool:
    if path == head_path:
        return False  # peft's 'all-linear' leaves the output layer out
    if isinstance(targets, str):
        return targets == "all-linear" or path.split(".")[-1] == targets
    return path.split(".")[-1] in targets or path in targets


def model_shape(model_cfg: Any) -> ModelShape:
    """Count parameters from config.json (local path, 'tiny' or hub id; no weights loaded)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from vigor_cli.errors import UserError
    from vigor_cli.model.loading import quiet_transformers, resolve_model_path

    quiet_transformers()
    path = resolve_model_path(model_cfg.name_or_path, to_load=True)
    try:
        config = AutoConfig.from_pretrained(path, revision=model_cfg.revision)
    except (OSError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(
            f"model.name_or_path={model_cfg.name_or_path}: cannot read its config.json for the "
            f"memory plan ({first}); pass a local directory that has it"
        ) from None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    head_path = next((n for n, m in model.named_modules() if m is head), "")
    params = sum(p.numel() for p in model.parameters())
    quantizable = lora = 0
    adapted: dict[str, tuple[int, int]] = {}
    for path_, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and path_ != head_path:
            quantizable += module.weight.numel()
            if model_cfg.lora.enabled and _lora_matches(path_, model_cfg.lora.target_modules, head_path):
                lora += model_cfg.lora.r * (module.in_features + module.out_features)
                adapted[path_.split(".")[-1]] = (module.in_features, module.out_features)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(text.num_attention_heads)
    hidden = int(text.hidden_size)
    head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
    return ModelShape(
        name=str(model_cfg.name_or_path),
        params=params,
        quantizable_params=quantizable,
        lora_params=lora,
        vocab=int(text.vocab_size),
        hidden=hidden,
        layers=int(text.num_hidden_layers),
        heads=heads,
        kv_heads=int(getattr(text, "num_key_value_heads", None) or heads),
        head_dim=head_dim,
        intermediate=int(getattr(text, "intermediate_size", None) or 4 * hidden),
        max_positions=getattr(text, "max_position_embeddings", None),
        lora_targets=len(adapted),
        lora_linears=tuple(sorted((name, i, o) for name, (i, o) in adapted.items())),
        qk_norm=any(n.endswith(".q_norm") for n, _ in model.named_modules()),
    )

