"""The learner: the policy being trained and everything that changes it.

A :class:`Learner` owns the policy (and its device), the frozen KL reference,
the optimizer and learning-rate schedule, the log-probs of completions under
any of these models, the GRPO update (vigor_cli/grpo.py's registered
functions) and the check that the rollout engine's log-probs track the policy's
weights. It knows nothing of data order, allocation, rewards or the run
directory: the loop (vigor_cli/train/trainer.py) hands it a step's samples, pushes
its model to the engine, and checkpoints its :meth:`Learner.state_dict` beside
the policy's weights.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from vigor_cli import grpo
from vigor_cli.model.base_copy import loads_base_copy
from vigor_cli.config import RunConfig
from vigor_cli.rollout.weight_check import WeightCheckSums, judge


IMPORTANCE_METRICS = (
    "sampling/importance_sampling_ratio/mean", "sampling/importance_sampling_ratio/min",
    "sampling/importance_sampling_ratio/max", "sampling/importance_sampling_ratio/clipped_frac",
    "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
    "sampling/nonfinite_engine_logprobs",
)
"""What an update with importance sampling adds to metrics.jsonl (absent when it is off). The
last counts the loss tokens whose engine log-prob was NaN or infinite (left out of the
correction: weight 1)."""


def nan_for_none(logprobs: Sequence[Any]) -> list[float]:
    """An engine's log-probs as floats, a missing one (None: vLLM's way of saying it could not
    score a token) as NaN, so the correction leaves it out as it leaves out a NaN."""
    return [float("nan") if x is None else float(x) for x in logprobs]
def loss_tokens(rollout: Any) -> int:
    """Tokens of a rollout the loss trains: all of a completion's, an episode's model tokens."""
    mask = getattr(rollout, "mask", None)
    return len(rollout.token_ids) if mask is None else int(sum(mask))


def model_positions(rollout: Any) -> list[int]:
    """Positions of a rollout's tokens that the model sampled (all but an episode's
    environment tokens)."""
    mask = getattr(rollout, "mask", None)
    n = len(rollout.logprobs)
    return list(range(n)) if mask is None else [j for j in range(n) if mask[j]]


def release_cached_memory() -> None:
    """Return the CUDA blocks PyTorch's allocator cached during the update: the colocated vLLM
    engine allocates its weights and KV cache outside that cache when it wakes."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class Learner:
    """Policy, reference, optimizer and scheduler; log-probs and the update.

    ``prompt_ids`` maps a sample's uid to its prompt's token ids (the loop encodes the
    prompts once); ``resume_from`` is a checkpoint directory whose weights are loaded
    instead of the starting model's (its optimizer state comes with
    :meth:`load_state_dict`). Samples are any objects with ``uid``, ``rollout``
    (``token_ids``, ``logprobs``, ``truncated``) and ``advantage``.
    """

    def __init__(self, cfg: RunConfig, pad_token_id: int | None, prompt_ids: Mapping[str, Sequence[int]],
                 resume_from: Path | None = None):
        from vigor_cli.model.loading import Reference, load_policy, trainable_parameters

        self.cfg = cfg
        self.prompt_ids = prompt_ids
        self.pad_token_id = pad_token_id or 0
        self.model, _, self.device = load_policy(cfg.model, str(resume_from) if resume_from else None)
        self.reference = None
        if cfg.grpo.beta > 0:
            if cfg.model.lora.enabled:
                self.reference = Reference(self.model)
            else:
                self.reference = Reference(self.model, load_policy(cfg.model)[0])
        self.trainable = trainable_parameters(self.model)
        self.optimizer = torch.optim.AdamW(
            self.trainable, lr=cfg.grpo.learning_rate, weight_decay=cfg.grpo.weight_decay
        )
        warmup = cfg.grpo.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
        )
        mode = cfg.grpo.importance_sampling
        self.importance_sampling = mode == "on" or (mode == "auto" and cfg.engine.kind == "vllm")
        """Weight the policy-gradient term by the truncated policy/engine ratio (resolved for
        the engine by :meth:`watch_engine`)."""
        self.weight_base: Any = None
        """The base model the weight check compares with (set by :meth:`watch_engine`)."""
        self.weight_check = judge(0.0, 0.0, 0.0, 0, cfg.engine.logprob_check_threshold)
        """The last update's weight check (vigor_cli/rollout/weight_check.py)."""

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict:
        """What a checkpoint needs beyond the policy's weights (saved in HF format by the
        loop): the optimizer's moments and the schedule's position."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    # ------------------------------------------------------------------ the update
    def update(self, samples: Sequence[Any]) -> dict[str, float]:
        """mu passes of the clipped GRPO loss over the step's samples, in token-budget
        micro-batches whose gradients add up to the whole step's gradient; one optimizer
        and one scheduler step. The gradients stay on the parameters until
        :meth:`release_gradients`."""
        g, temp = self.cfg.grpo, self.cfg.sampling.temperature or 1.0
        masks = [0.0 if (g.mask_truncated and s.rollout.truncated) else 1.0 for s in samples]
        totals = grpo.step_totals(  # an episode's loss tokens are the model's own
            [s.uid for s in samples], [loss_tokens(s.rollout) for s in samples], masks,
            self.cfg.completion_tokens(),
        )
        # Rows with zero advantage (or masked out) add exactly zero loss and gradient when
        # there is no KL term: skip their forward pass but keep them in the normalisers.
        rows = [
            i for i, s in enumerate(samples)
            if masks[i] and s.rollout.token_ids and (s.advantage != 0.0 or g.beta > 0)
        ]
        lengths = [len(self.prompt_of(samples[i])) + len(samples[i].rollout.token_ids) for i in rows]
        batches = [[rows[j] for j in b] for b in grpo.token_budget_batches(lengths, g.micro_batch_tokens)]

        # Before any optimizer step: do the engine's log-probs track these weights?
        self.weight_check = self.check_engine_weights(samples, temp)
        lr = self.scheduler.get_last_lr()[0]  # the rate this step's update uses
        sums, grad_norm = self._passes(samples, batches, totals, temp)
        self.scheduler.step()
        denom = max(sums.pop("tokens", 0.0), 1.0)
        sampling = self._importance_metrics(sums) if self.importance_sampling else {}
        return {
            "losses/loss": sums["loss"],
            "losses/clipfrac_low": sums["clip_low"] / denom,
            "losses/clipfrac_high": sums["clip_high"] / denom,
            "losses/kl": sums["kl"] / denom,
            "losses/entropy": sums["entropy"] / denom,
            "losses/grad_norm": grad_norm,
            **self.weight_check.metrics(),
            **sampling,
            "lr": lr,
        }

    @staticmethod
    def _importance_metrics(sums: Mapping[str, float]) -> dict[str, float | None]:
        """The truncated ratio (as applied) and the log-prob gap over the update's loss tokens,
        under TRL's names; None when the update computed no token."""
        n, bad = sums.get("is_tokens", 0.0), sums.get("is_nonfinite", 0.0)
        if not n:
            return {**{k: None for k in IMPORTANCE_METRICS},
                    "sampling/nonfinite_engine_logprobs": int(bad) if bad else None}
        return {
            "sampling/importance_sampling_ratio/mean": sums["is_sum"] / n,
            "sampling/importance_sampling_ratio/min": sums["is_min"],
            "sampling/importance_sampling_ratio/max": sums["is_max"],
            "sampling/importance_sampling_ratio/clipped_frac": sums["is_clipped"] / n,
            "sampling/sampling_logp_difference/mean": sums["is_diff_sum"] / n,
            "sampling/sampling_logp_difference/max": sums["is_diff_max"],
            "sampling/nonfinite_engine_logprobs": int(sums["is_nonfinite"]),
        }

    def _passes(self, samples: Sequence[Any], batches: list[list[int]], totals: Any,
                temp: float) -> tuple[dict[str, float], float]:
        """The mu optimizer passes; pass 0's sums (loss, clipped and masked tokens, entropy,
        KL) and the last pass's gradient norm."""
        g = self.cfg.grpo
        # Pass 0's log-probs are the "old" policy of every later pass (mu > 1), and the
        # reference's log-probs do not change between passes: both are computed once.
        old_cache: dict[int, torch.Tensor] = {}
        ref_cache: dict[int, torch.Tensor] = {}
        is_cache: dict[int, torch.Tensor] = {}  # importance weights, fixed by pass 0's log-probs
        sums: dict[str, float] = defaultdict(float)
        grad_norm = 0.0
        for pass_index in range(g.mu):
            self.optimizer.zero_grad(set_to_none=True)
            for bi, b in enumerate(batches):
                lp, ent, mask = self.logprobs(self.model, samples, b, temp)
                adv = torch.tensor([samples[i].advantage for i in b], dtype=lp.dtype, device=lp.device)
                old = old_cache.setdefault(bi, lp.detach())
                tok_loss, low, high = grpo.clipped_policy_loss(lp, old, adv, g.epsilon, g.epsilon_high,
                                                               g.importance_sampling_level, mask)
                if self.importance_sampling:
                    if bi not in is_cache:
                        is_cache[bi] = self._importance_weights(samples, b, old, mask, sums)
                    tok_loss = tok_loss * is_cache[bi]
                kl = None
                if self.reference is not None:
                    if bi not in ref_cache:
                        with torch.no_grad(), self.reference.model() as ref:
                            ref_cache[bi] = self.logprobs(ref, samples, b, temp)[0]
                    kl = grpo.kl_k3(lp, ref_cache[bi])
                    tok_loss = tok_loss + g.beta * kl
                loss = grpo.aggregate(tok_loss, mask, totals, g.loss_agg, rows=b)
                loss.backward()
                if pass_index == 0:
                    sums["tokens"] += float(mask.sum())
                    sums["loss"] += float(loss.detach())
                    sums["clip_low"] += float((low.float() * mask).sum())
                    sums["clip_high"] += float((high.float() * mask).sum())
                    sums["entropy"] += float((ent * mask).sum())
                    if kl is not None:
                        sums["kl"] += float((kl.detach() * mask).sum())
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, g.max_grad_norm))
            self.optimizer.step()
        return sums, grad_norm

    def _importance_weights(self, samples: Sequence[Any], rows: list[int], policy_lp: torch.Tensor,
                            mask: torch.Tensor, sums: dict[str, float]) -> torch.Tensor:
        """min(pi_policy / pi_engine, cap) per token of the rows (grpo.truncated_importance_weights)
        from the engine's log-probs stored with each rollout; adds the step's statistics to
        ``sums`` (loss tokens only)."""
        engine_lp = torch.zeros_like(policy_lp)
        for k, i in enumerate(rows):
            got = samples[i].rollout.logprobs
            engine_lp[k, : len(got)] = torch.tensor(nan_for_none(got), dtype=engine_lp.dtype)
        weights, clipped = grpo.truncated_importance_weights(policy_lp, engine_lp, self.cfg.grpo.importance_sampling_cap)
        bad = grpo.nonfinite(engine_lp)
        on = mask.bool()
        sums["is_nonfinite"] += float((bad & on).sum())
        on = on & ~bad  # the statistics of the gap are over the tokens the engine scored
        if bool(on.any()):
            w, diff = weights[on], (policy_lp.detach() - engine_lp)[on].abs()
            sums["is_tokens"] += float(on.sum())
            sums["is_sum"] += float(w.sum())
            sums["is_min"] = min(sums.get("is_min", float("inf")), float(w.min()))
            sums["is_max"] = max(sums.get("is_max", 0.0), float(w.max()))
            sums["is_clipped"] += float(clipped[on].sum())
            sums["is_diff_sum"] += float(diff.sum())
            sums["is_diff_max"] = max(sums.get("is_diff_max", 0.0), float(diff.max()))
        return weights

    def release_gradients(self) -> None:
        """Free the step's gradients (they are not kept through generation) and hand the CUDA
        cache back before the engine wakes."""
        self.optimizer.zero_grad(set_to_none=True)
        release_cached_memory()

    # ------------------------------------------------------------------ log-probs
    def prompt_of(self, sample: Any) -> Sequence[int]:
        """A sample's prompt ids: an episode's own when its environment changed the prompt,
        else its example's."""
        own = getattr(sample.rollout, "prompt_ids", None)
        return own if own is not None else self.prompt_ids[sample.uid]

    def logprobs(self, model: Any, samples: Sequence[Any], rows: list[int], temperature: float):
        """Per-token log-probs and entropies of the rows' completions under ``model``,
        plus the loss mask ([rows, longest completion]). Sequences are right-padded.

        Only completion positions reach the output layer, ``grpo.logits_chunk_tokens`` at
        a time (vigor_cli/train/logprobs.py); 0 there computes the full-vocabulary logits at
        every position, as before."""
        from vigor_cli.train import logprobs

        batch = logprobs.make_batch(
            [self.prompt_of(samples[i]) for i in rows],
            [samples[i].rollout.token_ids for i in rows],
            self.pad_token_id,
            [getattr(samples[i].rollout, "mask", None) for i in rows],
        )
        chunk = self.cfg.grpo.logits_chunk_tokens
        if chunk > 0:
            lp, ent = logprobs.completion_logprobs(model, batch, self.device, temperature, chunk)
        else:
            lp, ent = logprobs.full_logprobs(model, batch, self.device, temperature)
        return lp, ent, batch.mask.to(self.device)

    # ------------------------------------------------------------------ weight check
    def watch_engine(self, engine: Any) -> None:
        """Choose the base model the weight check compares with (None: no check of the base).

        LoRA: the policy with its adapter off (free). Full fine-tuning: the KL
        reference when grpo.beta > 0; otherwise, for an engine that holds its own
        copy of the weights (vLLM), a frozen copy of the starting weights (one
        more copy of the model in memory; engine.weight_check=off avoids it). An
        engine that samples with the policy module itself cannot hold stale
        weights and gets no base copy. Called once the engine exists: the copy
        loads after a vLLM engine has sized itself, and its 'auto' share leaves
        room for it (memory_plan.engine_utilization, :func:`loads_base_copy`).
        """
        from vigor_cli.model.loading import Reference, load_policy

        shares = bool(getattr(engine, "shares_policy", False))
        if self.cfg.grpo.importance_sampling == "auto":
            self.importance_sampling = not shares
        if self.cfg.engine.weight_check == "off":
            self.weight_base = None
        elif self.reference is not None:
            self.weight_base = self.reference
        elif self.cfg.model.lora.enabled:
            self.weight_base = Reference(self.model)
        elif loads_base_copy(self.cfg, shares):
            self.weight_base = Reference(self.model, load_policy(self.cfg.model)[0])
        else:
            self.weight_base = None

    @torch.no_grad()
    def check_engine_weights(self, samples: Sequence[Any], temp: float) -> Any:
        """Score the step's first engine.weight_check_rows completions three ways (engine,
        policy, base) with the weights that sampled them; rows of every advantage count, so
        a step whose groups all tie (garbage weights give all-zero rewards) is checked too."""
        check = WeightCheckSums()
        e = self.cfg.engine
        rows = [i for i, s in enumerate(samples) if s.rollout.token_ids][: e.weight_check_rows]
        if e.weight_check == "off" or not rows:
            return check.result(e.logprob_check_threshold, self.cfg.sampling.top_p)
        lengths = [len(self.prompt_of(samples[i])) + len(samples[i].rollout.token_ids) for i in rows]
        for batch in grpo.token_budget_batches(lengths, self.cfg.grpo.micro_batch_tokens):
            b = [rows[j] for j in batch]
            policy_lp = self.logprobs(self.model, samples, b, temp)[0].float().cpu()
            base_lp = None
            if self.weight_base is not None:
                with self.weight_base.model() as base:
                    base_lp = self.logprobs(base, samples, b, temp)[0].float().cpu()
            for k, i in enumerate(b):
                keep = model_positions(samples[i].rollout)  # an episode: the model's tokens only
                engine = [samples[i].rollout.logprobs[j] for j in keep]
                check.add(engine, policy_lp[k, keep].tolist(), None if base_lp is None else base_lp[k, keep].tolist())
        return check.result(e.logprob_check_threshold, self.cfg.sampling.top_p)
