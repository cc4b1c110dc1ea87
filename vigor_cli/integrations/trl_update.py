"""The TRL path's update in token-budgeted micro-batches, with the rows outside it left out.

Details: docs/modules.md.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from vigor_cli.integrations.trl_versions import LOSS_KINDS

ROW_MEAN_LOSSES = tuple(name for name, kind in LOSS_KINDS.items() if kind == "row mean")
"""TRL loss types normalised by a batch's row count (rescaled per micro-batch)."""

TOKEN_MEAN_PER_RANK = tuple(name for name, kind in LOSS_KINDS.items() if kind == "rank token mean")
"""TRL loss types normalised by the rank's own token count (TRL's choice, kept)."""

TOKEN_METRICS = ("kl", "entropy")
"""TRL metrics that are token means over every rank whatever the ratio's level."""

RATIO_METRICS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "cispo_clip_ratio",
                 "vespo/phi_seq_mean")
"""TRL metrics over the ratio's unit: tokens, or rows under importance_sampling_level='sequence'."""

EXTREMES = {"clip_ratio/low_min": min, "clip_ratio/high_max": max}

ROW_COUNTED = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "cispo_clip_ratio")
"""Ratio metrics TRL averages over every row it forwards at the sequence level (GSPO), the
filler rows included (each 0: no advantage): rescaled to the rows with loss tokens."""

VIGOR_KEYS = {"kl": "losses/kl", "entropy": "losses/entropy", "clip_ratio/low_mean": "losses/clipfrac_low",
              "clip_ratio/high_mean": "losses/clipfrac_high"}
"""TRL's update metrics under the names `vigor train` writes (and the health checks read)."""

ROW_KEYS_RIGHT = ("completion_ids", "completion_mask", "tool_mask", "old_per_token_logps", "ref_per_token_logps",
                  "sampling_per_token_logps", "importance_sampling_ratio", "advantages")
"""Per-row tensors whose columns are completion positions (right-padded)."""
ROW_KEYS_LEFT = ("prompt_ids", "prompt_mask")
"""Per-row tensors whose columns are prompt positions (left-padded)."""


def loss_mask(inputs: dict) -> torch.Tensor:
    """TRL's loss mask of the batch: completion mask times the tool mask (zero outside the update)."""
    mask = inputs["completion_mask"]
    return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask


def forward_rows(inputs: dict, beta: float) -> list[int]:
    """Rows whose loss or gradient is not exactly zero: a loss token, and a non-zero advantage
    unless a KL term (beta > 0) moves every loss token."""
    has_tokens = loss_mask(inputs).sum(-1) > 0
    advantages = inputs["advantages"]
    moving = advantages.reshape(advantages.shape[0], -1).ne(0).any(-1)
    keep = has_tokens if beta != 0 else has_tokens & moving
    return keep.nonzero().flatten().tolist()


def row_sizes(inputs: dict) -> tuple[list[int], list[int]]:
    """(prompt tokens, completion tokens) of each row, padding excluded."""
    return inputs["prompt_mask"].sum(-1).tolist(), inputs["completion_mask"].sum(-1).tolist()


