"""GRPO's math as small pure functions: advantages, the clipped loss, KL, aggregation.

Each advantage scaling and each loss aggregation is registered under the name
the config uses (``grpo.scale_rewards``, ``grpo.loss_agg``), the way verl's
``core_algos`` does it: adding one touches one place. Nothing here knows about
models, engines or allocators; the trainer feeds tensors in.

Details: docs/modules.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

ADV_EPS = 1e-4

# --------------------------------------------------------------------------- advantages
AdvantageFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
ADVANTAGE_SCALINGS: dict[str, AdvantageFn] = {}


def register_scaling(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    def wrap(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGE_SCALINGS[name] = fn
        return fn

    return wrap


def group_index(uids: Sequence[str]) -> torch.Tensor:
    """Map each rollout's uid to a dense group index 0..G-1 (first-seen order)."""
    seen: dict[str, int] = {}
    return torch.tensor([seen.setdefault(u, len(seen)) for u in uids], dtype=torch.long)


def _group_mean_std(rewards: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-rollout mean and population std of the rollout's group."""
    n_groups = int(groups.max()) + 1 if groups.numel() else 0
    count = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, groups, torch.ones_like(rewards))
    total = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, groups, rewards)
    mean = (total / count)[groups]
    sq = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, groups, (rewards - mean) ** 2)
    std = (sq / count).sqrt()[groups]
    return mean, std


