"""What `vigor train` prints when a run finishes: the accuracy change, where the run is, and
the command that exports its model (`vigor export`)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any


def export_command(run_dir: str | Path) -> str:
    """`vigor export` of the run's final checkpoint into ``<run>/export``; a LoRA run's is the
    merged model (without ``--merge-lora`` it is the adapter folder)."""
    from vigor_cli.run.directory import read_config

    lora = ((read_config(Path(run_dir)).get("model") or {}).get("lora") or {}).get("enabled", False)
    run = str(run_dir)
    return (f"vigor export {shlex.quote(run)} --out {shlex.quote(str(Path(run) / 'export'))}"
            + (" --merge-lora" if lora else ""))


def _pass_at_1(run_dir: Path) -> tuple[float, float, float] | None:
    """pass@1 of the custom set at the run's first and last evaluation, and the reward a sample
    passes at (None when not there)."""
    from vigor_cli.errors import UserError
    from vigor_cli.run.directory import RunDir
    from vigor_cli.user.files import LINE_MAX_BYTES, read_json

    steps = RunDir(run_dir).eval_steps()
    try:
        first, last = (read_json(steps[s], limit=LINE_MAX_BYTES)["sets"]["custom"] for s in (min(steps), max(steps)))
        return (float(first["metrics"]["pass@k"]["1"]), float(last["metrics"]["pass@k"]["1"]),
                float(last.get("pass_threshold", 1.0)))
    except (ValueError, KeyError, TypeError, OSError, UserError):  # no evaluation, or one without pass@1
        return None


def print_summary(summary: dict, console: Any) -> None:
    from vigor_cli.run.directory import read_config

    start, final = summary["start_accuracy"], summary["final_accuracy"]
    task = (read_config(Path(summary["run_dir"])).get("task") or {}).get("name")
    if task == "custom":  # a mean of your rewards (weighted sums, partial credit): not a pass rate in points
        passed = _pass_at_1(Path(summary["run_dir"]))
        change = f"{start:.3f} -> {final:.3f} ({final - start:+.3f})" + (
            f"; pass@1 (reward >= {passed[2]:g}) {passed[0]:.3f} -> {passed[1]:.3f}" if passed else "")
        what = "held-out reward"
    else:
        change = f"{start:.3f} -> {final:.3f} ({(final - start) * 100:+.1f} points)"
        what = "held-out accuracy"
    console.print(
        f"[bold]{what}[/] {change}  in {summary['wall_time']:.0f}s, {summary['rollouts']} rollouts",
        highlight=False, soft_wrap=True,
    )
    from vigor_cli.console import shown

    console.print(f"[bold]run directory[/] {shown(summary['run_dir'])}", highlight=False)
    console.print(f"[bold]export the model[/] {shown(export_command(summary['run_dir']))}",
                  highlight=False, soft_wrap=True)
