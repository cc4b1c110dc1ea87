"""The training loop: prompts -> allocation rounds -> rollouts -> rewards -> GRPO update.

Read it top to bottom like CleanRL's ppo.py: :func:`train` sets things up and
runs the loop; :meth:`Trainer.rollout_phase` is the allocation (ask/tell)
part, :meth:`Trainer.train_step` hands its samples to the
:class:`~vigor_cli.learner.Learner` (policy, optimizer, the GRPO update), the
rest is plumbing (stopping, run directory, evaluation, checkpoints, console).

Reproducibility: every random choice is seeded from ``train.seed`` and the
step (data order per epoch, each generate call, allocation), and the model,
optimizer, scheduler, RNG, allocator and data position are checkpointed, so a
run resumed from a checkpoint continues exactly as if never stopped.
"""

from __future__ import annotations

import hashlib
import random
import shlex
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vigor_cli import grpo
from vigor_cli.config import RunConfig
from vigor_cli.settings import check_against_data
from vigor_cli.console import console as default_console
from vigor_cli.errors import UserError
from vigor_cli.evaluation import encode_prompt, evaluate_examples
from vigor_cli.interrupt import StopSignals, TrainingInterrupted
from vigor_cli.learner import Learner
from vigor_cli.rollout.base import Rollout, SamplingParams
from vigor_cli.rollout.weight_check import EngineWeightsError
from vigor_cli.runs import RunDir, write_json_atomic
from vigor_cli.tracking import Trackers
from vigor_cli.tasks.base import Example, score_once

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
    """The config's rules live in vigor_cli/config.py (checked when it is built); here only
    the ones that need the task's training-set size, once it is known."""
    if n_train is not None:
        check_against_data(cfg, n_train)


# --------------------------------------------------------------------------- memory
def announce_memory_plan(cfg: RunConfig, out: Any) -> Any:
    """Print the memory plan (vigor_cli/memory_plan.py) and refuse, exit 2, when it cannot fit."""
    from vigor_cli import memory_plan

    plan = memory_plan.plan_run(cfg)
    out.print(memory_plan.render(plan))
    memory_plan.check(plan)
    return plan



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
class RolloutBatch:
    """What a step's allocation rounds produced (:meth:`Trainer.rollout_phase`)."""

    samples: list[Sample]
    """The groups the allocator kept for the update, advantages set."""
    generated: list[Sample]
    """Every rollout generated this step (all are counted and logged, kept or not)."""
    record: dict
    """The allocator's record of the step (a line of allocation.jsonl)."""
    generate_seconds: float = 0.0
    reward_seconds: float = 0.0


@dataclass
class StepLog:
    """What a step measured; becomes one metrics.jsonl line."""

    metrics: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    record: dict = field(default_factory=dict)


