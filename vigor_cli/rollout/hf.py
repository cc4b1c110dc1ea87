"""The transformers rollout engine: samples from the policy module itself.

Details: docs/modules.md.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch

from vigor_cli.rollout.base import Rollout, RolloutEngine, SamplingParams
from vigor_cli.rollout.sampler import Sampler
from vigor_cli.rollout.weights import stop_token_ids


def _cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument and output: 'cache' in transformers >= 5.2x,
    'past_key_values' before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


class HFEngine(RolloutEngine):
    """Batched sampling with a transformers causal LM (the policy itself, or a peft wrapper)."""

    name = "hf"
    shares_policy = True

    def __init__(self, model: Any, tokenizer: Any, gen_batch_tokens: int = 16384):
        self.model = model
        self.tokenizer = tokenizer
        self.gen_batch_tokens = gen_batch_tokens
        self.eos_ids = stop_token_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0))
        self.cache_kwarg = _cache_kwarg(model)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        counts: Sequence[int],
        sampling: SamplingParams,
    ) -> list[list[Rollout]]:
        rows = [i for i, c in enumerate(counts) for _ in range(c)]
        sampler = Sampler(sampling.temperature, sampling.top_p, sampling.seed, self._device())
        # Longest prompts first so that a batch's padding is small; results go back in order.
        order = sorted(range(len(rows)), key=lambda k: -len(prompts[rows[k]]))
        results: list[Rollout | None] = [None] * len(rows)
        start = 0
        while start < len(order):
            width = len(prompts[rows[order[start]]]) + sampling.max_new_tokens
            n_rows = max(1, self.gen_batch_tokens // width)
            chunk = order[start : start + n_rows]
            start += len(chunk)
            outs = self._generate_rows([prompts[rows[k]] for k in chunk], sampling.max_new_tokens, sampler)
            for k, out in zip(chunk, outs):
                results[k] = out
            if self.progress is not None:
                self.progress(start)
        grouped: list[list[Rollout]] = [[] for _ in counts]
        for k, prompt_index in enumerate(rows):
            grouped[prompt_index].append(results[k])  # type: ignore[arg-type]
        return grouped

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def _generate_rows(self, prompts: list[Sequence[int]], max_new_tokens: int, sampler: Sampler) -> list[Rollout]:
        device = self._device()
        was_training = self.model.training
        self.model.eval()
        try:
            longest = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), longest), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(prompts), longest), dtype=torch.long)
            for i, p in enumerate(prompts):
                ids[i, longest - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
                mask[i, longest - len(p) :] = 1
            ids, mask = ids.to(device), mask.to(device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            eos = torch.as_tensor(self.eos_ids or [-1], device=device)

            tokens, logprobs = [], []
            done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
            past = None
            step_ids, step_pos = ids, positions
            for _ in range(max_new_tokens):
                out = self.model(
                    input_ids=step_ids,
                    attention_mask=mask,
                    position_ids=step_pos,
                    use_cache=True,
                    logits_to_keep=1,
                    **({self.cache_kwarg: past} if past is not None else {}),
                )
                past = out[self.cache_kwarg]
                logits = sampler.scale(out.logits[:, -1, :])
                logp_all = torch.log_softmax(logits, dim=-1)
                nxt = sampler.draw(logits)
                nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)
                tokens.append(nxt)
                logprobs.append(logp_all.gather(-1, nxt.unsqueeze(-1)).squeeze(-1))
                finished_now = torch.isin(nxt, eos) & ~done
                done = done | finished_now
                if bool(done.all()):
                    break
                step_ids = nxt.unsqueeze(-1)
                step_pos = step_pos[:, -1:] + 1
                mask = torch.cat([mask, (~done | finished_now).long().unsqueeze(-1)], dim=-1)

            token_mat = torch.stack(tokens, dim=1).cpu().tolist()
            logp_mat = torch.stack(logprobs, dim=1).cpu().tolist()
        finally:
            self.model.train(was_training)

        rollouts = []
        eos_set = set(self.eos_ids)
        for row in range(len(prompts)):
            row_ids, row_lp = [], []
            stopped = False
            for tok, lp in zip(token_mat[row], logp_mat[row]):
                row_ids.append(tok)
                row_lp.append(lp)
                if tok in eos_set:
                    stopped = True
                    break
            text = self.tokenizer.decode(row_ids, skip_special_tokens=True)
            rollouts.append(Rollout(token_ids=row_ids, logprobs=row_lp, text=text, truncated=not stopped))
        return rollouts
