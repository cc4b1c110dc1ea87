"""What `vigor train` prints when a run finishes: the accuracy change, where the run is, and
the command that exports its model (`vigor export`)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any


def export_command(run_dir: str | Path) -> str:
    """`vigor export` of the run's final checkpoint into ``<run>/export``; a LoRA run's is the
    merged model (without ``--merge-lora`` it is the adapter folder)."""
    from vigor_cli.runs import read_config

    lora = ((read_config(Path(run_dir)).get("model") or {}).get("lora") or {}).get("enabled", False)
    run = str(run_dir)
    return (f"vigor export {shlex.quote(run)} --out {shlex.quote(str(Path(run) / 'export'))}"
            + (" --merge-lora" if lora else ""))


def print_summary(summary: dict, console: Any) -> None:
    start, final = summary["start_accuracy"], summary["final_accuracy"]
    console.print(
        f"[bold]held-out accuracy[/] {start:.3f} -> {final:.3f} ({(final - start) * 100:+.1f} points)  "
        f"in {summary['wall_time']:.0f}s, {summary['rollouts']} rollouts",
        highlight=False,
    )
    from vigor_cli.console import shown

    console.print(f"[bold]run directory[/] {shown(summary['run_dir'])}", highlight=False)
    console.print(f"[bold]export the model[/] {shown(export_command(summary['run_dir']))}",
                  highlight=False, soft_wrap=True)