@register_scaling("group")
def scale_by_group(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """GRPO: (r - group mean) / (group std + eps)."""
    mean, std = _group_mean_std(rewards, groups)
    return (rewards - mean) / (std + ADV_EPS)


@register_scaling("batch")
def scale_by_batch(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """(r - group mean) / (std of all rewards in the batch + eps) (Lite PPO / REINFORCE++)."""
    mean, _ = _group_mean_std(rewards, groups)
    return (rewards - mean) / (rewards.std(unbiased=False) + ADV_EPS)


@register_scaling("none")
def no_scaling(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO (Liu et al. 2025): r - group mean, no division by a std."""
    mean, _ = _group_mean_std(rewards, groups)
    return rewards - mean


def compute_advantages(rewards: Sequence[float], uids: Sequence[str], scale: str = "group") -> torch.Tensor:
    """One advantage per rollout; rollouts sharing a uid form a group of any size."""
    if scale not in ADVANTAGE_SCALINGS:
        raise ValueError(f"unknown scale_rewards {scale!r}; known: {sorted(ADVANTAGE_SCALINGS)}")
    r = torch.as_tensor(list(rewards), dtype=torch.float64)
    if r.numel() == 0:
        return r.float()
    return ADVANTAGE_SCALINGS[scale](r, group_index(uids)).float()


# --------------------------------------------------------------------------- per-token terms
RatioFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
RATIO_LEVELS: dict[str, RatioFn] = {}
"""``grpo.importance_sampling_level``: how the PPO log-ratio log(pi / pi_old) of a row is
formed from its per-token log-ratios [rows, tokens] and its loss mask (TRL's
``importance_sampling_level``, the same names)."""


def register_ratio_level(name: str) -> Callable[[RatioFn], RatioFn]:
    def wrap(fn: RatioFn) -> RatioFn:
        RATIO_LEVELS[name] = fn
        return fn

    return wrap


@register_ratio_level("token")
def token_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GRPO, DAPO: every token its own ratio."""
    return log_ratio


@register_ratio_level("sequence")
def sequence_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO (Zheng et al. 2025): one ratio per sequence, the exponential of the mean log-ratio
    over its loss tokens, repeated on every token of the row (each token's loss is then the
    row's, and the aggregation weighs rows as it weighs tokens)."""
    m = mask.to(log_ratio.dtype)
    mean = (log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    return mean.expand_as(log_ratio)


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float,
    epsilon_high: float,
    level: str = "token",
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token PPO/DAPO loss and where the clip was active.

    ``logp`` and ``old_logp`` are [rows, tokens]; ``advantages`` is [rows]; ``level`` a name in
    :data:`RATIO_LEVELS` (``mask``, the loss mask, is read by the sequence level).
    Returns (loss, clipped_low, clipped_high): the masks mark tokens whose
    gradient the clip removed (ratio below 1 - eps with A < 0, above
    1 + eps_high with A > 0).
    """
    if level not in RATIO_LEVELS:
        raise ValueError(f"unknown importance_sampling_level {level!r}; known: {sorted(RATIO_LEVELS)}")
    adv = advantages.unsqueeze(-1)
    ones = torch.ones_like(logp) if mask is None else mask
    ratio = torch.exp(RATIO_LEVELS[level](logp - old_logp, ones))
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    clipped_low = (ratio < 1.0 - epsilon) & (adv < 0)
    clipped_high = (ratio > 1.0 + epsilon_high) & (adv > 0)
    return loss, clipped_low, clipped_high


def truncated_importance_weights(policy_logp: torch.Tensor, engine_logp: torch.Tensor,
                                 cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token weights min(pi_policy / pi_engine, cap) of tokens the engine sampled, without
    gradient, and where the cap cut the ratio (TRL's and verl's token-level truncate mode).

    ``policy_logp`` are the policy's log-probs before the update (the GRPO "old" ones),
    ``engine_logp`` those the engine reported for the same tokens under the same sampling
    distribution (temperature applied). The policy-gradient term of each token is multiplied
    by its weight: samples drawn from the engine then estimate the gradient under the policy,
    up to the truncation (which trades that bias for bounded variance). The log-ratio is
    clamped at +-20 before exp, as verl does, so a garbage engine log-prob cannot overflow.

    A non-finite engine log-prob (NaN, or infinite: a sampled token cannot have probability 0
    or above 1) says nothing about the gap: that token is left out of the correction (weight
    exactly 1, as TRL does with the NaN vLLM reports for a token it could not score) instead
    of carrying NaN into the loss (:func:`nonfinite` marks those tokens).
    """
    engine = engine_logp.float()
    bad = nonfinite(engine)
    log_ratio = (policy_logp.detach().float() - engine.masked_fill(bad, 0.0)).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio.masked_fill(bad, 0.0))
    return ratio.clamp(max=cap), ratio > cap


def nonfinite(engine_logp: torch.Tensor) -> torch.Tensor:
    """Where an engine's log-probs are NaN or infinite (left out of the correction)."""
    return ~torch.isfinite(engine_logp)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(d) - d - 1, d = ref - logp."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


# --------------------------------------------------------------------------- aggregation
@dataclass(frozen=True)
class StepTotals:
    """Step-wide normalisers, fixed before micro-batching."""

    tokens: int
    """Loss tokens (mask = 1) in the whole step."""
    sequences: int
    """Completions in the whole step."""
    max_new_tokens: int
    """The completion length limit (Dr. GRPO's constant)."""
    row_weights: tuple[float, ...] = ()
    """``prompt_mean``: per step row, 1 / (prompts x loss tokens of the row's prompt); 0 for a
    row without loss tokens. Built by :func:`step_totals`."""


def step_totals(
    uids: Sequence[str], lengths: Sequence[int], masks: Sequence[float], max_new_tokens: int
) -> StepTotals:
    """The normalisers of a step whose rows have these prompt uids, completion lengths and
    0/1 loss masks (a masked row, e.g. a truncated one, has no loss tokens)."""
    tokens = [int(n * m) for n, m in zip(lengths, masks)]
    per_group: dict[str, int] = {}
    for uid, t in zip(uids, tokens):
        per_group[uid] = per_group.get(uid, 0) + t
    prompts = sum(1 for t in per_group.values() if t > 0)
    weights = tuple(1.0 / (prompts * per_group[u]) if t > 0 else 0.0 for u, t in zip(uids, tokens))
    return StepTotals(
        tokens=sum(tokens),
        sequences=sum(1 for m in masks if m),
        max_new_tokens=max_new_tokens,
        row_weights=weights,
    )


AggFn = Callable[[torch.Tensor, torch.Tensor, StepTotals, Sequence[int]], torch.Tensor]
LOSS_AGGREGATIONS: dict[str, AggFn] = {}


def register_aggregation(name: str) -> Callable[[AggFn], AggFn]:
    def wrap(fn: AggFn) -> AggFn:
        LOSS_AGGREGATIONS[name] = fn
        return fn

    return wrap


@register_aggregation("dapo")
def agg_token_mean(token_loss: torch.Tensor, mask: torch.Tensor, totals: StepTotals, rows: Sequence[int]) -> torch.Tensor:
    """DAPO: sum over every token of the step / tokens in the step (long answers weigh more)."""
    return (token_loss * mask).sum() / max(totals.tokens, 1)


@register_aggregation("grpo")
def agg_sequence_mean(token_loss: torch.Tensor, mask: torch.Tensor, totals: StepTotals, rows: Sequence[int]) -> torch.Tensor:
    """GRPO: mean over sequences of each sequence's token mean."""
    per_seq = (token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_seq.sum() / max(totals.sequences, 1)


@register_aggregation("dr_grpo")
def agg_constant_norm(token_loss: torch.Tensor, mask: torch.Tensor, totals: StepTotals, rows: Sequence[int]) -> torch.Tensor:
    """Dr. GRPO: token sum / (sequences x max_new_tokens), no length bias."""
    return (token_loss * mask).sum() / max(totals.sequences * totals.max_new_tokens, 1)


@register_aggregation("prompt_mean")
def agg_prompt_mean(token_loss: torch.Tensor, mask: torch.Tensor, totals: StepTotals, rows: Sequence[int]) -> torch.Tensor:
    """Each prompt weighs the same: mean over the step's prompts of the token mean over all
    of the prompt's rollouts (DAPO's token mean within a prompt). A prompt with 30 rollouts
    weighs as much as one with 2."""
    if len(totals.row_weights) <= max(rows, default=-1):
        raise ValueError("prompt_mean needs StepTotals.row_weights for every row (use step_totals)")
    w = torch.tensor([totals.row_weights[i] for i in rows], dtype=token_loss.dtype, device=token_loss.device)
    return ((token_loss * mask).sum(-1) * w).sum()


def aggregate(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    totals: StepTotals,
    how: str = "dapo",
    rows: Sequence[int] | None = None,
) -> torch.Tensor:
    """This micro-batch's share of the step loss under aggregation ``how``.

    ``rows`` are the micro-batch's row indices in the step (the order of
    :func:`step_totals`' inputs); default: the whole step, in order.
    """
    if how not in LOSS_AGGREGATIONS:
        raise ValueError(f"unknown loss_agg {how!r}; known: {sorted(LOSS_AGGREGATIONS)}")
    if rows is None:
        rows = range(token_loss.shape[0])
    return LOSS_AGGREGATIONS[how](token_loss, mask.to(token_loss.dtype), totals, rows)


# --------------------------------------------------------------------------- micro-batches
def token_budget_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Split row indices, in order, into micro-batches whose padded size rows x max length
    stays within ``budget`` tokens (a single longer row gets a batch of its own)."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if current and max(longest, n) * (len(current) + 1) > budget:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


def selected_token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0):
    """log softmax(logits / T) at ``targets`` and the entropy of that distribution, per position.

    ``logits`` [rows, tokens, vocab]; ``targets`` [rows, tokens]. Computed row by
    row to keep the float32 copy of a large vocabulary small.
    """
    logps, entropies = [], []
    for row_logits, row_targets in zip(logits, targets):
        lp = torch.log_softmax(row_logits.float() / temperature, dim=-1)
        logps.append(lp.gather(-1, row_targets.unsqueeze(-1)).squeeze(-1))
        with torch.no_grad():
            entropies.append(-(lp.exp() * lp).sum(-1))
    return torch.stack(logps), torch.stack(entropies)
