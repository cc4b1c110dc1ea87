"""The training loop: prompts -> allocation rounds -> rollouts -> rewards -> GRPO update.

Read it top to bottom like CleanRL's ppo.py: :func:`train` sets things up and
runs the loop; :meth:`Trainer.rollout_phase` is the allocation (ask/tell)
part, :meth:`Trainer.update_phase` the GRPO part, the rest is plumbing (run
directory, evaluation, checkpoints, console).

Reproducibility: every random choice is seeded from ``train.seed`` and the
step (data order per epoch, each generate call, allocation), and the model,
optimizer, scheduler, RNG, allocator and data position are checkpointed, so a
run resumed from a checkpoint continues exactly as if never stopped.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vigor_cli import grpo
from vigor_cli.config import RunConfig
from vigor_cli.console import console as default_console
from vigor_cli.errors import UserError
from vigor_cli.evaluation import encode_prompt, evaluate_examples
from vigor_cli.rollout.base import Rollout, SamplingParams
from vigor_cli.rollout.weight_check import EngineWeightsError, WeightCheckSums, judge
from vigor_cli.runs import RunDir, write_json_atomic
from vigor_cli.tasks.base import Example

COMPLETIONS_SHOWN = 4
"""Completions per console table and per completions.jsonl entry."""


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from the base seed and names (step, round, ...): stable across runs."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


# --------------------------------------------------------------------------- data order
class DataOrder:
    """Training prompts in a seeded random order, reshuffled every epoch.

    ``draw(n)`` returns the next ``n`` uids not yet drawn in the current step
    (a prompt is never in a step twice, since allocation keys groups by uid).
    """

    def __init__(self, uids: list[str], seed: int):
        self.uids = uids
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._shuffled(0)
        self._in_step: set[str] = set()

    def _shuffled(self, epoch: int) -> list[str]:
        order = list(self.uids)
        random.Random(derive_seed(self.seed, "data", epoch)).shuffle(order)
        return order

    def new_step(self) -> None:
        self._in_step = set()

    def draw(self, n: int) -> list[str]:
        if len(self._in_step) + n > len(self.uids):
            raise UserError(
                f"a step asked for {len(self._in_step) + n} distinct prompts but the task has "
                f"{len(self.uids)}: lower train.prompts_per_step (or allocation.gen_batch_multiplier "
                "/ max_gen_batches)"
            )
        out: list[str] = []
        while len(out) < n:
            if self.position == len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._shuffled(self.epoch)
            uid = self._order[self.position]
            self.position += 1
            if uid not in self._in_step:
                self._in_step.add(uid)
                out.append(uid)
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._shuffled(self.epoch)


# --------------------------------------------------------------------------- validation
def validate_config(cfg: RunConfig, n_train: int | None = None) -> None:
    """Checks that need no model: each message names the numbers to change. Without
    ``n_train`` (before any data is read) the checks against the task's size are skipped."""
    t, a, s, g = cfg.train, cfg.allocation, cfg.sampling, cfg.grpo
    if n_train is not None and t.prompts_per_step > n_train:
        raise UserError(
            f"train.prompts_per_step ({t.prompts_per_step}) exceeds the {n_train} training "
            f"prompts of task '{cfg.task.name}'"
        )
    if a.strategy in ("vigor", "random", "difficulty"):
        first_round = a.m0 * t.prompts_per_step
        budget = a.budget if a.budget is not None else a.group_size * t.prompts_per_step
        if budget < first_round:
            raise UserError(
                f"allocation.budget ({budget}) is below the first round's allocation.m0 x "
                f"train.prompts_per_step ({a.m0} x {t.prompts_per_step} = {first_round})"
            )
    if a.strategy in ("knapsack", "auto"):
        from vigor_cli.allocation.auto import census_width

        budget = a.budget if a.budget is not None else a.group_size * t.prompts_per_step
        if a.strategy == "knapsack":
            first, what = a.knapsack_min * t.prompts_per_step, (
                f"allocation.knapsack_min x train.prompts_per_step ({a.knapsack_min} x {t.prompts_per_step}")
        else:
            width = census_width(a.auto_width, t.prompts_per_step)
            first, what = a.auto_census * width, (
                f"allocation.auto_census x ceil(allocation.auto_width x train.prompts_per_step) "
                f"({a.auto_census} x {width}")
            if n_train is not None and width > n_train:
                raise UserError(
                    f"auto's census of ceil(allocation.auto_width x train.prompts_per_step) = {width} "
                    f"prompts exceeds the {n_train} training prompts"
                )
        if budget < first:
            raise UserError(f"allocation.budget ({budget}) is below the first round's {what} = {first})")
    if (n_train is not None and a.strategy == "dapo"
            and math.ceil(a.gen_batch_multiplier * t.prompts_per_step) > n_train):
        raise UserError(
            f"allocation.gen_batch_multiplier x train.prompts_per_step ({a.gen_batch_multiplier} x "
            f"{t.prompts_per_step}) exceeds the {n_train} training prompts"
        )
    if g.micro_batch_tokens < s.max_new_tokens:
        raise UserError(
            f"grpo.micro_batch_tokens ({g.micro_batch_tokens}) must be at least "
            f"sampling.max_new_tokens ({s.max_new_tokens})"
        )
    if cfg.engine.gen_batch_tokens < cfg.task.max_prompt_tokens + s.max_new_tokens:
        raise UserError(
            f"engine.gen_batch_tokens ({cfg.engine.gen_batch_tokens}) must hold one row: "
            f"task.max_prompt_tokens + sampling.max_new_tokens ({cfg.task.max_prompt_tokens} + "
            f"{s.max_new_tokens})"
        )
    e = cfg.engine
    if e.max_model_len is not None and e.max_model_len < cfg.task.max_prompt_tokens + s.max_new_tokens:
        raise UserError(
            f"engine.max_model_len ({e.max_model_len}) must hold task.max_prompt_tokens + "
            f"sampling.max_new_tokens ({cfg.task.max_prompt_tokens} + {s.max_new_tokens})"
        )
    if g.epsilon >= 1:
        raise UserError(f"grpo.epsilon ({g.epsilon}) must be below 1 (the ratio's lower clip is 1 - epsilon)")


