"""The TRL path's step lines: what `vigor train` writes to metrics.jsonl, and TRL's own metrics
corrected where the allocation changes their meaning.

Details: docs/modules.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

try:  # TrainerCallback as the TRL path uses it: with TRL (transformers alone may not import it)
    from transformers import TrainerCallback
    import trl  # noqa: F401
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(f"vigor_cli.integrations.trl_metrics needs TRL: pip install 'vigor[trl]' ({e})") from None

from vigor_cli.train import health
from vigor_cli.user.reward_log import add_logged
from vigor_cli.user.rewards import _prompt_text
from vigor_cli.train.rollout_core import RolloutBatch, step_metrics

COMPLETION_METRICS = ("completions/mean_length", "completions/min_length", "completions/max_length",
                      "completions/clipped_ratio", "completions/mean_terminated_length",
                      "completions/min_terminated_length", "completions/max_terminated_length")
"""TRL's completion metrics, appended by its generation once per call (per round here)."""

UPDATE_KEYS = ("losses/kl", "losses/clipfrac_low", "losses/clipfrac_high", "losses/entropy")


def write_run_files(run_dir: str | Path, allocation: dict | None = None, metrics: dict | None = None,
                    config: dict | None = None, evaluation: dict | None = None, new_run: bool = False) -> None:
    """The one place the TRL path writes vigor's run-directory files (docs/run-directory.md):
    ``config.yaml`` (the allocation section and the step's prompts), one ``allocation.jsonl``
    record, one ``metrics.jsonl`` line and an evaluation's ``eval/step-<N>.json``, so `vigor
    inspect-allocation` and `vigor report` read the run."""
    import yaml

    from vigor_cli.run.directory import write_text_atomic

    from vigor_cli.run.directory import RunDir

    run = RunDir(Path(run_dir))
    run.path.mkdir(parents=True, exist_ok=True)
    if new_run:  # what vigor train writes at a run's start: its id (every checkpoint records it), where it started
        import os
        import secrets

        from vigor_cli.run.directory import LAUNCH_DIR, RUN_ID

        write_text_atomic(run.path / RUN_ID, secrets.token_hex(16) + "\n")
        write_text_atomic(run.path / LAUNCH_DIR, os.getcwd() + "\n")
        (run.path / "checkpoints").mkdir(exist_ok=True)
    if config is not None:
        write_text_atomic(run.path / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    if allocation is not None:
        run.append("allocation.jsonl", allocation)
    if evaluation is not None:
        run.write_eval(evaluation["step"], evaluation)
    if metrics is not None:
        run.append("metrics.jsonl", metrics)


@dataclass
class PendingStep:
    """A step whose rollouts are logged and whose update is not yet."""

    step: int
    batch: RolloutBatch
    spent: list[int]
    tokens: list[int]
    line: dict[str, Any]
    """The rollout half of the metrics.jsonl line."""
    update: dict[str, float] = field(default_factory=dict)
    """The phase's first optimizer step's update metrics (trl_update.UpdateStats)."""
    loss: float | None = None
    """This rank's loss of the phase's first optimizer step."""
    started: float = field(default_factory=time.perf_counter)
    done: bool = False
    """Its last optimizer step has run (set by :class:`PhaseEnd`)."""


def completion_metrics(batch: RolloutBatch) -> dict[str, float]:
    """TRL's ``completions/*`` over the step's real rollouts (its definitions: lengths, the
    truncated share, the lengths of those that ended)."""
    lengths = [float(s.tokens) for s in batch.generated]
    ended = [float(s.tokens) for s in batch.generated if not s.truncated] or [0.0]
    if not lengths:
        return {}
    return {
        "completions/mean_length": sum(lengths) / len(lengths),
        "completions/min_length": min(lengths), "completions/max_length": max(lengths),
        "completions/clipped_ratio": sum(bool(s.truncated) for s in batch.generated) / len(lengths),
        "completions/mean_terminated_length": sum(ended) / len(ended),
        "completions/min_terminated_length": min(ended), "completions/max_terminated_length": max(ended),
    }


def completion_marks(trainer: Any) -> dict[str, int]:
    """How many values TRL's completion metrics hold before a step's rounds."""
    m = trainer._metrics["train"]
    return {key: len(m.get(key, [])) for key in COMPLETION_METRICS}


def start_step(trainer: Any, batch: RolloutBatch, layout: Any, scoring_seconds: float, marks: Mapping[str, int],
               extra: Mapping[str, Any] | None = None) -> None:
    """The rollout half of a step's logs (module doc); the allocation record is written now."""
    tr = trainer
    n = len(batch.generated)
    tr.vigor_totals["rollouts"] += n
    tr.vigor_totals["tokens"] += batch.tokens
    rows = sum(len(r) for r in layout.rows)
    turns = tr.vigor_episodes.limits.max_turns if tr.vigor_episodes is not None else None
    metrics = step_metrics(batch, tr.vigor_totals["rollouts"], tr.vigor_totals["tokens"], tr.args.pass_threshold,
                           turns)
    if "sandbox/isolation" not in metrics:  # TRL graded the rollouts: the reward functions know the level
        metrics.update(reward_sandbox(tr))
    logged = {name: sum(v) / len(v) for name, v in tr._vigor_logged.items() if v}  # log_metric, this step
    tr._vigor_logged.clear()
    m = tr._metrics["train"]
    for key, value in completion_metrics(batch).items():  # one value per step, copies left out
        del m[key][marks.get(key, 0):]
        m[key].append(value)
    m["vigor/rollouts_per_step"].append(n)
    m["vigor/rollouts_cumulative"].append(tr.vigor_totals["rollouts"])
    m["vigor/rounds"].append(len(batch.round_sizes))
    for t, size in enumerate(batch.round_sizes, start=1):
        m[f"vigor/round_{t}_rollouts"].append(size)
    tr.vigor_totals["zero_variance"] = tr.vigor_totals.get("zero_variance", 0) + metrics["rollouts/zero_variance"]
    tr.vigor_step_no_signal = (metrics["rollouts/zero_variance"], metrics["rollouts/zero_variance_share"])
    m["vigor/zero_var_frac"].append(metrics["groups/zero_var_frac"])
    m["vigor/zero_variance_rollouts"].append(metrics["rollouts/zero_variance"])
    m["vigor/zero_variance_share"].append(metrics["rollouts/zero_variance_share"])
    m["frac_reward_zero_std"][-1] = metrics["groups/zero_var_frac"]
    m["vigor/unscored"].append(metrics["reward/unscored"])
    m["vigor/balance_duplicates"].append(rows - n)
    m["vigor/loss_rows"].append(len(batch.samples))
    m["vigor/rank_rollouts_spread"].append(max(layout.spent) - min(layout.spent))
    m["vigor/rank_tokens_spread"].append(max(layout.tokens) - min(layout.tokens))
    m["vigor/time/generate"].append(batch.generate_seconds)
    m["vigor/time/reward"].append(batch.reward_seconds)
    m["vigor/time/scoring_pass"].append(scoring_seconds)
    if "sandbox/memory_cgroup" in metrics:
        m["sandbox/memory_cgroup"].append(metrics["sandbox/memory_cgroup"])
    fix_logged_advantages(tr, batch, layout)
    line = {"step": tr.vigor_step, **metrics, "rollouts/per_rank": list(layout.spent),
            "tokens/per_rank": list(layout.tokens), "time/generate": batch.generate_seconds,
            "time/reward": batch.reward_seconds, "time/scoring_pass": scoring_seconds, **(extra or {})}
    add_logged(line, logged, {})
    tr.vigor_pending = PendingStep(tr.vigor_step, batch, list(layout.spent), list(layout.tokens), line)
    if tr.accelerator.is_main_process:
        say_isolation(tr, metrics.get("sandbox/isolation"))
        record = {"step": tr.vigor_step, **batch.record}
        for entry in record.get("prompts", []):
            entry["text"] = _prompt_text(tr.train_dataset[tr.vigor_index[entry["uid"]]]["prompt"])[:200]
        if tr.vigor_episodes is not None:
            from vigor_cli.run.directory import RunDir
            from vigor_cli.train.log import episode_lines

            RunDir(tr.vigor_run_dir).append_many("episodes.jsonl", episode_lines(tr.vigor_step, batch.generated))
        write_run_files(tr.vigor_run_dir, allocation=record)


def reward_sandbox(trainer: Any) -> dict[str, Any]:
    """``sandbox/isolation`` and ``sandbox/memory_cgroup`` of this step, as `vigor train` logs
    them, from the first reward function that keeps them (a code task's: trl_rewards; TRL
    grades the rollouts, so the batch's samples carry no verdict details); {} for none."""
    for func in getattr(trainer, "reward_funcs", None) or []:
        found = getattr(func, "vigor_sandbox", None)
        if found:
            return dict(found)
    return {}


def say_isolation(trainer: Any, level: str | None) -> None:
    """The sandbox's isolation level on stderr when first seen or changed (`vigor train`
    prints it the same way: vigor_cli/train/log.py)."""
    if level and level != getattr(trainer, "vigor_isolation", None):
        from vigor_cli.console import err_console

        trainer.vigor_isolation = level
        err_console.print(f"sandbox isolation: {level}", markup=False, highlight=False, soft_wrap=True)


def note_update(trainer: Any, loss: float) -> None:
    """After an optimizer step's loss: keep the phase's first step's update metrics."""
    pending = getattr(trainer, "vigor_pending", None)
    if pending is not None and pending.loss is None:
        pending.update = dict(trainer.vigor_update.values)
        pending.loss = loss


def finish_step(trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
    """The update half of the pending step (module doc): health checks, metrics.jsonl line,
    and health.strict's stop, on every rank together. Returns the ``health/*`` values (for
    TRL's own log)."""
    tr = trainer
    pending: PendingStep | None = getattr(tr, "vigor_pending", None)
    if pending is None:
        return {}
    tr.vigor_pending = None
    update = {key: pending.update.get(key, 0.0) for key in UPDATE_KEYS}
    local = torch.tensor([pending.loss if pending.loss is not None else float("nan")],
                         dtype=torch.float64, device=tr.accelerator.device)
    losses = tr.accelerator.gather(local)
    alerts, checks = step_health(tr, pending.batch, update)
    line = {**pending.line, "losses/loss": float(losses.mean()) if pending.loss is not None else None, **update,
            "losses/grad_norm": _number(logs.get("grad_norm")), "lr": _number(logs.get("learning_rate")),
            "time/update": time.perf_counter() - pending.started, **checks}
    # health.strict: stop after this step's checkpoint, as vigor train does (when saving is on). A
    # rank's checks see its own texts, so the ranks may differ: every rank stops together,
    # none is left waiting in TRL's collectives.
    fatal = next((a for a in alerts if a.fatal), None)
    flag = torch.tensor([int(fatal is not None)], dtype=torch.int64, device=tr.accelerator.device)
    stop = int(tr.accelerator.gather(flag).sum().item())
    if tr.accelerator.is_main_process:
        from vigor_cli.console import err_console

        for alert in alerts:
            err_console.print(f"warning: {alert.line}", style="yellow", markup=False, highlight=False, soft_wrap=True)
        write_run_files(tr.vigor_run_dir, metrics=line)
    if stop:
        text = fatal.line if fatal is not None else "a health check held on another rank"
        saved = ""
        if tr.args.save_strategy != "no":
            from vigor_cli.integrations import trl_save

            trl_save.save(tr)
            saved = f"; checkpoint saved; resume with: python -m vigor_cli.integrations.trl --resume {tr.vigor_run_dir}"
        raise health.HealthError(f"{text} (health.strict: stopped after step {pending.step}{saved})")
    return checks


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def step_health(trainer: Any, batch: RolloutBatch, update: Mapping[str, float]) -> tuple[list, dict[str, float]]:
    """The health checks on a step's rollouts and its update (the same as `vigor train`'s): each
    prompt's length and whether the chat template renders it (TRL templates message lists,
    never strings), the update's KL and clip fractions."""
    tr = trainer
    tok = tr.processing_class
    has_template = health.template_suffix(tok) is not None
    prompts = tr.vigor_health.prompts
    for uid in {s.uid for s in batch.generated} - prompts.keys():
        prompt = tr.train_dataset[tr.vigor_index[uid]]["prompt"]
        prompts[uid] = health.PromptInfo(tr._prompt_tokens.get(uid, 0),
                                         templated=not has_template or not isinstance(prompt, str))
    from vigor_cli.integrations.trl_checks import every_rank_texts

    texts = every_rank_texts(tr, tr.last_rounds.texts if tr.last_rounds is not None else {})
    return tr.vigor_health.step(tr.vigor_step, batch.generated, update, text=lambda s: texts.get(s.rollout))


def fix_logged_advantages(trainer: Any, batch: RolloutBatch, layout: Any) -> None:
    """TRL logged its (zero) advantages for the completions table; put ours there."""
    by_key = {(s.uid, s.index): s.advantage for s in batch.samples}
    flat = [by_key.get(key, 0.0) if real else 0.0 for rank_rows in layout.rows for key, real in rank_rows]
    logged = trainer._logs["advantages"]  # a deque of TRL's generation_batch_size, newest last
    n = min(len(logged), len(flat))
    for i in range(1, n + 1):
        logged[-i] = flat[-i]


class PhaseEnd(TrainerCallback):
    """Marks the end of a rollout phase (its ``num_iterations`` optimizer steps, or the last
    step) and makes TRL log then, so the trainer's ``log`` writes the step's line before TRL
    clears its metrics."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        pending = getattr(self.trainer, "vigor_pending", None)
        iterations = max(1, self.trainer.num_iterations)
        if pending is not None and (state.global_step % iterations == 0 or state.global_step >= state.max_steps):
            pending.done = True
            control.should_log = True
        return control
