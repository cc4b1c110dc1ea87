"""The run directory (docs/run-directory.md): config, JSONL logs, checkpoints, summary.

Everything is written so that a SIGKILL at any moment leaves a directory a
resume can continue from: JSON files and checkpoints are written to a
temporary name and renamed into place (atomic on one file system), JSONL
lines are appended whole and flushed, and on resume the logs are cut back to
the checkpoint's step (dropping a half-written last line) before the run
continues.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from vigor_cli.config import RunConfig, dump_config
from vigor_cli.errors import UserError

LOGS = ("metrics.jsonl", "allocation.jsonl", "completions.jsonl")


def default_run_name(cfg: RunConfig) -> str:
    date = _dt.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    return f"{date}-{cfg.task.name}-{cfg.allocation.strategy}-s{cfg.train.seed}"


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict]:
    """Whole JSON lines of ``path``; a torn last line (killed mid-write) is skipped."""
    rows = []
    if not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class RunDir:
    """One run's directory: ``<train.output_dir>/<run_name>/``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.eval_dir = self.path / "eval"

    # ------------------------------------------------------------------ creation
    @classmethod
    def planned(cls, cfg: RunConfig) -> "RunDir":
        """The directory a new run will use; refuses one that already holds files."""
        name = cfg.train.run_name or default_run_name(cfg)
        path = Path(cfg.train.output_dir) / name
        if path.exists() and any(path.iterdir()):
            raise UserError(
                f"train.run_name: run directory {path} already exists; pick another --run-name "
                f"or continue it with --resume {path}"
            )
        return cls(path)

    def make(self, cfg: RunConfig) -> "RunDir":
        """Create the directory and write the resolved config."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.eval_dir.mkdir(exist_ok=True)
        self.write_config(cfg)
        return self

    @classmethod
    def create(cls, cfg: RunConfig) -> "RunDir":
        return cls.planned(cfg).make(cfg)

    @classmethod
    def open_existing(cls, path: str | Path) -> "RunDir":
        run = cls(Path(path))
        if not (run.path / "config.yaml").is_file():
            raise UserError(f"--resume {path}: not a run directory (no config.yaml)")
        return run

    def write_config(self, cfg: RunConfig) -> None:
        tmp = self.path / ".config.yaml.tmp"
        tmp.write_text(dump_config(cfg))
        os.replace(tmp, self.path / "config.yaml")

    # ------------------------------------------------------------------ logs
    def append(self, log: str, row: dict) -> None:
        with open(self.path / log, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()

    def append_many(self, log: str, rows: Iterable[dict]) -> None:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if text:
            with open(self.path / log, "a") as f:
                f.write(text)
                f.flush()

    def cut_logs_after(self, step: int) -> None:
        """Drop log lines of steps after ``step`` (written after the last checkpoint)."""
        for log in LOGS:
            path = self.path / log
            if not path.exists():
                continue
            kept = [r for r in read_jsonl(path) if int(r.get("step", 0)) <= step]
            tmp = path.with_name(f".{log}.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            os.replace(tmp, path)
        for f in self.eval_dir.glob("step-*.json"):
            if int(f.stem.split("-")[1]) > step:
                f.unlink()

    def metrics(self) -> list[dict]:
        return read_jsonl(self.path / "metrics.jsonl")

    def write_eval(self, step: int, result: dict) -> None:
        self.eval_dir.mkdir(exist_ok=True)
        write_json_atomic(self.eval_dir / f"step-{step}.json", result)

    def write_summary(self, summary: dict) -> None:
        write_json_atomic(self.path / "summary.json", summary)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_steps(self) -> list[int]:
        steps = []
        for d in self.checkpoints.glob("step-*"):
            if d.is_dir() and (d / "COMPLETE").exists():
                steps.append(int(d.name.split("-")[1]))
        return sorted(steps)

    def latest_checkpoint(self) -> Path | None:
        steps = self.checkpoint_steps()
        return self.checkpoints / f"step-{steps[-1]}" if steps else None

    def begin_checkpoint(self, step: int) -> Path:
        """A fresh temporary directory to fill; :meth:`commit_checkpoint` publishes it."""
        tmp = self.checkpoints / f".tmp-step-{step}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        return tmp

    def commit_checkpoint(self, tmp: Path, step: int, keep: int) -> Path:
        (tmp / "COMPLETE").write_text(str(step))
        final = self.checkpoints / f"step-{step}"
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in self.checkpoint_steps()[:-keep]:
            shutil.rmtree(self.checkpoints / f"step-{old}", ignore_errors=True)
        for stale in self.checkpoints.glob(".tmp-step-*"):
            shutil.rmtree(stale, ignore_errors=True)
        return final
