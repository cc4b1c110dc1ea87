"""Read a run directory (docs/run-directory.md) the way the readers need it.

A run may still be training while it is read: the writer appends one JSON
object per line, so the last line can be half written. ``read_jsonl`` ignores
an unreadable LAST line and says so in a note; an unreadable line anywhere
else is damage, reported as a :class:`UserError` naming file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from vigor_cli.config import load_yaml
from vigor_cli.errors import UserError


@dataclass
class JsonlContent:
    records: list[dict]
    notes: list[str] = field(default_factory=list)


def read_jsonl(path: Path) -> JsonlContent:
    """Every JSON object of a JSONL file; a partial last line is skipped with a note."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    lines = text.split("\n")
    # a file that ends with "\n" splits into a final empty string: not a line
    if lines and lines[-1] == "":
        lines.pop()
    records: list[dict] = []
    notes: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):
                notes.append(
                    f"{path}: ignored the partial last line {number} (still being written?)"
                )
                break
            raise UserError(f"{path}: line {number} is not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}: line {number} is not a JSON object")
        records.append(obj)
    return JsonlContent(records, notes)


@dataclass
class RunDir:
    """What the readers use of one run directory."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict]
    notes: list[str]

    @property
    def name(self) -> str:
        return self.path.name

    def config_value(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def check_run_dir(path: str | Path) -> Path:
    """The run directory as a Path, or a UserError saying what is missing."""
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"run directory not found: {p}")
    if not (p / "metrics.jsonl").is_file() and not (p / "allocation.jsonl").is_file():
        raise UserError(
            f"{p}: not a run directory (no metrics.jsonl or allocation.jsonl; "
            "see docs/run-directory.md)"
        )
    return p


def read_config(path: Path) -> dict[str, Any]:
    """The run's resolved config.yaml as a plain dict ({} when absent)."""
    cfg_path = path / "config.yaml"
    return load_yaml(cfg_path) if cfg_path.is_file() else {}


def load_run(path: str | Path) -> RunDir:
    """Config and metrics of a run (metrics may be empty for a run that just started)."""
    p = check_run_dir(path)
    metrics_path = p / "metrics.jsonl"
    content = read_jsonl(metrics_path) if metrics_path.is_file() else JsonlContent([])
    return RunDir(p, read_config(p), content.records, content.notes)
