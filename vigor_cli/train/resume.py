"""What ``vigor train --resume`` checks and changes before it continues a run.

Details: docs/modules.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from vigor_cli.atomic import write_text_atomic
from vigor_cli.run.checkpoints import step_of
from vigor_cli.config import RunConfig, load_yaml
from vigor_cli.errors import UserError
from vigor_cli.user.jsonl import JsonlContent
from vigor_cli.run.logs import LOGS, read_eval_line

if TYPE_CHECKING:
    from vigor_cli.run.directory import RunDir

Warn = Callable[[str], Any]
_KEEP = ("resume keeps every logged line and re-runs only later steps: restore the file "
         "from a copy, or start a new run")
_LOST = "resume would re-run and overwrite it: restore the checkpoints from a copy, or start a new run"


@dataclass
class ResumePlan:
    """What :func:`prepare` decided: the config to run, the checkpoint, and what to re-log."""

    cfg: RunConfig
    checkpoint: Path | None
    step: int
    """The checkpoint's step (-1: no checkpoint, the run starts over)."""
    relog: list[int] = field(default_factory=list)

    def apply(self, run: "RunDir", warn: Warn, relog_eval: Callable[[int], None]) -> None:
        """Cut the logs back to the checkpoint, log its evaluation again where its line was
        torn, and save the config (``--steps`` included). Call once the trainer is loaded."""
        keep_logs_until(run, self.step, warn)
        for step in self.relog:
            warn(f"{run.path / 'metrics.jsonl'}: logged the evaluation of step {step} again from eval/step-{step}.json")
            relog_eval(step)
        run.write_config(self.cfg)


def prepare(run: "RunDir", steps: int | None, warn: Warn) -> ResumePlan:
    """Every check above, reading only (the run's lock is held); refusals are one line."""
    from vigor_cli.settings import build_config

    refuse_trl_run(run)
    cfg = build_config(run.path / "config.yaml")
    checkpoint = run.store.newest_intact(warn)
    check_resume_config(run, cfg, checkpoint, steps, warn)
    at = step_of(checkpoint)
    keep_logs_until(run, at, warn, dry_run=True)  # damaged lines refuse before the model loads
    check_covered(run, at, cfg.train.save_every)  # so do lines no checkpoint on disk covers
    relog = check_history(run, at, cfg.train.log_completions_every)  # and lost ones it covers
    if steps is not None:
        cfg.train.steps = steps
    return ResumePlan(cfg, checkpoint, at, relog)


def refuse_trl_run(run: "RunDir") -> None:
    """A run trained through TRL (its record says so) resumes through TRL: its checkpoints hold
    Transformers' optimizer and RNG files, not vigor train's trainer_state.pt."""
    import json

    from vigor_cli.run.provenance import RECORD

    try:
        trainer = json.loads((run.path / RECORD).read_text()).get("trainer")
    except (OSError, ValueError, AttributeError, RecursionError):
        return
    if trainer == "trl":
        raise UserError(f"--resume {run.path}: a run trained through TRL; resume it with "
                        f"python -m vigor_cli.integrations.trl --resume {run.path}")


# --------------------------------------------------------------------------- the config
_MAY_DIFFER = ("train.output_dir", "train.run_name")
"""Keys a run's config.yaml may hold differently from its checkpoint's (a moved directory)."""


def _flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_resume_config(run: "RunDir", cfg: RunConfig, checkpoint: Path | None, steps: int | None,
                        warn: Warn) -> None:
    """Refuse a resume whose config disagrees with the checkpoint's, naming the keys.

    ``train.steps`` may change (``--steps``, or edited in config.yaml: applied, with a
    note) but never below the checkpoint's step: a run is kept or extended, not shortened.
    Any other edited key (a seed, a learning rate) is refused, never half-applied.
    """
    at = step_of(checkpoint)
    target = steps if steps is not None else cfg.train.steps
    if target < at:
        flag = f"--steps {steps}" if steps is not None else f"{run.path / 'config.yaml'}: train.steps={target}"
        raise UserError(f"{flag}: the run's checkpoint is at step {at}; a resume keeps or extends a "
                        f"run, it cannot shorten it (use --steps {at} or more)")
    saved = checkpoint / "config.yaml" if checkpoint is not None else None
    if saved is None or not saved.is_file():
        return  # no checkpoint yet, or one written before checkpoints carried their config
    now, then = _flat(load_yaml(run.path / "config.yaml")), _flat(load_yaml(saved))
    changed = [k for k in sorted(now.keys() | then.keys())
               if now.get(k) != then.get(k) and k not in _MAY_DIFFER]
    if "train.steps" in changed:
        changed.remove("train.steps")
        if steps is None:
            warn(f"train.steps {then.get('train.steps')} -> {now.get('train.steps')} (edited in config.yaml): applied")
    if changed:
        diffs = ", ".join(f"{k} is {now.get(k)!r} (the checkpoint has {then.get(k)!r})" for k in changed)
        raise UserError(f"{run.path / 'config.yaml'}: {diffs}; a resume continues the run's saved config: "
                        "restore the value, or start a new run with the new one")


