"""Log-probs and entropies of completion tokens, without a [tokens, vocabulary] tensor.

Details: docs/modules.md.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.utils.checkpoint import checkpoint


@dataclass
class Batch:
    """Right-padded prompt+completion rows and where their completions sit."""

    ids: torch.Tensor  # [rows, width] token ids
    attention: torch.Tensor  # [rows, width] 1 on real tokens
    mask: torch.Tensor  # [rows, longest completion] 1.0 on completion tokens
    predict_at: torch.Tensor  # [completion tokens] flat index (row * width + position) of the predicting position
    targets: torch.Tensor  # [completion tokens] the completion tokens, row-major


def make_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
               token_masks: Sequence[Sequence[int] | None] | None = None) -> Batch:
    """Right-pad ``prompt + completion`` rows; completion token j of a row with a p-token
    prompt is predicted at position p - 1 + j. ``token_masks[k]`` (an episode's: 1 on the
    model's tokens, 0 on the environment's) leaves the 0 tokens out of the mask and out of
    the positions that reach the output layer (None: every completion token counts)."""
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    comp_width = max(len(c) for c in completions)
    rows = len(prompts)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, comp_width))
    predict_at, targets = [], []
    for k, (p, c) in enumerate(zip(prompts, completions)):
        seq = list(p) + list(c)
        ids[k, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[k, : len(seq)] = 1
        keep = token_masks[k] if token_masks is not None else None
        at = torch.arange(len(c)) if keep is None else torch.tensor([j for j, m in enumerate(keep) if m], dtype=torch.long)
        mask[k, at] = 1.0
        predict_at.append(at + (len(p) - 1 + k * width))
        targets.append(torch.tensor(list(c), dtype=torch.long)[at])
    return Batch(ids, attention, mask, torch.cat(predict_at), torch.cat(targets))


def autocast_for(model: Any, device: torch.device):
    """The forward's autocast context: set by ``models.load_policy`` when trained float32
    weights run in a 16-bit compute dtype (fp32 master weights), else a no-op."""
    dtype = getattr(model, "vigor_autocast_dtype", None)
    if dtype is None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else None
        dtype = getattr(base, "vigor_autocast_dtype", None)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def output_parts(model: Any) -> tuple[Any, Any, float | None]:
    """(decoder, output layer, logit soft-cap or None) of a causal LM, plain or peft-wrapped.

    The decoder is called for hidden states and the output layer (a module, so a
    LoRA-wrapped or ``modules_to_save`` head still applies) on the kept positions.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if decoder is None or head is None or decoder is base:
        raise ValueError(
            f"{type(base).__name__} does not expose its decoder and output layer "
            "(get_decoder / get_output_embeddings); set grpo.logits_chunk_tokens=0"
        )
    cap = getattr(getattr(base, "config", None), "final_logit_softcapping", None)
    return decoder, head, cap


def _chunk_terms(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                 cap: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Selected-token log-prob (differentiable) and entropy (detached) for one chunk."""
    logits = head(hidden)  # under the caller's autocast, if any
    with torch.autocast(device_type=hidden.device.type, enabled=False):  # the softmax math in float32
        logits = logits.float()
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        if temperature != 1.0:
            logits = logits / temperature
        lse = torch.logsumexp(logits, dim=-1)
        logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
        with torch.no_grad():
            logp_all = logits - lse.unsqueeze(-1)
            entropy = -torch.bmm(logp_all.exp().unsqueeze(1), logp_all.unsqueeze(-1)).view(-1)
    return logp, entropy


def completion_logprobs(model: Any, batch: Batch, device: torch.device, temperature: float = 1.0,
                        chunk_tokens: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs and entropies of the batch's completions, [rows, longest completion]
    (0 at padding), computed on completion positions only, ``chunk_tokens`` at a time."""
    decoder, head, cap = output_parts(model)
    with autocast_for(model, device):
        hidden = decoder(
            input_ids=batch.ids.to(device), attention_mask=batch.attention.to(device), use_cache=False
        ).last_hidden_state
        hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, batch.predict_at.to(device))
        targets = batch.targets.to(device)
        step = max(1, int(chunk_tokens))
        grad = torch.is_grad_enabled()
        logps, entropies = [], []
        for start in range(0, hidden.shape[0], step):
            h, t = hidden[start : start + step], targets[start : start + step]
            if grad:
                lp, ent = checkpoint(_chunk_terms, head, h, t, temperature, cap, use_reentrant=False)
            else:
                lp, ent = _chunk_terms(head, h, t, temperature, cap)
            logps.append(lp)
            entropies.append(ent)
    where = batch.mask.to(device).bool()
    logp = torch.zeros(where.shape, dtype=torch.float32, device=device)
    logp = logp.masked_scatter(where, torch.cat(logps))
    entropy = torch.zeros(where.shape, dtype=torch.float32, device=device)
    entropy[where] = torch.cat(entropies)
    return logp, entropy


def full_logprobs(model: Any, batch: Batch, device: torch.device,
                  temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The previous computation, kept as reference: the model's logits at every position and
    the whole vocabulary, gathered at the completion positions, log-softmax row by row."""
    from vigor_cli import grpo

    rows, width = batch.ids.shape
    comp_width = batch.mask.shape[1]
    where = batch.mask.bool()
    gather_at = torch.zeros((rows, comp_width), dtype=torch.long)
    gather_at[where] = batch.predict_at - (torch.arange(rows).unsqueeze(1).expand(-1, comp_width)[where] * width)
    targets = torch.zeros((rows, comp_width), dtype=torch.long)
    targets[where] = batch.targets
    with autocast_for(model, device):
        logits = model(input_ids=batch.ids.to(device), attention_mask=batch.attention.to(device)).logits
        picked = logits.gather(1, gather_at.to(device).unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        lp, ent = grpo.selected_token_logprobs(picked, targets.to(device), temperature)
    return lp, ent
