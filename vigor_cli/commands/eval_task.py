"""`vigor eval` on a task's own sets: a run's (``--run``), an exported folder's, or the user's
(``--data``/``--eval-data`` with ``--reward``, the task flags of `vigor train`): says what it
evaluates and with which settings, runs vigor_cli/evaluate/task_eval.py, prints the table and writes
the results file."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Optional

from vigor_cli.console import console, err_console, shown
from vigor_cli.errors import UserError


def evaluate_task(model: Optional[str], adapter: Optional[Path], base: Optional[str], run: Optional[Path],
                  checkpoint: Optional[str], keys: dict[str, Any], sets: Optional[list[str]], n: Optional[int],
                  temperature: Optional[float], top_p: Optional[float], max_new_tokens: Optional[int],
                  seed: Optional[int], limit: Optional[int], engine: Optional[str], device: Optional[str],
                  output: Optional[Path]) -> None:
    from vigor_cli.evaluate import task_eval
    from vigor_cli.commands.train import FLAG_OF_KEY
    from vigor_cli.report.eval_results import write_results
    from vigor_cli.report.eval_table import task_results_table
    from vigor_cli.settings import set_key

    def say(line: str) -> None:
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)

    def warn(message: str) -> None:
        err_console.print(f"[yellow]warning:[/] {shown(message)}", highlight=False, soft_wrap=True)

    output = Path(os.path.abspath(output)) if output is not None else None  # before a move to the launch folder
    where: Any = contextlib.nullcontext()
    if run is not None:
        if model is not None or adapter is not None or base is not None:
            raise UserError("--run evaluates a run's checkpoint: drop MODEL, --adapter and --base")
        target, rundir = task_eval.run_target(run, checkpoint, keys, sets, FLAG_OF_KEY, warn)
        where = rundir.in_launch_dir(say, "evaluating")
    else:
        if checkpoint is not None:
            raise UserError("--checkpoint needs --run")
        if model is None:
            raise UserError("give a MODEL (hub id, directory, an exported folder or 'tiny') or --run RUN_DIR")
        target = task_eval.model_target(model, adapter, base, keys, sets, FLAG_OF_KEY)
    if engine is not None:
        set_key(target.cfg, "engine.kind", engine, "--engine")
    if device is not None:
        set_key(target.cfg, "model.device", device, "--device")
    sampling = task_eval.sampling_of(target, n, temperature, top_p, max_new_tokens, seed)
    with where:
        task, held_out = task_eval.load_sets(target, limit)
        try:
            for line in task_eval.describe(target, held_out, sampling, task):
                say(line)
            held = task_eval.evaluate_target(target, task, held_out, sampling, announce=say)
            logged = task.logged_metrics()
        finally:
            task_eval.close(target, task)
    results = task_eval.results_of(held, target, sampling, logged)
    if output is not None:
        write_results(results, output)
    title = target.desc.get("run") or target.desc.get("adapter") or target.desc["name_or_path"]
    console.print(task_results_table(results, f"{title}: n={sampling['n']}, temperature={sampling['temperature']:g}"))
    if output is not None:
        console.print(f"results: {shown(output)}", highlight=False)