# --------------------------------------------------------------------------- the logs
def keep_logs_until(run: "RunDir", step: int, warn: Warn, dry_run: bool = False) -> None:
    """Cut the logs back to ``step`` (the checkpoint's) before a resume re-runs later steps.

    Lines up to ``step`` are kept byte for byte; a torn last line is removed with a
    warning; any other damaged line refuses the resume, naming ``file:line``.
    ``dry_run`` only reads (the check made before the model loads).
    """
    for log in LOGS:
        path = run.path / log
        if not path.is_file():
            continue
        try:
            content = run.log.read(log)
        except UserError as e:
            raise UserError(f"--resume: {e}; resume keeps every logged line: repair or delete "
                            "that line by hand, then resume again") from None
        late = {i for i, r in enumerate(content.records) if r["step"] > step}
        data = path.read_bytes()
        if dry_run or not (late or content.torn_at is not None or data[-1:] not in (b"", b"\n")):
            continue  # (a whole last line killed before its newline gets one: the next append)
        if content.torn_at is not None:
            warn(f"{path}:{content.torn_line}: removed a torn last line (cut short when the run stopped)")
        kept = b"".join(data[a:b] for i, (a, b) in enumerate(content.spans) if i not in late)
        write_text_atomic(path, kept if kept.endswith(b"\n") or not kept else kept + b"\n")
    for s, f in run.log.eval_steps().items():
        if s > step and not dry_run:
            f.unlink()


def check_covered(run: "RunDir", step: int, save_every: int) -> None:
    """Refuse a resume (from ``step``) that would rewrite logged steps no checkpoint on disk
    covers (the rule in the module docstring), naming the file and the first such step."""
    on_disk_steps = run.store.step_dirs()  # damaged ones too: the resume warned about them
    newest = max([0, step, *on_disk_steps])  # (0: a run without checkpoint starts there)
    horizon = newest + save_every if save_every else None
    on_disk = (f"the newest checkpoint on disk is step-{max(on_disk_steps)}" if on_disk_steps
               else f"{run.store.root} holds no checkpoint")
    if horizon is not None:
        for log in LOGS:
            path = run.path / log
            late = [s for s, _ in (run.log.steps(log) if path.is_file() else []) if s > horizon]
            if late:
                raise UserError(f"--resume: {path}: step {min(late)} is logged, but no checkpoint covers it "
                                f"({on_disk}; a stopped run logs at most up to its next checkpoint, step "
                                f"{horizon}); {_LOST}")
        late_evals = sorted(s for s in run.log.eval_steps() if s > horizon)
        if late_evals:
            raise UserError(f"--resume: {run.log.eval_dir / f'step-{late_evals[0]}.json'}: the evaluation of step "
                            f"{late_evals[0]} is saved, but no checkpoint covers it ({on_disk}); {_LOST}")
    summary = run.log.summary()
    final = summary.get("steps") if summary else None
    if isinstance(final, int) and final > newest:
        raise UserError(f"--resume: {run.path / 'summary.json'}: the run finished step {final}, but no checkpoint "
                        f"of that step is on disk ({on_disk}); {_LOST}")


def _require(path: Path, step: int, what: str, missing: set[int]) -> None:
    if missing:
        first = min(missing)
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UserError(f"--resume: {path}: the {what} of step {first} is missing{more}, and the "
                        f"checkpoint (step {step}) covers it; {_KEEP}")