class Trainer:
    """The loop: data order, rollout engine, allocation, rewards, logging, evaluation and
    checkpoint cadence around a :class:`~vigor_cli.learner.Learner` (policy, optimizer,
    update). :func:`train` builds one and calls :meth:`run`."""

    def __init__(self, cfg: RunConfig, run: RunDir, resume_from: Path | None, out: Any,
                 signals: StopSignals | None = None):
        from vigor_cli.rollout import make_engine

        self.cfg, self.rundir, self.out = cfg, run, out
        self.signals = signals or StopSignals()
        """SIGINT/SIGTERM as the loop sees them (vigor_cli/interrupt.py); a bare one never fires."""
        self.task: Any = None
        self.engine: Any = None
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
        torch.manual_seed(cfg.train.seed)  # LoRA init and anything else that draws at setup
        self.trackers = Trackers(cfg.train.report_to, run.path, run.name, cfg.model_dump(mode="json"),
                                 announce=out.print)  # dashboards (vigor_cli/tracking.py)
        try:
            self._load_data()
            self.learner = Learner(cfg, self.tokenizer.pad_token_id, self.prompt_ids, resume_from)
            self.engine = make_engine(cfg, self.learner.model, self.tokenizer, announce=lambda m: out.print(m))
            self.learner.watch_engine(self.engine)
            self._last_check_status = ""
            self.allocator = self._make_allocator()
            if resume_from is not None:
                self._load_checkpoint(resume_from)
        except BaseException as e:
            self.close()  # reward workers already started
            if isinstance(e, TrainingInterrupted):
                e.status = self.stop_status(e.signal_name, loading=True)
            raise
        self.session_start = time.time()

    def _load_data(self) -> None:
        """Every check that needs no download (vigor_cli/preflight.py), the memory plan, the
        task's training and evaluation sets and the tokenizer, all before any weights load."""
        from vigor_cli.models import load_tokenizer
        from vigor_cli.preflight import check_static, check_tokenizer
        from vigor_cli.tasks import get_task

        cfg, t = self.cfg, self.cfg.train
        check_static(cfg)
        # The plan reads the model's config.json (a small download for a hub id); it refuses a
        # run that cannot fit before any weights load.
        self.memory_plan = announce_memory_plan(cfg, self.out)
        self.task = get_task(cfg.task, workers=t.reward_workers)
        train_examples = self.task.train_examples()
        validate_config(cfg, len(train_examples))
        self.eval_sets: dict[str, list[Example]] = {}
        for name in cfg.task.eval_sets or [None]:
            exs = self.task.eval_examples(name)
            self.eval_sets[name or cfg.task.name] = exs[: t.eval_limit] if t.eval_limit else exs
        self.tokenizer = load_tokenizer(cfg.model)
        check_tokenizer(cfg, self.tokenizer, warn=lambda m: self.out.print(m))
        self._encode_prompts(train_examples)
        self.data = DataOrder(list(self.examples), t.seed)

    def _encode_prompts(self, train_examples: list[Example]) -> None:
        """The training prompts' token ids; prompts over task.max_prompt_tokens are dropped."""
        cfg = self.cfg
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
            self.out.print(f"[yellow]dropped {dropped} training prompts longer than task.max_prompt_tokens={cfg.task.max_prompt_tokens}[/]")
        if len(self.examples) < cfg.train.prompts_per_step:
            raise UserError(
                f"only {len(self.examples)} training prompts fit task.max_prompt_tokens="
                f"{cfg.task.max_prompt_tokens}; raise it or lower train.prompts_per_step ({cfg.train.prompts_per_step})"
            )

    def _make_allocator(self) -> Any:
        from vigor_cli.allocation import make_allocator

        try:
            return make_allocator(self.cfg.allocation, self.cfg.train.prompts_per_step, self.cfg.train.seed)
        except ValueError as e:
            raise UserError(str(e)) from None

    def close(self) -> None:
        """Stop the reward workers and the engine (safe to call twice)."""
        task, engine = self.task, self.engine
        try:
            if task is not None:
                task.close()
        finally:
            try:
                if engine is not None:
                    engine.close()
            finally:
                self.trackers.close()

    # ------------------------------------------------------------------ the loop
    def finished(self) -> bool:
        """train.steps done, or train.max_rollouts generated."""
        t = self.cfg.train
        return self.step >= t.steps or (t.max_rollouts is not None and self.rollouts_total >= t.max_rollouts)

    def run(self) -> dict:
        """Train until :meth:`finished`, evaluating and checkpointing on schedule; then the
        final evaluation, checkpoint and summary (returned, and in ``summary.json``). The
        engine and reward workers are closed however it ends. A signal (vigor_cli/interrupt.py)
        stops it after the current step with :class:`TrainingInterrupted`."""
        t = self.cfg.train
        by_rollouts = t.max_rollouts is not None
        try:
            if self.step == 0:
                self.start_accuracy = self.last_accuracy = self.evaluate(0)
            with _progress(self.out) as progress:
                bar = progress.add_task("train", total=t.max_rollouts if by_rollouts else t.steps,
                                        completed=self.rollouts_total if by_rollouts else self.step, info="")
                while not self.finished():
                    with self.signals.deferred():
                        log = self._step()
                    progress.update(
                        bar, completed=self.rollouts_total if by_rollouts else self.step,
                        info=f"reward {log.metrics['reward/mean']:.3f}  acc {self.last_accuracy or 0:.3f}  "
                        f"rollouts {self.rollouts_total}",
                    )
                    if self.signals.requested and not self.finished():
                        raise self.signals.interruption()
            with self.signals.deferred():
                return self._finish()
        except TrainingInterrupted as stop:
            stop.status = self.stop_status(stop.signal_name)
            raise
        finally:
            self.close()

    def _step(self) -> StepLog:
        """One step, its log lines, and the evaluation and checkpoint due after it (the final
        ones are :meth:`_finish`'s). After a stop signal an evaluation runs only when a
        checkpoint follows it (the one a resume continues from)."""
        t = self.cfg.train
        before = self.rollouts_total
        self.step += 1
        log = self.train_step(self.step)
        self._write_step(log)
        if self.finished():
            return log
        save = bool(t.save_every and self.step % t.save_every == 0)
        if self._eval_due(before) and (save or not self.signals.requested):
            self.last_accuracy = self.evaluate(self.step)
        if save:
            self.save_checkpoint()
        return log

    def _eval_due(self, rollouts_before: int) -> bool:
        """train.eval_every steps, or the step crossed a multiple of train.eval_every_rollouts."""
        t = self.cfg.train
        if t.eval_every and self.step % t.eval_every == 0:
            return True
        every = t.eval_every_rollouts
        return bool(every) and self.rollouts_total // every > rollouts_before // every

    def _finish(self) -> dict:
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
        return summary

    def stop_status(self, signal_name: str, loading: bool = False) -> str:
        """The one line a stopped run prints: where it stands and the command that resumes it."""
        if loading and self.rundir.fresh:  # a new run's directory is removed again (RunDir.abandon)
            return f"{signal_name}: training stopped while loading, before a step; nothing was written"
        if loading:
            return (f"{signal_name}: training stopped while loading, before a step; run directory "
                    f"{self.rundir.path}; resume with: {resume_command(self.rundir.path)}")
        t = self.cfg.train
        of = f" of {t.steps}" if t.max_rollouts is None else f" ({self.rollouts_total} of {t.max_rollouts} rollouts)"
        checkpoint = self.rundir.latest_checkpoint()
        saved = f"last checkpoint: {checkpoint.name}" if checkpoint else "no checkpoint yet, a resume starts over"
        return (f"{signal_name}: training stopped after step {self.step}{of} ({saved}); run directory "
                f"{self.rundir.path}; resume with: {resume_command(self.rundir.path)}")

    def train_step(self, step: int) -> StepLog:
        """Allocation rounds (generate, score, tell), the update, the weights pushed to the
        engine; the step's metrics line and allocation record."""
        t0 = time.time()
        batch = self.rollout_phase(step)
        t1 = time.time()
        update_metrics = self.learner.update(batch.samples)
        self.learner.release_gradients()  # not kept through generation; the engine wakes next
        self.engine.sync_weights(self.learner.model)
        t2 = time.time()
        tokens = sum(len(s.rollout.token_ids) for s in batch.generated)
        self.rollouts_total += len(batch.generated)
        self.tokens_total += tokens
        metrics = {
            "step": step,
            **self._batch_metrics(batch, tokens),
            **update_metrics,
            "time/generate": batch.generate_seconds,
            "time/reward": batch.reward_seconds,
            "time/update": t2 - t1,
            "time/step": time.time() - t0,
            "time/elapsed": 0.0,  # filled when written
        }
        record = {"step": step, **batch.record}
        for entry in record.get("prompts", []):
            entry["text"] = self.examples[entry["uid"]].question[:200]
        return StepLog(metrics=metrics, samples=batch.samples, record=record)

    def _batch_metrics(self, batch: RolloutBatch, tokens: int) -> dict[str, Any]:
        every = batch.generated
        rewards = torch.tensor([s.reward for s in every], dtype=torch.float64)
        lengths = [len(s.rollout.token_ids) for s in every]
        groups: dict[str, list[float]] = defaultdict(list)
        for s in batch.samples:
            groups[s.uid].append(s.reward)
        zero_var = sum(1 for r in groups.values() if max(r) == min(r))
        return {
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
        }

    # ------------------------------------------------------------------ allocation rounds
    def rollout_phase(self, step: int) -> RolloutBatch:
        """Ask the allocator for rollouts round by round, generate and score them, tell it
        the rewards; the samples the update uses and every rollout generated."""
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
        generated = [s for group in pool.values() for s in group]
        return RolloutBatch(samples, generated, result.record, t_gen, t_reward)

    def _score(self, flat: list[tuple[str, Rollout]], graded: dict[tuple[str, Any], Any]) -> list:
        """Scores of (uid, rollout) pairs. A reward is a function of the example and the
        completion text alone, so each distinct (uid, text) of the step is graded once
        (``graded`` carries them across the step's rounds): sampled completions repeat
        often, more so when a strategy gives one prompt many rollouts, and each repeat
        would cost a verifier call (a sandbox run for code)."""
        if not self.dedupe_scoring:
            return self.task.score([self.examples[u] for u, _ in flat], [ro.text for _, ro in flat])
        return score_once(self.task, self.examples, [(uid, ro.text) for uid, ro in flat], graded)

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
        self._log_eval(step, accuracy, {n: r.accuracy for n, r in results.items()},
                       sum(len(r.samples) for r in results.values()))
        sets = "  ".join(f"{n} {r.accuracy:.3f}" for n, r in results.items())
        self.out.print(f"[bold]eval[/] step {step}: accuracy {accuracy:.3f} ({sets})", highlight=False)
        return accuracy

    def _log_eval(self, step: int, accuracy: float, sets: dict[str, float], samples: int) -> None:
        line = {
            "step": step,
            "eval/accuracy": accuracy,
            **{f"eval/{n}/accuracy": a for n, a in sets.items()},
            "eval/samples": samples,
            "rollouts/cumulative": self.rollouts_total,
            "tokens/cumulative": self.tokens_total,
            "time/elapsed": self.elapsed(),
        }
        self.rundir.append("metrics.jsonl", line)
        self.trackers.log_metrics(line)

    def relog_eval(self, step: int) -> None:
        """Log the checkpoint's evaluation again from ``eval/step-N.json`` (resume, when its
        metrics.jsonl line was cut short): the line the uninterrupted run wrote, in its place."""
        from vigor_cli.runs import read_eval_line

        assert step == self.step, "only the checkpoint's own evaluation can be logged again"
        self._log_eval(step, *read_eval_line(self.rundir.eval_dir / f"step-{step}.json"))

    def _has_eval(self, step: int) -> bool:
        return (self.rundir.eval_dir / f"step-{step}.json").exists()

    # ------------------------------------------------------------------ logging
    def elapsed(self) -> float:
        return self.elapsed_before + (time.time() - self.session_start)

    def _write_step(self, log: StepLog) -> None:
        m = log.metrics
        m["time/elapsed"] = self.elapsed()
        self.rundir.append("metrics.jsonl", m)
        self.trackers.log_metrics(m)
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
            rows = [
                {"step": m["step"], "uid": s.uid, "prompt": self.examples[s.uid].question,
                 "text": s.rollout.text, "reward": s.reward, "reason": s.reason, "advantage": s.advantage}
                for s in shown
            ]
            self.rundir.append_many("completions.jsonl", rows)
            self.trackers.log_completions(m["step"], rows)
            self.out.print(_completions_table(m["step"], shown, self.examples))

    def _report_weight_check(self, step: int) -> None:
        """Stop (engine.weight_check=error) or warn when the check failed; say when it changes."""
        wc = self.learner.weight_check
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
        """The learner's weights and state, the allocator, the data position and the loop's
        counters, published as one checkpoint directory (vigor_cli/runs.py seals it with a
        manifest and rotates old ones); a full disk is one line and leaves earlier
        checkpoints intact."""
        from vigor_cli.config import dump_config
        from vigor_cli.models import save_policy
        from vigor_cli.runs import disk_full, is_disk_full, write_text_atomic

        tmp = self.rundir.begin_checkpoint(self.step)
        try:
            save_policy(self.learner.model, self.tokenizer, tmp)
            with open(tmp / "trainer_state.pt", "wb") as f:  # a file object: ENOSPC stays visible
                torch.save({**self.learner.state_dict(), **rng_state()}, f)
            write_json_atomic(tmp / "allocator.json", self.allocator.state_dict())
            write_json_atomic(tmp / "data_state.json", self.loop_state())
            write_text_atomic(tmp / "config.yaml", dump_config(self.cfg))  # checked on resume
        except BaseException as e:
            self.rundir.discard_checkpoint(tmp)
            if isinstance(e, Exception) and not isinstance(e, UserError) and is_disk_full(e, tmp):
                raise disk_full(tmp) from None
            raise
        return self.rundir.commit_checkpoint(tmp, self.step, self.cfg.train.keep_checkpoints)

    def _load_checkpoint(self, path: Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote (resume verified ``path`` first; the
        weights were loaded with the learner)."""
        import json

        try:
            state = torch.load(path / "trainer_state.pt", weights_only=True)
            allocator = json.loads((path / "allocator.json").read_text())
            data = json.loads((path / "data_state.json").read_text())
        except (OSError, RuntimeError, ValueError, EOFError) as e:  # a checkpoint without manifest
            raise UserError(f"--resume: checkpoint {path} is damaged ({str(e).splitlines()[0]}); "
                            f"delete {path} to resume from the one before") from None
        self.learner.load_state_dict(state)
        set_rng_state(state)
        self.allocator.load_state_dict(allocator)
        self.load_loop_state(data)

    def loop_state(self) -> dict:
        """The loop's position: step, data order, counters (data_state.json)."""
        return {
            "step": self.step,
            "data": self.data.state_dict(),
            "rollouts_cumulative": self.rollouts_total,
            "tokens_cumulative": self.tokens_total,
            "elapsed": self.elapsed(),
            "start_accuracy": self.start_accuracy,
            "last_accuracy": self.last_accuracy,
        }

    def load_loop_state(self, data: dict) -> None:
        self.data.load_state_dict(data["data"])
        self.step = int(data["step"])
        self.rollouts_total = int(data["rollouts_cumulative"])
        self.tokens_total = int(data["tokens_cumulative"])
        self.elapsed_before = float(data["elapsed"])
        self.start_accuracy = data["start_accuracy"]
        self.last_accuracy = data["last_accuracy"]


def rng_state() -> dict:
    """torch's global random state (CPU and every CUDA device), as checkpoints keep it."""
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])


