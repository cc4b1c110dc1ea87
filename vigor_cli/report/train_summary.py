"""What `vigor train` prints when a run finishes: the accuracy change and where the run is."""

from __future__ import annotations

from typing import Any


def print_summary(summary: dict, console: Any) -> None:
    start, final = summary["start_accuracy"], summary["final_accuracy"]
    console.print(
        f"[bold]held-out accuracy[/] {start:.3f} -> {final:.3f} ({(final - start) * 100:+.1f} points)  "
        f"in {summary['wall_time']:.0f}s, {summary['rollouts']} rollouts",
        highlight=False,
    )
    console.print(f"[bold]run directory[/] {summary['run_dir']}", highlight=False)
