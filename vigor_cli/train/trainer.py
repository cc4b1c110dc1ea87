"""`vigor train`'s loop: prompts -> allocation rounds -> rollouts -> rewards -> GRPO update.

Read it top to bottom like CleanRL's ppo.py: :func:`train` sets things up and runs the
loop; :meth:`Trainer.rollout_phase` is the allocation (vigor_cli/train/rollout_core.py's rounds,
shared with the TRL path, over this engine and task), :meth:`Trainer.train_step` hands its
samples to the :class:`~vigor_cli.train.learner.Learner`. What is logged and printed lives in
vigor_cli/train/log.py, checkpoints in vigor_cli/train/checkpoint.py, what is read before
the weights load in vigor_cli/train/data.py.

Details: docs/modules.md.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

from vigor_cli.train import health, checkpoint as train_checkpoint
from vigor_cli.run import provenance, seeding
from vigor_cli.allocation.base import Request
from vigor_cli.config import RunConfig
from vigor_cli.console import console as default_console, shown
from vigor_cli.errors import UserError
from vigor_cli.evaluate.evaluation import eval_line_of, evaluate_sets, held_out_sampling
from vigor_cli.report.metrics import pass_rate_of
from vigor_cli.interrupt import StopSignals, TrainingInterrupted
from vigor_cli.train.learner import Learner
from vigor_cli.rollout.base import SamplingParams
from vigor_cli.train.rollout_core import DataOrder, Generated, RolloutBatch, Sample, derive_seed, run_rounds, step_metrics
from vigor_cli.allocation.base import reward_range
from vigor_cli.run.directory import RunDir, read_eval_line
from vigor_cli.user.reward_log import EVAL_PREFIX, add_logged, trainer_state
from vigor_cli.task_base import Score, grade, score_once
from vigor_cli.run.tracking import Trackers
from vigor_cli.train.data import load_train_data
from vigor_cli.train.log import (
    StepLog, TrainLog, episode_lines, progress, record_text, resume_command, reward_parts, stop_status,
)


class EngineRounds:
    """`vigor train`'s rounds (vigor_cli/rollout_core.RoundRunner): the engine generates,
    the task grades. A reward is a function of the example and the completion text alone,
    so each distinct (uid, text) of a step is graded once (``graded``, cleared per step):
    sampled completions repeat, more so when a strategy gives one prompt many rollouts, and
    each repeat would cost a verifier call (a sandbox run for code)."""

    def __init__(self, trainer: "Trainer"):
        self.trainer = trainer
        self.graded: dict[tuple[str, str], Score] = {}

    def generate(self, requests: Sequence[Request], step: int, round_index: int) -> list[Generated]:
        tr, s = self.trainer, self.trainer.cfg.sampling
        params = SamplingParams(temperature=s.temperature, top_p=s.top_p, max_new_tokens=s.max_new_tokens,
                                seed=derive_seed(tr.cfg.train.seed, "rollout", step, round_index))
        prompts, counts = [tr.prompt_ids[r.uid] for r in requests], [r.n for r in requests]
        if tr.episodes is not None:  # an environment answers: each rollout is an episode
            outs = tr.episodes.run([tr.examples[r.uid] for r in requests], counts, params, prompts)
            return [Generated(r.uid, ep, ep.model_tokens, ep.truncated) for r, eps in zip(requests, outs) for ep in eps]
        outs = tr.engine.generate(prompts, counts, params)
        return [Generated(r.uid, ro, len(ro.token_ids), ro.truncated) for r, ros in zip(requests, outs) for ro in ros]

    def score(self, rollouts: Sequence[Generated]) -> list[Score]:
        tr = self.trainer
        if tr.episodes is not None:  # once per episode: its reward may read the environment's state
            return tr.scorer.score([tr.examples[g.uid] for g in rollouts], [g.rollout for g in rollouts])
        ids = [g.rollout.token_ids for g in rollouts]  # TRL's completion_ids, for a reward that reads them
        if not tr.dedupe_scoring:
            return grade(tr.task, [tr.examples[g.uid] for g in rollouts], [g.rollout.text for g in rollouts], ids)
        return score_once(tr.task, tr.examples, [(g.uid, g.rollout.text) for g in rollouts], self.graded, ids)


# --------------------------------------------------------------------------- the loop
class Trainer:
    """The loop: data order, rollout engine, allocation, rewards, evaluation and checkpoint
    cadence around a :class:`~vigor_cli.train.learner.Learner` (policy, optimizer, update).
    :func:`train` builds one and calls :meth:`run`."""

    def __init__(self, cfg: RunConfig, run: RunDir, resume_from: Path | None, out: Any,
                 signals: StopSignals | None = None):
        from vigor_cli.rollout import make_engine

        self.cfg, self.rundir, self.out = cfg, run, out
        self.signals = signals or StopSignals()
        """SIGINT/SIGTERM as the loop sees them (vigor_cli/interrupt.py); a bare one never fires."""
        self.task: Any = None
        self.engine: Any = None
        self.env: Any = None
        self.episodes: Any = None
        """task.env's episode loop (vigor_cli/episodes/loop.py); None: one completion per rollout."""
        self.dedupe_scoring = True
        """Grade each distinct (prompt, completion) of a step once (:class:`EngineRounds`); the
        timing bench turns it off to measure what it saves."""
        # ---- counters (checkpointed)
        self.step = 0
        self.rollouts_total = 0
        self.zero_variance_total = 0
        """Rollouts spent in groups whose rewards all came out equal (rollouts/zero_variance)."""
        self.step_no_signal: tuple[int, float] = (0, 0.0)
        """The last step's rollouts/zero_variance and share (its evaluation line repeats them)."""
        self.tokens_total = 0
        self.elapsed_before = 0.0
        self.step_elapsed = 0.0
        """The last step's time/elapsed (its evaluation line repeats it)."""
        self.start_accuracy: float | None = None
        self.last_accuracy: float | None = None
        self.last_pass_rate: float | None = None
        """The last evaluation's pass rate (this session's; the progress line shows it)."""
        seeding.seed_run(cfg.train.seed)  # before the reward files import and LoRA initialises
        self.trackers = Trackers(cfg.train.report_to, run.path, run.name, cfg.model_dump(mode="json"),
                                 announce=out.print)  # dashboards (vigor_cli/run/tracking.py)
        try:
            self._load_data()
            self.log = TrainLog(cfg, run, out, self.prompt_texts, self.trackers)
            self.learner = Learner(cfg, self.tokenizer.pad_token_id, self.prompt_ids, resume_from)
            self.engine = make_engine(cfg, self.learner.model, self.tokenizer, announce=lambda m: out.print(m))
            self.learner.watch_engine(self.engine)
            self._start_episodes()
            self._start_health()
            self.allocator = self._make_allocator()
            if resume_from is not None:
                train_checkpoint.load(self, resume_from)
            self._record(resume_from)
        except BaseException as e:
            self.close()  # reward workers already started
            if isinstance(e, TrainingInterrupted):
                e.status = self.stop_status(e.signal_name, loading=True)
            raise
        self.session_start = time.time()

    def _record(self, resume_from: Path | None) -> None:
        """The run's record of what made it (vigor_cli/run/provenance.py), written once the data
        and the model are loaded; a resume keeps the start's (and appends to it)."""
        if resume_from is not None and provenance.read(self.rundir.path) is not None:
            return
        record = provenance.build(self.cfg, str(self.learner.device), self.examples.values(), self.eval_sets,
                                  self.dropped, provenance.rows_read(self.cfg, self.task, len(self.examples) + self.dropped))
        if resume_from is not None:
            record["note"] = f"written when the run resumed from step {self.step}: it has no record of its start"
        provenance.write(self.rundir.path, record)

    def _start_episodes(self) -> None:
        """task.env: the episode loop over the engine, and the episodes' scorer."""
        if self.env is None:
            return
        from vigor_cli.episodes.loop import make_runner
        from vigor_cli.episodes.scoring import EpisodeScorer
        from vigor_cli.rollout.weights import stop_token_ids

        stops = stop_token_ids(self.learner.model, self.tokenizer)
        self.episodes = make_runner(self.cfg, self.task, self.tokenizer, self.engine, self.env, stops)
        self.scorer = EpisodeScorer(self.task, self.env)

    def _start_health(self) -> None:
        """The health checks (vigor_cli/train/health.py): what can be told before generating is said
        now; the per-step monitor starts (a resume restores its state)."""
        context = health.context_length(self.cfg, self.learner.model.config)
        prompts = health.prompt_infos(self.task, self.tokenizer, self.examples, self.prompt_ids)
        self.health = health.RunHealth(self.cfg, prompts, context)
        self.log.health_lines(health.run_preflight(self.cfg, self.task, self.tokenizer, self.examples, prompts,
                                                   context))

    def _load_data(self) -> None:
        """The task, its sets, the tokenizer and the encoded prompts (vigor_cli/train/data.py),
        all before any weights load; then the data order."""
        d = load_train_data(self.cfg, self.out)
        self.dropped = d.dropped
        self.task, self.tokenizer, self.memory_plan, self.env = d.task, d.tokenizer, d.memory_plan, d.env
        self.examples, self.prompt_ids, self.eval_sets = d.examples, d.prompt_ids, d.eval_sets
        self.prompt_texts = d.prompt_texts
        self.data = DataOrder(list(self.examples), self.cfg.train.seed)

    def _make_allocator(self) -> Any:
        from vigor_cli.allocation import make_allocator

        try:
            return make_allocator(self.cfg.allocation, self.cfg.train.prompts_per_step, self.cfg.train.seed)
        except ValueError as e:
            raise UserError(str(e)) from None

    def close(self) -> None:
        """Stop the reward workers, the environment and the engine (safe to call twice)."""
        task, engine, env = self.task, self.engine, self.env
        try:
            if env is not None:
                env.close()
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
            # from the first step to the summary a first signal waits for the step under way, and
            # after the last one for the final evaluation and checkpoint (no gap between them)
            with self.signals.deferred():
                with progress(self.out) as bars:
                    bar = bars.add_task("train", total=t.max_rollouts if by_rollouts else t.steps,
                                        completed=self.rollouts_total if by_rollouts else self.step, info="")
                    while not self.finished():
                        log = self._step()
                        bars.update(
                            bar, completed=self.rollouts_total if by_rollouts else self.step,
                            info=f"reward {log.metrics['reward/mean']:.3f}{reward_parts(log.metrics)}  "
                            f"{self.held_out_text()}  rollouts {self.rollouts_total}",
                        )
                        if self.signals.requested and not self.finished():
                            raise self.signals.interruption()
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
        log.metrics["time/elapsed"] = self.step_elapsed = self.elapsed()
        self.log.step(log, self.learner.weight_check)
        self.log.health_lines([a.line for a in log.alerts if not a.fatal])
        fatal = [a for a in log.alerts if a.fatal]
        if fatal:  # health.strict: stop after this step's checkpoint (a resume continues from it)
            self.save_checkpoint()
            raise health.HealthError(f"{fatal[0].line} (health.strict: stopped after step {self.step}; "
                                     f"checkpoint saved; resume with: {resume_command(self.rundir.path)})")
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
        evals = self.rundir.eval_steps()
        passed = [pass_rate_of(read_eval_line(evals[s])) if s in evals else None for s in (0, self.step)]
        summary = {
            "run_dir": str(self.rundir.path),
            "start_accuracy": self.start_accuracy,
            "final_accuracy": final,
            "start_pass_rate": passed[0],
            "final_pass_rate": passed[1],
            "steps": self.step,
            "rollouts": self.rollouts_total,
            "rollouts_zero_variance": self.zero_variance_total,
            "rollouts_zero_variance_share": self.zero_variance_total / self.rollouts_total if self.rollouts_total else 0.0,
            "tokens": self.tokens_total,
            "wall_time": self.elapsed(),
        }
        self.rundir.write_summary(summary)
        return summary

    def stop_status(self, signal_name: str, loading: bool = False) -> str:
        """The one line a stopped run prints: where it stands and the command that resumes it."""
        t = self.cfg.train
        of = f" of {t.steps}" if t.max_rollouts is None else f" ({self.rollouts_total} of {t.max_rollouts} rollouts)"
        checkpoint = None if loading else self.rundir.latest_checkpoint()
        return stop_status(signal_name, self.rundir.path, loading, self.step, of, checkpoint,
                           fresh=self.rundir.fresh)

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> StepLog:
        """Allocation rounds (generate, score, tell), the update, the weights pushed to the
        engine; the step's metrics line and allocation record."""
        t0 = time.time()
        self.task.trainer_state = self.trainer_state(step - 1)  # TRL's: the updates done before this step's
        seeding.seed_step(self.cfg.train.seed, step)  # what a reward draws depends on the seed and step only
        batch = self.rollout_phase(step)
        t1 = time.time()
        update_metrics = self.learner.update(batch.samples)
        self.learner.release_gradients()  # not kept through generation; the engine wakes next
        self.engine.sync_weights(self.learner.model)
        t2 = time.time()
        self.rollouts_total += len(batch.generated)
        self.tokens_total += batch.tokens
        metrics = {
            "step": step,
            **step_metrics(batch, self.rollouts_total, self.tokens_total, self.cfg.task.pass_threshold,
                           self.episodes.limits.max_turns if self.episodes is not None else None),
            **update_metrics,
            "time/generate": batch.generate_seconds,
            "time/reward": batch.reward_seconds,
            "time/update": t2 - t1,
            "time/step": time.time() - t0,
            "time/elapsed": 0.0,  # filled when written
        }
        self.zero_variance_total += metrics["rollouts/zero_variance"]
        self.step_no_signal = (metrics["rollouts/zero_variance"], metrics["rollouts/zero_variance_share"])
        alerts, health_metrics = self.health.step(step, batch.generated, update_metrics)
        metrics.update(health_metrics)
        add_logged(metrics, self.task.logged_metrics(), getattr(getattr(self.task, "reward_log", None), "by", {}))
        record = {"step": step, **batch.record}
        for entry in record.get("prompts", []):
            entry["text"] = record_text(self.prompt_texts[entry["uid"]])
        return StepLog(metrics=metrics, samples=batch.samples, record=record, alerts=alerts,
                       episodes=episode_lines(step, batch.generated))

    def trainer_state(self, global_step: int) -> Any:
        """TRL's ``trainer_state`` for the reward functions: ``global_step`` updates done,
        ``max_steps`` of the run, ``epoch`` the data's (fractional) epoch."""
        data = self.data
        epoch = data.epoch + data.position / max(1, len(data.uids))
        return trainer_state(global_step, self.cfg.train.steps, epoch)

    def rollout_phase(self, step: int) -> RolloutBatch:
        """The step's allocation rounds (vigor_cli/rollout_core.run_rounds) on this engine and
        task: the samples the update uses and every rollout generated."""
        weights = self.scorer.weights() if self.episodes is not None else getattr(self.task, "weights", None)
        batch = run_rounds(step, self.allocator, self.data, EngineRounds(self), self.cfg.grpo.scale_rewards,
                           reward_range(self.cfg.allocation.reward_range, weights))
        self.engine.end_generation()  # vLLM frees the GPU for the update
        return batch

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, step: int) -> float:
        """Every held-out set (vigor_cli/evaluation.evaluate_sets), written to
        ``eval/step-<N>.json`` and metrics.jsonl; the mean accuracy."""
        t = self.cfg.train
        seeding.seed_step(t.seed, step, "eval")  # what a reward draws while it grades depends on seed and step only
        params = held_out_sampling(t.seed, step, t.eval_temperature, self.cfg.sampling.top_p,
                                   self.cfg.sampling.max_new_tokens)
        self.task.trainer_state = self.trainer_state(step)
        self.task.logged_metrics()  # what was logged before is the step's, already in its line
        held = evaluate_sets(self.engine, self.task, self.tokenizer, self.eval_sets, t.eval_samples, params, step,
                             pass_threshold=self.cfg.task.pass_threshold, episodes=self.episodes)
        self.engine.end_generation()
        logged = self.task.logged_metrics()  # what the reward functions logged while evaluating
        self.rundir.write_eval(step, {**held.to_json(), **({"logged": logged} if logged else {})})
        # one time/elapsed per step: an evaluation after a step repeats that step's (so a reader
        # needs no join, and a dashboard gets one point per step)
        elapsed = self.step_elapsed if step == self.step and step > 0 else self.elapsed()
        no_signal = self.step_no_signal if step == self.step and step > 0 else (0, 0.0)
        line = {**held.line(self.rollouts_total, self.tokens_total, no_signal), "time/elapsed": elapsed}
        add_logged(line, logged, getattr(getattr(self.task, "reward_log", None), "by", {}), EVAL_PREFIX)
        self.rundir.append("metrics.jsonl", line)
        self.trackers.log_metrics(line)
        self.out.print(held.describe(), highlight=False)
        self.last_pass_rate = held.pass_rate
        return held.accuracy

    def held_out_text(self) -> str:
        """The last evaluation for the progress line: the bundled tasks' accuracy; your own
        task's mean reward and pass rate (a weighted reward is not a share of answers)."""
        if self.cfg.task.name != "custom":
            return f"acc {self.last_accuracy or 0:.3f}"
        shown = f"held-out reward {self.last_accuracy or 0:.3f}"
        return shown + ("" if self.last_pass_rate is None else f" pass {self.last_pass_rate:.3f}")

    def relog_eval(self, step: int) -> None:
        """Log the checkpoint's evaluation again from ``eval/step-N.json`` (resume, when its
        metrics.jsonl line was cut short): the line the uninterrupted run wrote, in its place."""
        assert step == self.step, "only the checkpoint's own evaluation can be logged again"
        held = read_eval_line(self.rundir.eval_dir / f"step-{step}.json")
        trained = [r for r in self.rundir.read_log("metrics.jsonl").records
                   if r.get("step") == step and "time/elapsed" in r and "eval/accuracy" not in r]
        own = trained[-1] if trained else {}
        no_signal = (own.get("rollouts/zero_variance", 0), own.get("rollouts/zero_variance_share", 0.0))
        line = eval_line_of(held, self.rollouts_total, self.tokens_total, no_signal)
        line["time/elapsed"] = own["time/elapsed"] if trained else self.elapsed()  # the step's own
        add_logged(line, held.get("logged") or {}, {}, EVAL_PREFIX)
        self.rundir.append("metrics.jsonl", line)

    def _has_eval(self, step: int) -> bool:
        return (self.rundir.eval_dir / f"step-{step}.json").exists()

    # ------------------------------------------------------------------ counters, checkpoints
    def elapsed(self) -> float:
        return self.elapsed_before + (time.time() - self.session_start)

    def save_checkpoint(self) -> Path:
        """The checkpoint of this step (vigor_cli/train/checkpoint.py)."""
        return train_checkpoint.save(self)

    def loop_state(self) -> dict:
        """The loop's position: step, data order, counters (data_state.json)."""
        return {
            "step": self.step,
            "data": self.data.state_dict(),
            "rollouts_cumulative": self.rollouts_total,
            "rollouts_zero_variance": self.zero_variance_total,
            "tokens_cumulative": self.tokens_total,
            "elapsed": self.elapsed(),
            "start_accuracy": self.start_accuracy,
            "last_accuracy": self.last_accuracy,
            "health": self.health.monitor.state_dict(),
        }

    def load_loop_state(self, data: dict) -> None:
        self.data.load_state_dict(data["data"])
        self.step = int(data["step"])
        self.rollouts_total = int(data["rollouts_cumulative"])
        self.zero_variance_total = int(data.get("rollouts_zero_variance", 0))  # older checkpoints: counted from here
        self.tokens_total = int(data["tokens_cumulative"])
        self.elapsed_before = float(data["elapsed"])
        self.start_accuracy = data["start_accuracy"]
        self.last_accuracy = data["last_accuracy"]
        self.health.monitor.load_state_dict(data.get("health", {}))  # older checkpoints: a fresh monitor