def resume_command(run_dir: str | Path) -> str:
    """The command that continues the run in ``run_dir``."""
    return f"vigor train --resume {shlex.quote(str(run_dir))}"


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
    SIGINT and SIGTERM stop the run after the current step with
    :class:`~vigor_cli.interrupt.TrainingInterrupted`, whose ``status`` says where the run
    stands and how to resume it.
    """
    with StopSignals() as signals:
        return _train(cfg, resume, out, steps, signals)


def _train(cfg: RunConfig | None, resume: str | Path | None, out: Any, steps: int | None,
           signals: StopSignals) -> dict:
    out = out or default_console
    if resume is not None:
        run, trainer = _resume(Path(resume), steps, out, signals)
    else:
        assert cfg is not None
        run = RunDir.planned(cfg, announce=out.print)  # claims a fresh directory and its lock
        try:
            run.make(cfg)  # config.yaml at once: a run killed while loading can be resumed or reused
            trainer = Trainer(cfg, run, None, out, signals)  # validates the config, loads model and data
        except BaseException:
            run.abandon()  # a run that never started leaves no directory behind
            raise
    out.print(f"run directory: {run.path}")
    try:
        return trainer.run()
    finally:
        run.release()


def _resume(path: Path, steps: int | None, out: Any,
            signals: StopSignals | None = None) -> tuple[RunDir, "Trainer"]:
    """Lock the run, check it (vigor_cli/resume.py: checkpoint, config, logs), then load."""
    from vigor_cli import resume

    def warn(message: str) -> None:
        out.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)

    run = RunDir.open_existing(path).acquire()  # refuses a run another process has
    try:
        plan = resume.prepare(run, steps, warn)  # reads only: a refusal changes nothing
        trainer = Trainer(plan.cfg, run, plan.checkpoint, out, signals)
        plan.apply(run, warn, trainer.relog_eval)
    except BaseException:
        run.release()
        raise
    out.print(f"resuming {run.path} from {plan.checkpoint or 'the start (no checkpoint yet)'}")
    return run, trainer