# --------------------------------------------------------------------------- memory
def announce_memory_plan(cfg: RunConfig, out: Any) -> Any:
    """Print the memory plan (vigor_cli/memory_plan.py) and refuse, exit 2, when it cannot fit."""
    from vigor_cli import memory_plan

    plan = memory_plan.plan_run(cfg)
    out.print(memory_plan.render(plan))
    memory_plan.check(plan)
    return plan


def release_cached_memory() -> None:
    """Return the CUDA blocks PyTorch's allocator cached during the update: the colocated vLLM
    engine allocates its weights and KV cache outside that cache when it wakes."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- one step's data
@dataclass
class Sample:
    """One rollout with everything the update and the logs need."""

    uid: str
    rollout: Rollout
    reward: float
    reason: str
    round: int
    advantage: float = 0.0


@dataclass
class StepLog:
    """What a step measured; becomes one metrics.jsonl line."""

    metrics: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    record: dict = field(default_factory=dict)


class Trainer:
    """Holds the run's state; :func:`train` builds one and calls :meth:`run`."""

    def __init__(self, cfg: RunConfig, run: RunDir, resume_from: Path | None, out: Any):
        from vigor_cli.allocation import make_allocator
        from vigor_cli.models import Reference, load_policy, trainable_parameters
        from vigor_cli.rollout import make_engine
        from vigor_cli.tasks import get_task

        self.cfg, self.rundir, self.out = cfg, run, out
        t = cfg.train
        torch.manual_seed(t.seed)  # LoRA init and anything else that draws at setup

        # ---- every check that needs no download first (vigor_cli/preflight.py)
        from vigor_cli.models import load_tokenizer
        from vigor_cli.preflight import check_static, check_tokenizer

        check_static(cfg)
        # The plan reads the model's config.json (a small download for a hub id); it refuses a
        # run that cannot fit before any weights load.
        self.memory_plan = announce_memory_plan(cfg, out)

        # ---- task and data, training and evaluation sets, before the model downloads
        self.task = get_task(cfg.task, workers=t.reward_workers)
        train_examples = self.task.train_examples()
        validate_config(cfg, len(train_examples))
        eval_limit = t.eval_limit
        self.eval_sets: dict[str, list[Example]] = {}
        for name in cfg.task.eval_sets or [None]:
            exs = self.task.eval_examples(name)
            self.eval_sets[name or cfg.task.name] = exs[:eval_limit] if eval_limit else exs

        # ---- tokenizer (small), its checks and the prompts, before the weights
        self.tokenizer = load_tokenizer(cfg.model)
        check_tokenizer(cfg, self.tokenizer, warn=lambda m: out.print(m))
        self.examples: dict[str, Example] = {}
        self.prompt_ids: dict[str, list[int]] = {}
        dropped = 0
        for ex in train_examples:
            ids = encode_prompt(self.tokenizer, self.task.render_prompt(ex, self.tokenizer))
            if len(ids) > cfg.task.max_prompt_tokens:
                dropped += 1
                continue
            self.examples[ex.uid] = ex
            self.prompt_ids[ex.uid] = ids
        if dropped:
            out.print(f"[yellow]dropped {dropped} training prompts longer than task.max_prompt_tokens={cfg.task.max_prompt_tokens}[/]")
        if len(self.examples) < t.prompts_per_step:
            raise UserError(
                f"only {len(self.examples)} training prompts fit task.max_prompt_tokens="
                f"{cfg.task.max_prompt_tokens}; raise it or lower train.prompts_per_step ({t.prompts_per_step})"
            )
        self.data = DataOrder(list(self.examples), t.seed)

        # ---- policy, reference, engine
        self.model, _, self.device = load_policy(cfg.model, str(resume_from) if resume_from else None)
        self.reference = None
        if cfg.grpo.beta > 0:
            if cfg.model.lora.enabled:
                self.reference = Reference(self.model)
            else:
                self.reference = Reference(self.model, load_policy(cfg.model)[0])
        self.engine = make_engine(cfg, self.model, self.tokenizer, announce=lambda m: out.print(m))
        self.weight_base = self._weight_check_base()
        self.weight_check = judge(0.0, 0.0, 0.0, 0, cfg.engine.logprob_check_threshold)
        self._last_check_status = ""

        # ---- allocation and optimisation
        try:
            self.allocator = make_allocator(cfg.allocation, t.prompts_per_step, t.seed)
        except ValueError as e:
            raise UserError(str(e)) from None
        self.trainable = trainable_parameters(self.model)
        self.optimizer = torch.optim.AdamW(
            self.trainable, lr=cfg.grpo.learning_rate, weight_decay=cfg.grpo.weight_decay
        )
        warmup = cfg.grpo.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
        )

        self.dedupe_scoring = True
        """Grade each distinct (prompt, completion) of a step once (see _score); the timing
        bench turns it off to measure what it saves."""

        # ---- counters (checkpointed)
        self.step = 0
        self.rollouts_total = 0
        self.tokens_total = 0
        self.elapsed_before = 0.0
        self.start_accuracy: float | None = None
        self.last_accuracy: float | None = None
        if resume_from is not None:
            self._load_checkpoint(resume_from)
        self.session_start = time.time()

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict:
        t = self.cfg.train
        if self.step == 0:
            self.start_accuracy = self.last_accuracy = self.evaluate(0)
        with _progress(self.out) as progress:
            bar = progress.add_task("train", total=t.steps, completed=self.step, info="")
            while self.step < t.steps:
                self.step += 1
                log = self.train_step(self.step)
                self._write_step(log)
                if t.eval_every and self.step % t.eval_every == 0 and self.step < t.steps:
                    self.last_accuracy = self.evaluate(self.step)
                if t.save_every and self.step % t.save_every == 0 and self.step < t.steps:
                    self.save_checkpoint()
                m = log.metrics
                progress.update(
                    bar,
                    completed=self.step,
                    info=f"reward {m['reward/mean']:.3f}  acc {self.last_accuracy or 0:.3f}  "
                    f"rollouts {self.rollouts_total}",
                )
        final = self.evaluate(self.step) if self.step > 0 and not self._has_eval(self.step) else self.last_accuracy
        self.last_accuracy = final
        self.save_checkpoint()
        summary = {
            "run_dir": str(self.rundir.path),
            "start_accuracy": self.start_accuracy,
            "final_accuracy": final,
            "steps": self.step,
            "rollouts": self.rollouts_total,
            "tokens": self.tokens_total,
            "wall_time": self.elapsed(),
        }
        self.rundir.write_summary(summary)
        self.task.close()
        self.engine.close()
        return summary

    def train_step(self, step: int) -> StepLog:
        t0 = time.time()
        samples, record, t_gen, t_reward, rollouts = self.rollout_phase(step)
        t1 = time.time()
        update_metrics = self.update_phase(samples)
        self.optimizer.zero_grad(set_to_none=True)  # gradients are not kept through generation
        release_cached_memory()  # the engine wakes next: hand it what the update's activations held
        self.engine.sync_weights(self.model)
        t2 = time.time()

        every = rollouts
        rewards = torch.tensor([s.reward for s in every], dtype=torch.float64)
        lengths = [len(s.rollout.token_ids) for s in every]
        tokens = sum(lengths)
        self.rollouts_total += len(every)
        self.tokens_total += tokens
        groups: dict[str, list[float]] = defaultdict(list)
        for s in samples:
            groups[s.uid].append(s.reward)
        zero_var = sum(1 for r in groups.values() if max(r) == min(r))
        metrics = {
            "step": step,
            "rollouts/step": len(every),
            "rollouts/cumulative": self.rollouts_total,
            "tokens/step": tokens,
            "tokens/cumulative": self.tokens_total,
            "reward/mean": float(rewards.mean()) if len(every) else 0.0,
            "reward/std": float(rewards.std(unbiased=False)) if len(every) else 0.0,
            "groups/count": len(groups),
            "groups/zero_var_frac": zero_var / len(groups) if groups else 0.0,
            "completions/mean_length": tokens / len(every) if every else 0.0,
            "completions/max_length": max(lengths, default=0),
            "completions/truncated_frac": sum(s.rollout.truncated for s in every) / len(every) if every else 0.0,
            **update_metrics,
            "time/generate": t_gen,
            "time/reward": t_reward,
            "time/update": t2 - t1,
            "time/step": time.time() - t0,
            "time/elapsed": 0.0,  # filled when written
        }
        record = {"step": step, **record}
        for entry in record.get("prompts", []):
            entry["text"] = self.examples[entry["uid"]].question[:200]
        return StepLog(metrics=metrics, samples=samples, record=record)

    # ------------------------------------------------------------------ allocation rounds
    def rollout_phase(self, step: int):
        """Ask the allocator for rollouts round by round, generate and score them, tell it
        the rewards; return the samples the update uses and every rollout generated."""
        cfg = self.cfg
        self.data.new_step()
        self.allocator.start_step(step, self.data.draw)
        pool: dict[str, list[Sample]] = defaultdict(list)
        graded: dict[tuple[str, str], Any] = {}  # (uid, completion text) -> its Score, this step
        t_gen = t_reward = 0.0
        round_index = 0
        while requests := self.allocator.ask():
            params = SamplingParams(
                temperature=cfg.sampling.temperature,
                top_p=cfg.sampling.top_p,
                max_new_tokens=cfg.sampling.max_new_tokens,
                seed=derive_seed(cfg.train.seed, "rollout", step, round_index),
            )
            t0 = time.time()
            outs = self.engine.generate([self.prompt_ids[r.uid] for r in requests], [r.n for r in requests], params)
            t1 = time.time()
            flat = [(r.uid, ro) for r, ros in zip(requests, outs) for ro in ros]
            scores = self._score(flat, graded)
            t_reward += time.time() - t1
            t_gen += t1 - t0
            told: dict[str, list[float]] = defaultdict(list)
            for (uid, ro), sc in zip(flat, scores):
                pool[uid].append(Sample(uid, ro, float(sc.reward), sc.reason, round_index))
                told[uid].append(float(sc.reward))
            self.allocator.tell({r.uid: told[r.uid] for r in requests})
            round_index += 1
        self.engine.end_generation()  # vLLM frees the GPU for the update
        result = self.allocator.finish()
        samples = [pool[uid][i] for uid, indices in result.groups.items() for i in indices]
        advantages = grpo.compute_advantages([s.reward for s in samples], [s.uid for s in samples], cfg.grpo.scale_rewards)
        for s, a in zip(samples, advantages.tolist()):
            s.advantage = a
        every = [s for group in pool.values() for s in group]
        return samples, result.record, t_gen, t_reward, every

    def _score(self, flat: list[tuple[str, Rollout]], graded: dict[tuple[str, Any], Any]) -> list:
        """Scores of (uid, rollout) pairs. A reward is a function of the example and the
        completion text alone, so each distinct (uid, text) of the step is graded once
        (``graded`` carries them across the step's rounds): sampled completions repeat
        often, more so when a strategy gives one prompt many rollouts, and each repeat
        would cost a verifier call (a sandbox run for code)."""
        if not self.dedupe_scoring:
            return self.task.score([self.examples[u] for u, _ in flat], [ro.text for _, ro in flat])
        keys = [(uid, ro.text) for uid, ro in flat]
        new = list(dict.fromkeys(k for k in keys if k not in graded))
        if new:
            graded.update(zip(new, self.task.score([self.examples[u] for u, _ in new], [t for _, t in new])))
        return [graded[k] for k in keys]

    # ------------------------------------------------------------------ GRPO update
    def update_phase(self, samples: list[Sample]) -> dict[str, float]:
        """mu passes of the clipped GRPO loss over the step's samples, in token-budget
        micro-batches whose gradients add up to the whole step's gradient."""
        g, temp = self.cfg.grpo, self.cfg.sampling.temperature or 1.0
        masks = [0.0 if (g.mask_truncated and s.rollout.truncated) else 1.0 for s in samples]
        totals = grpo.step_totals(
            [s.uid for s in samples], [len(s.rollout.token_ids) for s in samples], masks,
            self.cfg.sampling.max_new_tokens,
        )
        # Rows with zero advantage (or masked out) add exactly zero loss and gradient when
        # there is no KL term: skip their forward pass but keep them in the normalisers.
        rows = [
            i for i, s in enumerate(samples)
            if masks[i] and s.rollout.token_ids and (s.advantage != 0.0 or g.beta > 0)
        ]
        lengths = [len(self.prompt_ids[samples[i].uid]) + len(samples[i].rollout.token_ids) for i in rows]
        batches = [[rows[j] for j in b] for b in grpo.token_budget_batches(lengths, g.micro_batch_tokens)]

        # Before any optimizer step: do the engine's log-probs track these weights?
        self.weight_check = self._check_engine_weights(samples, temp)

        # Pass 0's log-probs are the "old" policy of every later pass (mu > 1), and the
        # reference's log-probs do not change between passes: both are computed once.
        old_cache: dict[int, torch.Tensor] = {}
        ref_cache: dict[int, torch.Tensor] = {}
        lr = self.scheduler.get_last_lr()[0]  # the rate this step's update uses

        sums = defaultdict(float)
        counted = 0.0
        grad_norm = 0.0
        for pass_index in range(g.mu):
            self.optimizer.zero_grad(set_to_none=True)
            for bi, b in enumerate(batches):
                lp, ent, mask = self._logprobs(self.model, samples, b, temp)
                adv = torch.tensor([samples[i].advantage for i in b], dtype=lp.dtype, device=lp.device)
                old = old_cache.setdefault(bi, lp.detach())
                tok_loss, low, high = grpo.clipped_policy_loss(lp, old, adv, g.epsilon, g.epsilon_high)
                kl = None
                if self.reference is not None:
                    if bi not in ref_cache:
                        with torch.no_grad(), self.reference.model() as ref:
                            ref_cache[bi] = self._logprobs(ref, samples, b, temp)[0]
                    kl = grpo.kl_k3(lp, ref_cache[bi])
                    tok_loss = tok_loss + g.beta * kl
                loss = grpo.aggregate(tok_loss, mask, totals, g.loss_agg, rows=b)
                loss.backward()
                if pass_index == 0:
                    n = float(mask.sum())
                    counted += n
                    sums["loss"] += float(loss.detach())
                    sums["clip_low"] += float((low.float() * mask).sum())
                    sums["clip_high"] += float((high.float() * mask).sum())
                    sums["entropy"] += float((ent * mask).sum())
                    if kl is not None:
                        sums["kl"] += float((kl.detach() * mask).sum())
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, g.max_grad_norm))
            self.optimizer.step()
        self.scheduler.step()
        denom = max(counted, 1.0)
        out = {
            "losses/loss": sums["loss"],
            "losses/clipfrac_low": sums["clip_low"] / denom,
            "losses/clipfrac_high": sums["clip_high"] / denom,
            "losses/kl": sums["kl"] / denom,
            "losses/entropy": sums["entropy"] / denom,
            "losses/grad_norm": grad_norm,
            **self.weight_check.metrics(),
            "lr": lr,
        }
        return out

    # ------------------------------------------------------------------ weight check
    def _weight_check_base(self) -> Any:
        """The base model the weight check compares with (None: no check of the base).

        LoRA: the policy with its adapter off (free). Full fine-tuning: the KL
        reference when grpo.beta > 0; otherwise, for an engine that holds its own
        copy of the weights (vLLM), a frozen copy of the starting weights (one
        more copy of the model in memory; engine.weight_check=off avoids it). An
        engine that samples with the policy module itself cannot hold stale
        weights and gets no base copy.
        """
        from vigor_cli.models import Reference, load_policy

        if self.cfg.engine.weight_check == "off":
            return None
        if self.reference is not None:
            return self.reference
        if self.cfg.model.lora.enabled:
            return Reference(self.model)
        if getattr(self.engine, "shares_policy", False):
            return None
        return Reference(self.model, load_policy(self.cfg.model)[0])

    @torch.no_grad()
    def _check_engine_weights(self, samples: list[Sample], temp: float) -> Any:
        """Score the step's first engine.weight_check_rows completions three ways (engine,
        policy, base) with the weights that sampled them; rows of every advantage count, so
        a step whose groups all tie (garbage weights give all-zero rewards) is checked too."""
        check = WeightCheckSums()
        rows = [i for i, s in enumerate(samples) if s.rollout.token_ids][: self.cfg.engine.weight_check_rows]
        if self.cfg.engine.weight_check == "off" or not rows:
            return check.result(self.cfg.engine.logprob_check_threshold, self.cfg.sampling.top_p)
        lengths = [len(self.prompt_ids[samples[i].uid]) + len(samples[i].rollout.token_ids) for i in rows]
        for batch in grpo.token_budget_batches(lengths, self.cfg.grpo.micro_batch_tokens):
            b = [rows[j] for j in batch]
            policy_lp = self._logprobs(self.model, samples, b, temp)[0].float().cpu()
            base_lp = None
            if self.weight_base is not None:
                with self.weight_base.model() as base:
                    base_lp = self._logprobs(base, samples, b, temp)[0].float().cpu()
            for k, i in enumerate(b):
                engine = samples[i].rollout.logprobs
                n = len(engine)
                check.add(engine, policy_lp[k, :n].tolist(), None if base_lp is None else base_lp[k, :n].tolist())
        return check.result(self.cfg.engine.logprob_check_threshold, self.cfg.sampling.top_p)

    def _logprobs(self, model: Any, samples: list[Sample], rows: list[int], temperature: float):
        """Per-token log-probs and entropies of the rows' completions under ``model``,
        plus the loss mask ([rows, longest completion]). Sequences are right-padded.

        Only completion positions reach the output layer, ``grpo.logits_chunk_tokens`` at
        a time (vigor_cli/logprobs.py); 0 there computes the full-vocabulary logits at
        every position, as before."""
        from vigor_cli import logprobs

        batch = logprobs.make_batch(
            [self.prompt_ids[samples[i].uid] for i in rows],
            [samples[i].rollout.token_ids for i in rows],
            self.tokenizer.pad_token_id or 0,
        )
        chunk = self.cfg.grpo.logits_chunk_tokens
        if chunk > 0:
            lp, ent = logprobs.completion_logprobs(model, batch, self.device, temperature, chunk)
        else:
            lp, ent = logprobs.full_logprobs(model, batch, self.device, temperature)
        return lp, ent, batch.mask.to(self.device)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, step: int) -> float:
        t = self.cfg.train
        params = SamplingParams(
            temperature=t.eval_temperature,
            top_p=self.cfg.sampling.top_p if t.eval_temperature > 0 else 1.0,
            max_new_tokens=self.cfg.sampling.max_new_tokens,
            seed=derive_seed(t.seed, "eval", step),
        )
        results = {
            name: evaluate_examples(self.engine, self.task, self.tokenizer, exs, t.eval_samples, params, name)
            for name, exs in self.eval_sets.items()
        }
        self.engine.end_generation()
        accuracy = sum(r.accuracy for r in results.values()) / len(results)
        self.rundir.write_eval(step, {"step": step, "accuracy": accuracy, "sets": {n: r.to_json() for n, r in results.items()}})
        line = {
            "step": step,
            "eval/accuracy": accuracy,
            **{f"eval/{n}/accuracy": r.accuracy for n, r in results.items()},
            "eval/samples": sum(len(r.samples) for r in results.values()),
            "rollouts/cumulative": self.rollouts_total,
            "tokens/cumulative": self.tokens_total,
            "time/elapsed": self.elapsed(),
        }
        self.rundir.append("metrics.jsonl", line)
        sets = "  ".join(f"{n} {r.accuracy:.3f}" for n, r in results.items())
        self.out.print(f"[bold]eval[/] step {step}: accuracy {accuracy:.3f} ({sets})", highlight=False)
        return accuracy

    def _has_eval(self, step: int) -> bool:
        return (self.rundir.eval_dir / f"step-{step}.json").exists()

    # ------------------------------------------------------------------ logging
    def elapsed(self) -> float:
        return self.elapsed_before + (time.time() - self.session_start)

    def _write_step(self, log: StepLog) -> None:
        m = log.metrics
        m["time/elapsed"] = self.elapsed()
        self.rundir.append("metrics.jsonl", m)
        self.rundir.append("allocation.jsonl", log.record)
        self._report_weight_check(m["step"])
        self.out.print(
            f"step {m['step']:>4}  reward {m['reward/mean']:.3f}  zero-var {m['groups/zero_var_frac']:.2f}  "
            f"rollouts {m['rollouts/step']} ({m['rollouts/cumulative']})  len {m['completions/mean_length']:.1f}  "
            f"loss {m['losses/loss']:+.4f}  clip {m['losses/clipfrac_low'] + m['losses/clipfrac_high']:.3f}  "
            f"gen {m['time/generate']:.1f}s rew {m['time/reward']:.1f}s upd {m['time/update']:.1f}s",
            highlight=False,
        )
        every = self.cfg.train.log_completions_every
        if every and m["step"] % every == 0 and log.samples:
            shown = log.samples[:: max(1, len(log.samples) // COMPLETIONS_SHOWN)][:COMPLETIONS_SHOWN]
            self.rundir.append_many(
                "completions.jsonl",
                (
                    {"step": m["step"], "uid": s.uid, "prompt": self.examples[s.uid].question,
                     "text": s.rollout.text, "reward": s.reward, "reason": s.reason, "advantage": s.advantage}
                    for s in shown
                ),
            )
            self.out.print(_completions_table(m["step"], shown, self.examples))

    def _report_weight_check(self, step: int) -> None:
        """Stop (engine.weight_check=error) or warn when the check failed; say when it changes."""
        wc = self.weight_check
        if wc.failed:
            if self.cfg.engine.weight_check == "error":
                raise EngineWeightsError(
                    f"step {step}: {wc.describe()}; training stopped (metrics.jsonl has the step; "
                    "engine.weight_check=warn continues anyway)"
                )
            self.out.print(f"[bold red]warning: step {step}: {wc.describe()}[/]", highlight=False)
        elif wc.status != self._last_check_status and wc.status not in ("no-tokens", "unchecked"):
            self.out.print(f"[dim]weight check, step {step}: {wc.describe()}[/]", highlight=False)
        self._last_check_status = wc.status

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-N`` (vigor_cli/runs.py seals it with a manifest and
        rotates old ones); a full disk is one line and leaves earlier checkpoints intact."""
        from vigor_cli.config import dump_config
        from vigor_cli.models import save_policy
        from vigor_cli.runs import disk_full, is_disk_full, write_text_atomic

        tmp = self.rundir.begin_checkpoint(self.step)
        try:
            save_policy(self.model, self.tokenizer, tmp)
            with open(tmp / "trainer_state.pt", "wb") as f:  # a file object: ENOSPC stays visible
                torch.save(
                    {
                        "optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict(),
                        "torch_rng": torch.get_rng_state(),
                        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                    },
                    f,
                )
            write_json_atomic(tmp / "allocator.json", self.allocator.state_dict())
            write_json_atomic(tmp / "data_state.json", self._data_state())
            write_text_atomic(tmp / "config.yaml", dump_config(self.cfg))  # checked on resume
        except BaseException as e:
            self.rundir.discard_checkpoint(tmp)
            if isinstance(e, Exception) and not isinstance(e, UserError) and is_disk_full(e, tmp):
                raise disk_full(tmp) from None
            raise
        return self.rundir.commit_checkpoint(tmp, self.step, self.cfg.train.keep_checkpoints)

    def _data_state(self) -> dict:
        return {
            "step": self.step,
            "data": self.data.state_dict(),
            "rollouts_cumulative": self.rollouts_total,
            "tokens_cumulative": self.tokens_total,
            "elapsed": self.elapsed(),
            "start_accuracy": self.start_accuracy,
            "last_accuracy": self.last_accuracy,
        }

    def _load_checkpoint(self, path: Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote (resume verified ``path`` first)."""
        import json

        try:
            state = torch.load(path / "trainer_state.pt", weights_only=True)
            allocator = json.loads((path / "allocator.json").read_text())
            data = json.loads((path / "data_state.json").read_text())
        except (OSError, RuntimeError, ValueError, EOFError) as e:  # a checkpoint without manifest
            raise UserError(f"--resume: checkpoint {path} is damaged ({str(e).splitlines()[0]}); "
                            f"delete {path} to resume from the one before") from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self.allocator.load_state_dict(allocator)
        self.data.load_state_dict(data["data"])
        self.step = int(data["step"])
        self.rollouts_total = int(data["rollouts_cumulative"])
        self.tokens_total = int(data["tokens_cumulative"])
        self.elapsed_before = float(data["elapsed"])
        self.start_accuracy = data["start_accuracy"]
        self.last_accuracy = data["last_accuracy"]


def _completions_table(step: int, samples: list[Sample], examples: dict[str, Example]):
    from rich.table import Table

    table = Table(title=f"completions at step {step}", show_lines=True, expand=True)
    table.add_column("prompt", ratio=3)
    table.add_column("completion", ratio=4)
    table.add_column("reward", justify="right")
    table.add_column("advantage", justify="right")
    for s in samples:
        table.add_row(
            examples[s.uid].question[-300:], s.rollout.text[:400], f"{s.reward:.2f}", f"{s.advantage:+.3f}"
        )
    return table


def _progress(out: Any):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=out,
        transient=False,
    )


# --------------------------------------------------------------------------- entry point
def train(cfg: RunConfig | None = None, resume: str | Path | None = None, out: Any = None,
          steps: int | None = None) -> dict:
    """Run (or resume) training; returns the summary (also in ``summary.json``).

    ``resume`` is a run directory: its saved config is used (``steps`` may extend it)
    and training continues from its newest intact checkpoint. The run directory is
    claimed (and its lock held) before anything slow, and released when training ends.
    """
    out = out or default_console
    if resume is not None:
        run, trainer = _resume(Path(resume), steps, out)
    else:
        assert cfg is not None
        run = RunDir.planned(cfg, announce=out.print)  # claims a fresh directory and its lock
        try:
            trainer = Trainer(cfg, run, None, out)  # validates the config, loads model and data
            run.make(cfg)
        except BaseException:
            run.abandon()  # a run that never started leaves no directory behind
            raise
    out.print(f"run directory: {run.path}")
    try:
        return trainer.run()
    finally:
        run.release()


def _resume(path: Path, steps: int | None, out: Any) -> tuple[RunDir, "Trainer"]:
    """Lock the run, pick its newest intact checkpoint, check config and logs, then load."""
    from vigor_cli.config import build_config
    from vigor_cli.runs import check_resume_config

    def warn(message: str) -> None:
        out.print(f"[yellow]warning:[/] {message}", highlight=False)

    run = RunDir.open_existing(path).acquire()  # refuses a run another process has
    try:
        cfg = build_config(run.path / "config.yaml")
        checkpoint = run.intact_checkpoint(warn)
        check_resume_config(run, cfg, checkpoint, steps, warn)
        at = run.checkpoint_step(checkpoint)
        run.keep_logs_until(at, warn, dry_run=True)  # damaged lines refuse before the model loads
        if steps is not None:
            cfg.train.steps = steps
        trainer = Trainer(cfg, run, checkpoint, out)
        run.keep_logs_until(at, warn)
        run.write_config(cfg)
    except BaseException:
        run.release()
        raise
    out.print(f"resuming {run.path} from {checkpoint or 'the start (no checkpoint yet)'}")
    return run, trainer
