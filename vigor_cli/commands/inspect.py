"""`vigor inspect-allocation RUN`: which prompts got which rollouts, and why.

Reads allocation.jsonl as it is (a run still training included: a partial
last line is skipped with a note). Definitions of the summary figures are in
:mod:`vigor_cli.report.allocation`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.console import console, err_console, print_json, shown
from vigor_cli.errors import UserError


def inspect_allocation(
    run: Annotated[Path, typer.Argument(help="Run directory (written by `vigor train`).")],
    step: Annotated[Optional[int], opt.count("--step", low=0, help="Show this step.")] = None,
    last: Annotated[Optional[int], opt.count("--last", help="Show the last K steps (default: the last one).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    text_width: Annotated[int, opt.count("--text-width", help="Characters of prompt text shown per row.")] = 60,
    overview_rows: Annotated[int, opt.count("--overview-rows", help="Rows of the across-steps overview (steps are sampled evenly beyond this).")] = 20,
    episodes: Annotated[int, opt.count("--episodes", low=0, help="A run with an environment (task.env): "
                                       "each prompt's first K episodes of the step, turn by turn (0: none).")] = 1,
) -> None:
    """Per-step tables of prompts and their rollouts per round (and, for a run with an
    environment, its episodes turn by turn), and an overview across steps."""
    from vigor_cli.run import provenance
    from vigor_cli.report import allocation_view as view
    from vigor_cli.report.provenance_view import print_records
    from vigor_cli.report.allocation import load_allocation, summarize_step
    from vigor_cli.run.directory import check_run_dir, read_config

    if step is not None and last is not None:
        raise UserError("give --step or --last, not both")
    run_path = check_run_dir(run)
    steps, notes = load_allocation(run_path, read_config(run_path))
    for note in notes:
        err_console.print(f"[yellow]note:[/] {shown(note)}", highlight=False, soft_wrap=True)
    chosen = choose_steps(steps, step, last)
    held = health_by_step(run_path)
    summaries = [{**summarize_step(s), "health": held.get(s.step, {})} for s in steps]
    record = provenance.read(run_path)
    from vigor_cli.report.episodes_view import by_prompt, load_step_episodes, print_episodes, with_episode_text

    if as_json:
        out = view.as_json(run_path, chosen, summaries, notes, held)
        for s, entry in zip(chosen, out["steps"]):
            found = load_step_episodes(run_path, s.step) if episodes else []
            if found:
                entry["episodes"] = [e for mine in by_prompt(found, episodes).values() for e in mine]
        print_json({**out, "provenance": record})
        return
    print_records(console, {run_path.name: record})
    for s in chosen:
        view.print_step(console, with_episode_text(s, load_step_episodes(run_path, s.step)), text_width,
                        held.get(s.step, {}))
        if episodes:
            print_episodes(console, s.step, load_step_episodes(run_path, s.step), episodes, max(text_width, 100))
    view.print_overview(console, summaries, overview_rows)


def health_by_step(run_path: Path) -> dict[int, dict[str, float]]:
    """Step -> {check: its value} for the health checks that held (metrics.jsonl
    ``health/<check>/alert``, vigor_cli/train/health.py); empty for a run without them."""
    from vigor_cli.run.directory import RunDir

    path = run_path / "metrics.jsonl"
    if not path.is_file():
        return {}
    out: dict[int, dict[str, float]] = {}
    for rec in RunDir(run_path).read_log("metrics.jsonl").records:
        held = {k[len("health/"):-len("/alert")]: rec.get(k[: -len("/alert")])
                for k, v in rec.items() if k.startswith("health/") and k.endswith("/alert") and v}
        if held:
            out[rec["step"]] = held
    return out


def choose_steps(steps: list, step: Optional[int], last: Optional[int]) -> list:
    """The step asked for (refused, naming the range, when it has no record), or the last K."""
    if step is None:
        return steps[-(last or 1):]
    chosen = [s for s in steps if s.step == step]
    if not chosen:
        have = f"{steps[0].step}..{steps[-1].step}"
        raise UserError(f"--step {step}: no record for that step in allocation.jsonl (has {have})")
    return chosen
