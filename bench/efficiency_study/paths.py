"""Where the efficiency study lives and how it starts its child processes: the repository
root, the study's script, the committed results copy, paths relative to the repository (no
absolute paths in results) and the children's niceness and environment."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "efficiency.py"
"""The study's command line; child runs are this script with ``--child``."""

CHILD_NICE = int(os.environ.get("VIGOR_BENCH_NICE", "5"))
"""Niceness of every child run (the shared machine's convention for heavy work; the
environment variable VIGOR_BENCH_NICE overrides it); start the study itself without `nice`,
or the children inherit it on top of this."""


def child_env() -> dict[str, str]:
    """The environment of a child process: one thread each (the study runs ``jobs`` at a time)."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return env


def child_command(*args: str) -> list[str]:
    """A Python child process at ``CHILD_NICE`` running ``args``."""
    return ["nice", "-n", str(CHILD_NICE), sys.executable, *args]


def study_child(job: dict) -> list[str]:
    """The study's script as a child process doing one ``--child`` job (a run, a plateau start,
    the timing)."""
    return child_command(str(SCRIPT), "--child", json.dumps(job))


def rel_path(path: str | Path) -> str:
    """``path`` relative to the repository when inside it (no absolute paths in results)."""
    for candidate in (Path(os.path.abspath(path)), Path(path).resolve()):  # bench/results may be a link
        try:
            return str(candidate.relative_to(ROOT))
        except ValueError:
            continue
    return str(path)


PUBLISHED = ROOT / "bench" / "efficiency_results.json"
"""A compact copy of the full study's results, committed (bench/results/ is not)."""