def _torn_step(path: Path, content: JsonlContent) -> int | None:
    """The step a torn last line was written for, when its prefix says so."""
    if content.torn_at is None:
        return None
    with open(path, "rb") as f:
        f.seek(content.torn_at)
        m = re.match(rb'\s*\{"step": (\d+)[,}]', f.read(64))
    return int(m.group(1)) if m else None


def _covered(run: "RunDir", log: str, step: int) -> list[tuple[int, dict]]:
    """(step, record) of a log's lines; the file must exist when the checkpoint covers steps."""
    path = run.path / log
    if not path.is_file():
        raise UserError(f"--resume: {path}: no such file, and the checkpoint (step {step}) covers "
                        f"its lines up to step {step}; {_KEEP}")
    return run.log.steps(log)


def check_history(run: "RunDir", step: int, completions_every: int = 0) -> list[int]:
    """Refuse a resume whose logs lack a line the checkpoint at ``step`` covers, naming
    the file and the step (a resume re-runs only later steps, so a lost line would stay
    lost, or leave a gap). Reads only; call it after ``keep_logs_until(dry_run=True)``.

    ``completions_every`` is ``train.log_completions_every``: each covered step it names
    whose update kept a group logged completions. Returns the evaluation steps to log
    again: the checkpoint's own evaluation, whose line a cut-short write lost while
    ``eval/step-N.json`` was written (the trainer logs it again from that file, as the
    uninterrupted run did).
    """
    if step < 0:
        return []  # no checkpoint: every line is re-run
    metrics = _covered(run, "metrics.jsonl", step)
    evals = {s for s, r in metrics if "eval/accuracy" in r}
    _require(run.path / "metrics.jsonl", step, "training line",
             set(range(1, step + 1)) - {s for s, r in metrics if "eval/accuracy" not in r})
    lost = {s for s in run.log.eval_steps() if s <= step and s not in evals}
    _require(run.path / "metrics.jsonl", step, "evaluation line", lost - {step})
    records = _covered(run, "allocation.jsonl", step)
    _require(run.path / "allocation.jsonl", step, "record", set(range(1, step + 1)) - {s for s, _ in records})
    path = run.path / "completions.jsonl"
    shown = {s for s, r in metrics if completions_every and 0 < s <= step and s % completions_every == 0
             and "eval/accuracy" not in r and r.get("groups/count", 0)}  # the steps that logged some
    content = run.log.read("completions.jsonl")
    torn = _torn_step(path, content)
    if torn is not None and torn <= step:
        raise UserError(f"--resume: {path}:{content.torn_line}: the line of step {torn} is cut short "
                        f"and the checkpoint (step {step}) covers it; {_KEEP}")
    if shown:
        _require(path, step, "completions line", shown - {s for s, _ in _covered(run, "completions.jsonl", step)})
    check_episodes(run, step, metrics)
    if lost:
        read_eval_line(run.log.eval_steps()[step])  # damaged: refused before anything changes
    return sorted(lost)


def check_episodes(run: "RunDir", step: int, metrics: list[tuple[int, dict]]) -> None:
    """A run with an environment logs every episode of every step in episodes.jsonl, as many
    lines as its metrics line counts (``episodes/ended/...``): refuse a resume whose file is
    gone, lacks a covered step's lines, or ends in a torn line of a covered step."""
    counts = {s: sum(v for k, v in r.items() if k.startswith("episodes/ended/")) for s, r in metrics
              if 0 < s <= step and "eval/accuracy" not in r and any(k.startswith("episodes/ended/") for k in r)}
    if not counts:
        return
    path = run.path / "episodes.jsonl"
    lines = _covered(run, "episodes.jsonl", step)
    torn = _torn_step(path, run.log.read("episodes.jsonl"))
    if torn is not None and torn <= step:
        raise UserError(f"--resume: {path}: the last line, of step {torn}, is cut short and the checkpoint "
                        f"(step {step}) covers it; {_KEEP}")
    have: dict[int, int] = {}
    for s, _ in lines:
        have[s] = have.get(s, 0) + 1
    short = sorted(s for s, n in counts.items() if have.get(s, 0) < n)
    if short:
        first = short[0]
        more = f" (and {len(short) - 1} more steps)" if len(short) > 1 else ""
        raise UserError(f"--resume: {path}: step {first} has {have.get(first, 0)} of its {counts[first]} episode "
                        f"lines{more}, and the checkpoint (step {step}) covers it; {_KEEP}")