# --------------------------------------------------------------------------- entry point
def train(cfg: RunConfig | None = None, resume: str | Path | None = None, out: Any = None,
          steps: int | None = None, allow_changed_files: bool = False) -> dict:
    """Run (or resume) training; returns the summary (also in ``summary.json``).

    ``resume`` is a run directory: its saved config is used (``steps`` may extend it)
    and training continues from its newest intact checkpoint. The run directory is
    claimed (and its lock held) before anything slow, and released when training ends.
    SIGINT and SIGTERM stop the run after the current step with
    :class:`~vigor_cli.interrupt.TrainingInterrupted`, whose ``status`` says where the run
    stands and how to resume it. A resume refuses a data, reward or model file that changed
    since the run started (its record, vigor_cli/run/provenance.py) unless ``allow_changed_files``.
    """
    out = out or default_console
    if resume is None:
        with StopSignals() as signals:
            return _train(cfg, None, out, steps, signals)
    path = Path(os.path.abspath(resume))  # before the move to the run's launch folder
    note = lambda line: out.print(shown(line), highlight=False, soft_wrap=True)  # noqa: E731
    with RunDir(path).in_launch_dir(note), StopSignals() as signals:  # relative paths as at its start
        return _train(cfg, path, out, steps, signals, allow_changed_files)


