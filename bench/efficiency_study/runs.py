"""Training the study's runs: one run as `vigor train` with a rollout budget (a child process),
every unfinished run of a plan ``jobs`` at a time, and the interleaved per-rollout timing."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .design import ARM_SETS, BASELINE, RunSpec
from .paths import ROOT, child_env, study_child

def run_one(spec: RunSpec) -> dict:
    """Train until ``total_rollouts`` rollouts were generated, evaluating every
    ``eval_every_rollouts``: `vigor train`'s own entry point (vigor_cli.train.trainer.train) with
    train.max_rollouts and train.eval_every_rollouts, so a study run is a `vigor train` run."""
    import torch
    from rich.console import Console

    from vigor_cli.train.trainer import train

    torch.set_num_threads(1)
    run_dir = Path(spec.run_dir)
    summary = train(study_config(spec), out=Console(file=sys.stdout, width=160, force_terminal=False))
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the study reads the logs only
    (run_dir / "spec.json").write_text(json.dumps(asdict(spec), indent=1) + "\n")  # marks the run finished
    return summary


def study_config(spec: RunSpec) -> Any:
    """The run's config: the task's bundled config, the spec's overrides, and the stop and
    evaluation schedule by rollouts (train.steps only as a bound)."""
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config

    run_dir = Path(spec.run_dir)
    sets = [
        f"model.name_or_path={spec.model}",
        f"train.seed={spec.seed}",
        f"train.output_dir={run_dir.parent}",
        f"train.run_name={run_dir.name}",
        "train.steps=100000",
        f"train.max_rollouts={spec.total_rollouts}",
        "train.eval_every=0",
        f"train.eval_every_rollouts={spec.eval_every_rollouts}",
        "train.save_every=0",  # the final checkpoint only
        "train.log_completions_every=0",
        "train.reward_workers=1",
        *spec.sets,
    ]
    return build_config(default_config_file(None, spec.task), overrides={"task.name": spec.task}, sets=sets)


def timing(model: str, arms: list[str], steps: int, prompts_per_step: int, workdir: Path) -> dict:
    """Seconds per rollout of each arm, measured in one process with the arms' steps
    interleaved (A B A B ...), so machine load hits every arm alike; wall and CPU time of
    the process (CPU time is immune to other processes on the machine). The first step of
    each arm is a warm-up and not counted."""
    import torch
    from rich.console import Console

    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config
    from vigor_cli.run.directory import RunDir
    from vigor_cli.train.trainer import Trainer

    torch.set_num_threads(1)
    quiet = Console(file=open(os.devnull, "w"))
    trainers = {}
    for arm in arms:
        sets = [f"model.name_or_path={model}", f"train.prompts_per_step={prompts_per_step}",
                f"train.output_dir={workdir}", f"train.run_name=timing-{arm}", "train.reward_workers=1", *ARM_SETS[arm]]
        cfg = build_config(default_config_file(None, "tiny-math"), sets=sets)
        shutil.rmtree(workdir / f"timing-{arm}", ignore_errors=True)
        trainers[arm] = Trainer(cfg, RunDir.planned(cfg).make(cfg), None, quiet)
    rows: dict[str, list[dict]] = {arm: [] for arm in arms}
    try:
        for step in range(1, steps + 2):
            for arm, tr in trainers.items():
                w0, c0 = time.perf_counter(), time.process_time()
                log = tr.train_step(step)
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                if step > 1:
                    m = log.metrics
                    rows[arm].append({"wall": wall, "cpu": cpu, "rollouts": m["rollouts/step"],
                                      "generate": m["time/generate"], "update": m["time/update"]})
    finally:
        for tr in trainers.values():
            tr.close()
    out: dict[str, Any] = {"steps": steps, "prompts_per_step": prompts_per_step, "arms": {}}
    for arm, rs in rows.items():
        out["arms"][arm] = {
            key: statistics.median(r[key] / r["rollouts"] for r in rs) for key in ("wall", "cpu", "generate", "update")
        }
    base = out["arms"].get(BASELINE)
    if base:
        for a in out["arms"].values():
            for key in ("wall", "cpu", "generate", "update"):
                a[f"{key}_ratio"] = a[key] / base[key]
    return out


def finished(spec: RunSpec) -> bool:
    """A run is done when it wrote summary.json under exactly this spec (a resized study reruns it)."""
    d = Path(spec.run_dir)
    if not (d / "summary.json").is_file() or not (d / "spec.json").is_file():
        return False
    try:
        return json.loads((d / "spec.json").read_text()) == asdict(spec)
    except ValueError:
        return False


def execute(specs: list[RunSpec], jobs: int, logs_dir: Path, console: Any) -> list[dict]:
    """Run every spec without a summary.json as a niced child process, ``jobs`` at a time."""
    todo = [s for s in specs if not finished(s)]
    failures: list[dict] = []
    console.print(f"{len(specs) - len(todo)} of {len(specs)} runs already done; {len(todo)} to run, {jobs} at a time")
    logs_dir.mkdir(parents=True, exist_ok=True)
    running: list[tuple[RunSpec, subprocess.Popen, float, Any]] = []
    done = 0
    while todo or running:
        while todo and len(running) < jobs:
            spec = todo.pop(0)
            if Path(spec.run_dir).exists():
                shutil.rmtree(spec.run_dir)  # an interrupted run starts again
            Path(spec.run_dir).parent.mkdir(parents=True, exist_ok=True)
            log = open(logs_dir / f"{Path(spec.run_dir).parent.name}-{spec.name}.log", "w")
            cmd = study_child(asdict(spec))
            running.append((spec, subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=child_env()), time.time(), log))
        time.sleep(0.5)
        for item in list(running):
            spec, proc, t0, log = item
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            done += 1
            status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode}, log {log.name})"
            if proc.returncode != 0:
                last = Path(log.name).read_text().strip().splitlines()[-1:] or [""]
                failures.append({"run": spec.run_dir, "exit": proc.returncode, "last_line": last[0][:300]})
            console.print(f"[{done}/{done + len(todo) + len(running)}] {Path(spec.run_dir).parent.name}/{spec.name}: {status} in {time.time() - t0:.0f}s", highlight=False)
    return failures