def token_budget_split(rows: Sequence[int], prompts: Sequence[int], completions: Sequence[int],
                       budget: int) -> list[list[int]]:
    """Rows cut into micro-batches whose padded size (rows x (longest prompt + longest
    completion)) stays within ``budget``, longest rows first; a row longer than the budget
    gets a micro-batch of its own."""
    order = sorted(rows, key=lambda i: -(prompts[i] + completions[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    wide_p = wide_c = 0
    for i in order:
        p, c = max(wide_p, prompts[i]), max(wide_c, completions[i])
        if current and (p + c) * (len(current) + 1) > budget:
            batches.append(current)
            current, p, c = [], prompts[i], completions[i]
        current.append(i)
        wide_p, wide_c = p, c
    if current:
        batches.append(current)
    return batches


def slice_rows(inputs: dict, rows: Sequence[int], zero_mask: bool = False, fillers: int = 0) -> dict:
    """The batch restricted to ``rows``, each padded side trimmed to the rows' longest prompt
    and completion. ``zero_mask``: a filler micro-batch (its rows carry no loss token);
    ``fillers``: that many more rows (copies of the first) that carry none."""
    rows = list(rows) + [rows[0]] * fillers
    index = torch.as_tensor(list(rows), dtype=torch.long, device=inputs["advantages"].device)
    prompt_width = int(inputs["prompt_mask"].index_select(0, index).sum(-1).max()) if len(rows) else 0
    completion_width = max(1, int(inputs["completion_mask"].index_select(0, index).sum(-1).max()))
    n = inputs["advantages"].shape[0]
    out: dict = {}
    for key, value in inputs.items():
        if not torch.is_tensor(value) or value.dim() == 0 or value.shape[0] != n:
            out[key] = value
            continue
        value = value.index_select(0, index)
        if key in ROW_KEYS_LEFT and value.dim() == 2:
            value = value[:, value.shape[1] - max(prompt_width, 1):]
        elif key in ROW_KEYS_RIGHT and value.dim() == 2 and value.shape[1] > 1:
            value = value[:, :completion_width]
        out[key] = value
    if zero_mask:
        out["completion_mask"] = torch.zeros_like(out["completion_mask"])
        out["advantages"] = torch.zeros_like(out["advantages"])
    elif fillers:
        out["completion_mask"] = out["completion_mask"].clone()
        out["completion_mask"][len(rows) - fillers:] = 0
        out["advantages"] = out["advantages"].clone()
        out["advantages"][len(rows) - fillers:] = 0
    return out


@dataclass
class Plan:
    """One rank's micro-batches of one optimizer step and the step's totals over every rank."""

    batches: list[list[int]]
    """This rank's micro-batches (row indices); ``[]`` entries are filler micro-batches."""
    rows: int
    """Rows with a loss token over every rank (the row-mean normaliser)."""
    rank_tokens: float
    """This rank's loss tokens (bnpo's normaliser)."""
    tokens: list[float] = field(default_factory=list)
    """Per micro-batch, its loss tokens over every rank."""
    units: list[float] = field(default_factory=list)
    """Per micro-batch, its rows with a loss token over every rank."""
    widths: list[int] = field(default_factory=list)
    """Per micro-batch, the rows of the rank with most: every rank forwards that many (TRL
    gathers per-row values of each forward, which need the same count on every rank)."""
    forwarded: list[float] = field(default_factory=list)
    """Per micro-batch, the rows forwarded over every rank (``widths`` x ranks), filler rows
    included: what TRL divides its sequence-level ratio metrics by."""


def plan_update(inputs: dict, beta: float, budget: int, gather: Callable[[torch.Tensor], torch.Tensor],
                ranks: int) -> Plan:
    """This rank's micro-batches, padded with fillers to the count of the rank with most, and
    the totals the loss and the metrics need (two small gathers, the same on every rank)."""
    mask = loss_mask(inputs)
    prompts, completions = row_sizes(inputs)
    batches = token_budget_split(forward_rows(inputs, beta), prompts, completions, budget)
    device = inputs["advantages"].device
    per_row_tokens = mask.sum(-1)
    counted = (per_row_tokens > 0).sum()
    first = gather(torch.tensor([len(batches), int(counted)], device=device)).view(ranks, 2)
    count = max(1, int(first[:, 0].max()))
    batches += [[] for _ in range(count - len(batches))]
    mine = torch.zeros(3, count, device=device, dtype=torch.float64)
    for k, rows in enumerate(batches):
        if rows:
            t = per_row_tokens[rows]
            mine[0, k], mine[1, k], mine[2, k] = float(t.sum()), float((t > 0).sum()), float(len(rows))
    every = gather(mine.unsqueeze(0)).view(ranks, 3, count)
    totals = every[:, :2].sum(0)
    widths = [max(1, int(w)) for w in every[:, 2].max(0).values.tolist()]
    return Plan(batches, int(first[:, 1].sum()), float(per_row_tokens.sum()), totals[0].tolist(), totals[1].tolist(),
                widths, [float(w * ranks) for w in widths])


def batch_scale(loss_type: str, rows: int, plan: Plan, inputs: dict, ranks: int, width: int | None = None) -> float:
    """What a micro-batch's TRL loss is multiplied by: its rows' share of the update's rows
    over every rank (row means; times the ranks, which DDP averages over), its tokens' share of
    the rank's (bnpo), else 1 (TRL divides by the global token count). ``width``: the rows TRL
    averages over in this micro-batch, filler rows included (default: ``rows``)."""
    if not rows:
        return 1.0
    if loss_type in ROW_MEAN_LOSSES:
        return (width or len(rows)) * ranks / max(plan.rows, 1)
    if loss_type in TOKEN_MEAN_PER_RANK:
        return float(loss_mask(inputs)[rows].sum()) / max(plan.rank_tokens, 1.0)
    return 1.0


def holds_full_gradients_when_unsynced(accelerator: Any) -> bool:
    """Whether skipping the gradient sync would keep a full gradient per rank: FSDP's no_sync
    (FSDP1's, and FSDP2's set_requires_gradient_sync) accumulates unsharded gradients, so under
    FSDP every micro-batch's backward reduce-scatters into the rank's shard instead."""
    from accelerate.utils import DistributedType

    return getattr(accelerator, "distributed_type", None) == DistributedType.FSDP


@contextlib.contextmanager
def accumulating(accelerator: Any, model: Any) -> Iterator[None]:
    """A micro-batch's backward that only accumulates: no gradient sync over the ranks (DDP's
    no_sync) and no optimizer step inside DeepSpeed's backward, as accelerate's own gradient
    accumulation does. Under FSDP the sync is kept (each backward reduce-scatters into the
    rank's shard, where the gradients accumulate): no rank holds a full gradient copy."""
    state = accelerator.gradient_state
    saved = state.sync_gradients
    state._set_sync_gradients(False)
    try:
        with (contextlib.nullcontext() if holds_full_gradients_when_unsynced(accelerator)
              else accelerator.no_sync(model)):
            yield
    finally:
        state._set_sync_gradients(saved)


@dataclass
class UpdateStats:
    """The last optimizer step's update metrics under vigor's keys (``losses/kl``, clip
    fractions, entropy) and how many micro-batches it took."""

    values: dict[str, float] = field(default_factory=dict)
    micro_batches: int = 0
    """Micro-batches this rank ran (the same on every rank)."""
    forwarded: int = 0
    """Rows this rank forwarded (fillers not counted)."""
    fillers: int = 0
    """Filler micro-batches this rank ran to match the rank with most."""
    filler_rows: int = 0
    """Rows without a loss token this rank added to its micro-batches to match the rank with
    most rows in each (TRL gathers one value per row of a forward)."""


def merge_metrics(metrics: dict[str, list], before: dict[str, int], plan: Plan, sequence_level: bool) -> dict[str, float]:
    """Replace what TRL appended once per micro-batch (since ``before``'s lengths) by one value
    per optimizer step: means weighted by each micro-batch's share of the tokens (or rows, for
    the ratio's metrics at the sequence level) over every rank; extremes as extremes. Returns
    the merged values."""
    merged: dict[str, float] = {}
    if sequence_level and plan.forwarded:
        real_rows_only(metrics, before, plan)
    for key in (*TOKEN_METRICS, *RATIO_METRICS, *EXTREMES):
        values = metrics.get(key)
        if values is None or len(values) <= before.get(key, 0):
            continue
        new = values[before.get(key, 0):]
        if key in EXTREMES:
            finite = [v for v in new if not math.isnan(v)]
            value = EXTREMES[key](finite) if finite else float("nan")
        else:
            weights = plan.units if (key in RATIO_METRICS and sequence_level) else plan.tokens
            pairs = [(v, w) for v, w in zip(new, weights) if w > 0 and not math.isnan(v)]
            value = sum(v * w for v, w in pairs) / sum(w for _, w in pairs) if pairs else 0.0
        del values[before.get(key, 0):]
        values.append(value)
        merged[key] = value
    return merged


def real_rows_only(metrics: dict[str, list], before: dict[str, int], plan: Plan) -> None:
    """At the sequence level, TRL's per-forward clip fractions over the rows with loss tokens
    only (in place): TRL divides by every row forwarded, filler rows included, so a rank's
    padding diluted them. Each filler row counts 0 (its advantage is 0), so the sum is exact:
    value x forwarded / real rows. ``clip_ratio/low_min`` (a row is 0 or 1 at this level)
    becomes 1 only where every real row is clipped, as the fillers' zeros hid."""
    for key in ROW_COUNTED:
        values = metrics.get(key)
        start = before.get(key, 0)
        if values is None or len(values) - start != len(plan.units):
            continue
        for k, (units, forwarded) in enumerate(zip(plan.units, plan.forwarded)):
            if units > 0 and not math.isnan(values[start + k]):
                values[start + k] = values[start + k] * forwarded / units
    low, low_min = metrics.get("clip_ratio/low_mean"), metrics.get("clip_ratio/low_min")
    if low is not None and low_min is not None and len(low_min) - before.get("clip_ratio/low_min", 0) == len(plan.units):
        start, start_min = before.get("clip_ratio/low_mean", 0), before.get("clip_ratio/low_min", 0)
        for k, units in enumerate(plan.units):
            if units > 0:
                low_min[start_min + k] = 1.0 if low[start + k] >= 1.0 - 1e-6 else 0.0


def micro_batched_loss(trainer: Any, model: Any, inputs: dict, loss_fn: Callable[[Any, dict], torch.Tensor],
                       budget: int) -> torch.Tensor:
    """The rank's update loss over its micro-batches (module doc): every micro-batch but the
    last is backpropagated here; the last one's loss is returned for the trainer's backward,
    plus the earlier ones' values (detached) for the logged loss."""
    acc = trainer.accelerator
    ranks = acc.num_processes
    plan = plan_update(inputs, trainer.beta, budget, acc.gather, ranks)
    metrics = trainer._metrics["train"]
    before = {key: len(values) for key, values in metrics.items()}
    done = torch.zeros((), device=inputs["advantages"].device)
    last = None
    for k, rows in enumerate(plan.batches):
        width = plan.widths[k]
        sub = slice_rows(inputs, rows or [0], zero_mask=not rows, fillers=width - max(1, len(rows)))
        scale = batch_scale(trainer.loss_type, rows, plan, inputs, ranks, width)
        if k < len(plan.batches) - 1:
            with accumulating(acc, model):
                loss = loss_fn(model, sub) * scale
                acc.backward(loss)
            done = done + loss.detach()
        else:
            last = loss_fn(model, sub) * scale
    merged = merge_metrics(metrics, before, plan, trainer.importance_sampling_level == "sequence")
    trainer.vigor_update = UpdateStats({VIGOR_KEYS[k]: v for k, v in merged.items() if k in VIGOR_KEYS},
                                       len(plan.batches), sum(len(rows) for rows in plan.batches),
                                       sum(1 for rows in plan.batches if not rows),
                                       sum(w - len(rows) for w, rows in zip(plan.widths, plan.batches) if rows))
    return last + done


def scoring_logps(call: Callable[..., tuple], rows: Sequence[int], input_ids: torch.Tensor,
                  attention_mask: torch.Tensor, logits_to_keep: int, budget: int,
                  **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """TRL's ``_get_per_token_logps_and_entropies`` (``call``) on ``rows`` only, trimmed to
    their padding and cut into forwards of at most ``budget`` tokens; the other rows get zero
    log-probs (their loss mask is zero, so nothing reads them)."""
    n, width = input_ids.shape
    out_shape = (n, logits_to_keep)
    if not rows:
        zeros = torch.zeros(out_shape, device=input_ids.device)
        return zeros, (zeros.clone() if kwargs.get("compute_entropy") else None), None
    index = torch.as_tensor(list(rows), dtype=torch.long, device=input_ids.device)
    ids, mask = input_ids.index_select(0, index), attention_mask.index_select(0, index)
    used = mask.nonzero()[:, 1]
    start = min(int(used.min()), width - logits_to_keep)
    end = max(int(used.max()) + 1, width - logits_to_keep + 1)
    keep = logits_to_keep - (width - end)
    ids, mask = ids[:, start:end], mask[:, start:end]
    per_forward = max(1, budget // max(1, ids.shape[1]))
    logps, entropies, aux = call(ids, mask, keep, batch_size=per_forward, **kwargs)
    full = torch.zeros(out_shape, dtype=logps.dtype, device=logps.device)
    full[index, :keep] = logps
    full_entropy = None
    if entropies is not None:
        full_entropy = torch.zeros(out_shape, dtype=entropies.dtype, device=entropies.device)
        full_entropy[index, :keep] = entropies
    return full, full_entropy, aux


def vigor_schedule(optimizer: Any, warmup: int, phases: int) -> torch.optim.lr_scheduler.LambdaLR:
    """`vigor train`'s learning-rate schedule over TRL's optimizer steps: a linear warm-up over
    ``warmup`` rollout phases starting at 1/warmup (not at 0), each phase's ``phases`` optimizer
    steps at its phase's rate, then constant."""
    per = max(1, phases)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s // per + 1) / warmup) if warmup else 1.0)