def _train(cfg: RunConfig | None, resume: str | Path | None, out: Any, steps: int | None,
           signals: StopSignals, allow_changed_files: bool = False) -> dict:
    if resume is not None:
        run, trainer = _resume(Path(resume), steps, out, signals, allow_changed_files)
    else:
        assert cfg is not None
        run = RunDir.planned(cfg, announce=out.print)  # claims a fresh directory and its lock
        try:
            run.make(cfg)  # config.yaml at once: a run killed while loading can be resumed or reused
            trainer = Trainer(cfg, run, None, out, signals)  # validates the config, loads model and data
        except BaseException:
            run.abandon()  # a run that never started leaves no directory behind
            raise
    out.print(f"run directory: {shown(run.path)}", highlight=False)
    try:
        return trainer.run()
    finally:
        run.release(remove=True)  # an ended run leaves no run.lock behind


def _resume(path: Path, steps: int | None, out: Any, signals: StopSignals | None = None,
            allow_changed_files: bool = False) -> tuple[RunDir, "Trainer"]:
    """Lock the run, check it (vigor_cli/train/resume.py: checkpoint, config, logs; its record's
    files and versions, vigor_cli/run/provenance.py), then load."""
    from vigor_cli.train import resume

    def warn(message: str) -> None:
        out.print(f"[yellow]warning:[/] {shown(message)}", highlight=False, soft_wrap=True)

    run = RunDir.open_existing(path).acquire()  # refuses a run another process has
    try:
        plan = resume.prepare(run, steps, warn)  # reads only: a refusal changes nothing
        changes = provenance.check_resume(run.path, allow_changed_files, warn)  # so does a changed file
        trainer = Trainer(plan.cfg, run, plan.checkpoint, out, signals)
        threads = provenance.thread_change(provenance.read(run.path))  # read now: vigor has set them
        if threads is not None and changes is not None:
            warn(f"{provenance.THREADS} was {threads[0]} when the run started, is {threads[1]} now (recorded in "
                 f"{provenance.RECORD})")
            changes["versions"][provenance.THREADS] = {"recorded": threads[0], "now": threads[1]}
        plan.apply(run, warn, trainer.relog_eval)
        provenance.add_resume(run.path, max(plan.step, 0), changes)
    except BaseException:
        run.release(remove=run.lock_made)  # a refused resume leaves the run as it found it
        raise
    out.print(f"resuming {shown(run.path)} from {shown(plan.checkpoint or 'the start (no checkpoint yet)')}",
              highlight=False)
    return run, trainer
