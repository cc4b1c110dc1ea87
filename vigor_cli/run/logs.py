"""A run's log: ``metrics.jsonl``, ``allocation.jsonl``, ``completions.jsonl``, ``eval/`` and
``summary.json`` (formats in docs/run-directory.md), written by the trainer, read by all.

Lines are appended whole and JSON files replaced atomically, so a write cut short leaves
at most a torn last line (the rule of :mod:`vigor_cli.user.jsonl`). Every reader goes through
:meth:`RunLog.read`, which also checks each line against the format: every line has a
``step`` (an integer >= 0), and the metrics the tools compute with hold numbers of the
right range (:func:`check_metrics_line`), so a damaged or hand-edited line is one error
naming ``file:line`` instead of a traceback or a silently wrong plot.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Iterable

from vigor_cli.atomic import disk_errors, write_json_atomic
from vigor_cli.errors import UserError
from vigor_cli.user.jsonl import JsonlContent, read_jsonl
from vigor_cli.user.records import kind_of
from vigor_cli.user.files import loads

LOGS = ("metrics.jsonl", "allocation.jsonl", "completions.jsonl", "episodes.jsonl")
"""The run logs of JSONL lines, each line with its step (episodes.jsonl: runs with task.env)."""
_EVAL_FILE = re.compile(r"^step-(\d+)\.json$")

# What each metrics key holds: (pattern, lowest, highest, NaN allowed, null allowed).
_METRIC_RULES: tuple[tuple[re.Pattern, float | None, float | None, bool, bool], ...] = tuple(
    (re.compile(p), lo, hi, nan, null) for p, lo, hi, nan, null in (
        (r"eval/(.+/)?accuracy", None, None, False, False),  # a mean reward: your own rewards may pass 1
        (r"(eval/(.+/)?|reward/)pass_rate", 0.0, 1.0, False, False),
        (r"eval/samples|rollouts/(step|cumulative|zero_variance)|tokens/(step|cumulative)|groups/count", 0.0, None, False, False),
        (r"completions/(mean|max)_length|time/[^/]+|lr", 0.0, None, False, False),
        (r"groups/zero_var_frac|completions/truncated_frac|rollouts/zero_variance_share", 0.0, 1.0, False, False),
        (r"reward/(mean|std)", None, None, False, False),
        (r"losses/[^/]+", None, None, True, False),  # a diverged update is a fact, not damage
        (r"engine/[^/]+", None, None, True, True),  # null: not checked that step
    )
)


def _range(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"a number in [{lo:g}, {hi:g}]"
    return "a number >= 0" if lo is not None else "a finite number"


def check_step(row: dict, where: str) -> int:
    """The line's ``step``: present, an integer, >= 0."""
    if "step" not in row:
        raise UserError(f"{where}: no 'step' (every line of a run log has one; see docs/run-directory.md)")
    step = row["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise UserError(f"{where}: 'step' is {step!r} ({kind_of(step)}); expected an integer >= 0")
    return step


def check_metrics_line(row: dict, where: str) -> dict:
    """``row`` when its step and every documented metric hold what they must; else one
    UserError naming ``where`` (``file:line``) and the key. Keys not documented (an
    integration's own) are left alone."""
    check_step(row, where)
    for key, value in row.items():
        rule = next((r for r in _METRIC_RULES if r[0].fullmatch(key)), None)
        if rule is None:
            continue
        _, lo, hi, nan_ok, null_ok = rule
        if value is None and null_ok:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        bad = not number
        if number and not math.isfinite(value):
            bad = not (nan_ok and math.isnan(value))
        elif number:
            bad = (lo is not None and value < lo) or (hi is not None and value > hi)
        if bad:
            shown = f"{value!r}" if number or isinstance(value, str) else kind_of(value)
            raise UserError(f"{where}: {key!r} is {shown[:60]}; expected {_range(lo, hi)}")
    return row


class RunLog:
    """The log files of one run directory: appends and atomic JSON writes (the trainer,
    which holds the run's lock), checked reads (everyone, lock or not)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.eval_dir = self.path / "eval"
        self.notes: list[str] = []
        """What the readers skipped (a torn last line), for the commands to print."""

    # ------------------------------------------------------------------ writing
    def append(self, log: str, row: dict) -> None:
        self.append_many(log, [row])

    def append_many(self, log: str, rows: Iterable[dict]) -> None:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if text:
            with disk_errors(self.path / log), open(self.path / log, "a") as f:
                f.write(text)
                f.flush()

    def write_eval(self, step: int, result: dict) -> None:
        with disk_errors(self.eval_dir):
            self.eval_dir.mkdir(exist_ok=True)
        write_json_atomic(self.eval_dir / f"step-{step}.json", result)

    def write_summary(self, summary: dict) -> None:
        write_json_atomic(self.path / "summary.json", summary)

    # ------------------------------------------------------------------ reading
    def read(self, log: str, missing_ok: bool = True) -> JsonlContent:
        """A log's records under the torn-last-line rule, each line checked (its step; for
        metrics.jsonl, its metrics); notes land in :attr:`notes`."""
        path = self.path / log
        if missing_ok and not path.is_file():
            return JsonlContent([])
        content = read_jsonl(path)
        check = check_metrics_line if log == "metrics.jsonl" else check_step
        for row, line in zip(content.records, content.lines):
            check(row, f"{path}:{line}")
        self.notes.extend(n for n in content.notes if n not in self.notes)
        return content

    def steps(self, log: str) -> list[tuple[int, dict]]:
        """(step, record) of every line of ``log`` (which must exist)."""
        return [(r["step"], r) for r in self.read(log, missing_ok=False).records]

    def metrics(self) -> list[dict]:
        return self.read("metrics.jsonl").records

    def eval_steps(self) -> dict[int, Path]:
        """The trainer's evaluation files by step (other files in eval/, e.g. a rescored
        copy ``step-6.rescored.json``, are the user's and are left alone)."""
        found = {}
        for f in self.eval_dir.glob("step-*.json"):
            m = _EVAL_FILE.match(f.name)
            if m:
                found[int(m.group(1))] = f
        return found

    def summary(self) -> dict | None:
        """``summary.json`` (None when the run has not finished); damage is one line."""
        path = self.path / "summary.json"
        if not path.is_file():
            return None
        try:
            data = loads(path.read_text())
        except (OSError, ValueError, RecursionError) as e:
            raise UserError(f"{path}: damaged ({type(e).__name__}: {str(e)[:120]}); restore it or delete it") from None
        if not isinstance(data, dict):
            raise UserError(f"{path}: damaged (not a JSON object); restore it or delete it")
        return data


def read_eval_line(path: Path) -> dict:
    """An evaluation file ``eval/step-N.json``, checked for what its metrics.jsonl line reads
    (vigor_cli/evaluation.eval_line_of): step, accuracy, and per set accuracy, samples, metrics."""
    try:
        data = loads(path.read_text())
        int(data["step"]), float(data["accuracy"])
        for s in data["sets"].values():
            float(s["accuracy"]), len(s["samples"]), dict(s["metrics"]["pass@k"])
        return data
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise UserError(f"--resume: {path}: damaged ({type(e).__name__}: {e}); it holds the checkpoint's "
                        "evaluation, whose metrics.jsonl line was cut short: restore it, or start a new run") from None
