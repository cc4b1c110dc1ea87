"""What a `vigor train` run writes and prints as it goes: a step's lines in metrics.jsonl,
allocation.jsonl and completions.jsonl, its console line and completions table, the
weight-check warnings, the progress bar, and the one line a stopped run ends with.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from vigor_cli.episodes.base import episode_record, is_episode
from vigor_cli.rollout.weight_check import EngineWeightsError
from vigor_cli.train.rollout_core import Sample

COMPLETIONS_SHOWN = 4
"""Completions per console table and per completions.jsonl entry."""
EPISODE_TEXT_CHARS = 2000
"""Characters kept of each message of an episode in episodes.jsonl and completions.jsonl."""


@dataclass
class StepLog:
    """What a step measured; becomes one metrics.jsonl line."""

    metrics: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    record: dict = field(default_factory=dict)
    alerts: list[Any] = field(default_factory=list)
    """Health conditions that speak after this step (vigor_cli/train/health.py)."""
    episodes: list[dict] = field(default_factory=list)
    """Every episode of the step, turn by turn (episodes.jsonl; empty without an environment)."""


def no_signal_text(m: dict) -> str:
    """``no-signal 218 (43%)  ``: the step's rollouts spent in groups whose rewards all came out
    equal (empty for a line without the count)."""
    if "rollouts/zero_variance" not in m:
        return ""
    return f"no-signal {m['rollouts/zero_variance']} ({m['rollouts/zero_variance_share']:.0%})  "


class TrainLog:
    """The loop's writer and console: ``rundir`` (vigor_cli/run/directory.py) and ``out`` (rich)."""

    def __init__(self, cfg: Any, rundir: Any, out: Any, prompts: Mapping[str, str], trackers: Any = None):
        self.cfg, self.rundir, self.out, self.prompts = cfg, rundir, out, prompts
        """``prompts``: uid -> the prompt as the model saw it (rendered), what the logs show."""
        self.trackers = trackers
        """Dashboards (vigor_cli/run/tracking.py): every line metrics.jsonl gets, and the completions."""
        self._last_check_status = ""
        self._isolation = ""

    def step(self, log: StepLog, weight_check: Any) -> None:
        """The step's lines, then the weight check's verdict (which may stop the run, the
        step logged), then the console line and, on schedule, the completions."""
        m = log.metrics
        self.rundir.append("metrics.jsonl", m)
        if self.trackers is not None:
            self.trackers.log_metrics(m)
        self.rundir.append("allocation.jsonl", log.record)
        if log.episodes:
            self.rundir.append_many("episodes.jsonl", log.episodes)
        self.weight_check(m["step"], weight_check)
        self.isolation(m)
        self.out.print(
            f"step {m['step']:>4}  reward {m['reward/mean']:.3f}{reward_parts(m)}  zero-var {m['groups/zero_var_frac']:.2f}  "
            f"{no_signal_text(m)}"
            f"rollouts {m['rollouts/step']} ({m['rollouts/cumulative']})  len {m['completions/mean_length']:.1f}  "
            f"loss {m['losses/loss']:+.4f}  clip {m['losses/clipfrac_low'] + m['losses/clipfrac_high']:.3f}  "
            f"gen {m['time/generate']:.1f}s rew {m['time/reward']:.1f}s upd {m['time/update']:.1f}s",
            highlight=False, soft_wrap=True,  # one line per step in a log file, at any width
        )
        every = self.cfg.train.log_completions_every
        if every and m["step"] % every == 0 and log.samples:
            shown = log.samples[:: max(1, len(log.samples) // COMPLETIONS_SHOWN)][:COMPLETIONS_SHOWN]
            rows = [
                {"step": m["step"], "uid": s.uid, "prompt": self.prompts[s.uid],
                 "text": s.rollout.text, "reward": s.reward, "reason": s.reason, "advantage": s.advantage,
                 **({"extra": s.extra} if s.extra else {}),
                 **(episode_record(s.rollout, EPISODE_TEXT_CHARS) if is_episode(s.rollout) else {})}
                for s in shown
            ]
            self.rundir.append_many("completions.jsonl", rows)
            if self.trackers is not None:
                self.trackers.log_completions(m["step"], rows)
            self.out.print(completions_table(m["step"], shown, self.prompts))

    def isolation(self, metrics: Mapping[str, Any]) -> None:
        """The sandbox's isolation level (``sandbox/isolation``), said when first seen and
        whenever it changes (a replaced worker may have less): ``full``, or what is missing,
        such as ``memory: rlimit only``."""
        level = metrics.get("sandbox/isolation")
        if level and level != self._isolation:
            style = "dim" if level == "full" else "bold yellow"
            self.out.print(f"sandbox isolation: {level}", style=style, highlight=False, markup=False)
            self._isolation = level

    def health_lines(self, lines: Sequence[str]) -> None:
        """Each health line (vigor_cli/train/health.py): on stderr, beside the progress bar (which
        redirects it above itself)."""
        from vigor_cli.console import err_console

        for line in lines:
            err_console.print(f"warning: {line}", style="yellow", markup=False, highlight=False, soft_wrap=True)

    def weight_check(self, step: int, wc: Any) -> None:
        """Stop (engine.weight_check=error) or warn when the check failed; say when it changes."""
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


def episode_lines(step: int, samples: Sequence[Sample]) -> list[dict]:
    """episodes.jsonl's lines of a step: every episode generated, in generation order, with
    its prompt, round, reward and whether the update used it (docs/episodes.md)."""
    lines = []
    for s in samples:
        episode = s.episode if s.episode is not None else s.rollout  # the TRL path: a gathered summary
        if is_episode(episode):
            lines.append({"step": step, "uid": s.uid, "index": s.index, "round": s.round + 1, "reward": s.reward,
                          "reason": s.reason, "in_update": s.in_update, "advantage": s.advantage,
                          **episode_record(episode, EPISODE_TEXT_CHARS)})
    return lines


def reward_parts(metrics: Mapping[str, Any]) -> str:
    """Each reward function's mean this step, `` (letters 0.62, format 0.90)``; empty for a
    task with one reward."""
    parts = [f"{k[len('reward/'):-len('/mean')]} {v:.3f}" for k, v in metrics.items()
             if k.startswith("reward/") and k.endswith("/mean") and k.count("/") == 2]
    return f" ({', '.join(parts)})" if parts else ""


def resume_command(run_dir: str | Path) -> str:
    """The command that continues the run in ``run_dir``."""
    return f"vigor train --resume {shlex.quote(str(run_dir))}"


def stop_status(signal_name: str, run_path: Path, loading: bool, step: int, of: str,
                checkpoint: Path | None, fresh: bool = False) -> str:
    """The one line a stopped run prints: where it stands and the command that resumes it.
    ``fresh``: a new run stopped while loading (its directory is removed again, RunDir.abandon)."""
    if loading and fresh:
        return f"{signal_name}: training stopped while loading, before a step; nothing was written"
    if loading:
        return (f"{signal_name}: training stopped while loading, before a step; run directory "
                f"{run_path}; resume with: {resume_command(run_path)}")
    saved = f"last checkpoint: {checkpoint.name}" if checkpoint else "no checkpoint yet, a resume starts over"
    return (f"{signal_name}: training stopped after step {step}{of} ({saved}); run directory "
            f"{run_path}; resume with: {resume_command(run_path)}")


def record_text(prompt: str, limit: int = 200) -> str:
    """A prompt as allocation.jsonl records it: its last ``limit`` characters (where a rendered
    chat prompt's question is), marked when cut."""
    return prompt if len(prompt) <= limit else "..." + prompt[-(limit - 3):]


def completions_table(step: int, samples: Sequence[Sample], prompts: Mapping[str, Any]):
    """The console's completions table; ``prompts`` maps a uid to the prompt as the model saw it
    (or to an Example, whose question is shown)."""
    from rich.table import Table

    from vigor_cli.console import literal

    table = Table(title=f"completions at step {step}", show_lines=True)  # natural width: never cut in a log file
    table.add_column("prompt")
    table.add_column("completion")
    table.add_column("reward", justify="right")
    table.add_column("advantage", justify="right")
    for s in samples:
        table.add_row(
            literal(_text(prompts[s.uid])[-300:]), literal(s.rollout.text[:400]),
            "unscored" if s.reward is None else f"{s.reward:.2f}", f"{s.advantage:+.3f}"
        )
    return table


def _text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else str(getattr(prompt, "question", prompt))


def progress(out: Any):
    """The training progress bar (steps, or rollouts under train.max_rollouts)."""
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
