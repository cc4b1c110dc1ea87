"""One training step, split into generate / reward / update: VIGOR against GRPO at the same
rollout budget, on the bundled tiny model and tiny-math (CPU). Then the default
`vigor train` run end to end: wall time, before/after accuracy, peak resident memory.

    python bench/train_step.py                 # both parts
    python bench/train_step.py --steps 3 --skip-default-run

Targets: VIGOR's step time within 10 % of GRPO's; the default run under 2 GB resident.
Prints a rich table and writes bench/results/train_step.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def time_steps(strategy: str, steps: int, workdir: Path) -> dict:
    """Mean seconds per step (after one warm-up step) for ``strategy`` on the default config."""
    from vigor_cli.commands.train import DEFAULT_CONFIG
    from vigor_cli.settings import build_config
    from vigor_cli.run.directory import RunDir
    from vigor_cli.train.trainer import Trainer
    from rich.console import Console

    cfg = build_config(
        DEFAULT_CONFIG,
        overrides={"allocation.strategy": strategy, "train.output_dir": str(workdir), "train.run_name": f"bench-{strategy}"},
    )
    quiet = Console(file=open(os.devnull, "w"))
    trainer = Trainer(cfg, RunDir.create(cfg), None, quiet)
    rows = []
    for step in range(1, steps + 2):
        log = trainer.train_step(step)
        if step > 1:  # the first step pays one-off costs (allocator warm-up, kernels)
            rows.append(log.metrics)
    trainer.task.close()
    keys = ["time/generate", "time/reward", "time/update", "time/step", "rollouts/step", "tokens/step"]
    out = {k: statistics.mean(r[k] for r in rows) for k in keys}
    out["steps_timed"] = len(rows)
    out["prompts_per_step"] = cfg.train.prompts_per_step
    return out


def default_run(workdir: Path) -> dict:
    """`vigor train` with no arguments in a child process; its peak RSS from the kernel."""
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "vigor_cli", "train", "--output-dir", str(workdir), "--run-name", "default"],
        cwd=ROOT, capture_output=True, text=True,
    )
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"default run failed:\n{proc.stderr[-2000:]}")
    summary = json.loads((workdir / "default" / "summary.json").read_text())
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "wall_time_s": wall,
        "start_accuracy": summary["start_accuracy"],
        "final_accuracy": summary["final_accuracy"],
        "rollouts": summary["rollouts"],
        "steps": summary["steps"],
        "peak_rss_mb": peak_kb / 1024,
    }


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per strategy")
    parser.add_argument("--skip-default-run", action="store_true")
    args = parser.parse_args()
    console = Console()
    result: dict = {"torch_threads": __import__("torch").get_num_threads(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        result["steps"] = {s: time_steps(s, args.steps, work) for s in ("grpo", "vigor")}
        g, v = result["steps"]["grpo"], result["steps"]["vigor"]
        result["vigor_over_grpo_step_time"] = v["time/step"] / g["time/step"]
        table = Table(title=f"one training step (mean of {args.steps}, tiny model, CPU)")
        for col in ("strategy", "rollouts", "tokens", "generate s", "reward s", "update s", "step s"):
            table.add_column(col, justify="right")
        for name, r in result["steps"].items():
            table.add_row(name, f"{r['rollouts/step']:.0f}", f"{r['tokens/step']:.0f}", f"{r['time/generate']:.2f}",
                          f"{r['time/reward']:.2f}", f"{r['time/update']:.2f}", f"{r['time/step']:.2f}")
        console.print(table)
        console.print(f"VIGOR / GRPO step time: {result['vigor_over_grpo_step_time']:.3f} (target <= 1.10)")
        if not args.skip_default_run:
            d = default_run(work)
            result["default_run"] = d
            t2 = Table(title="`vigor train` (no arguments)")
            for col in ("wall s", "accuracy before", "accuracy after", "rollouts", "peak RSS MB"):
                t2.add_column(col, justify="right")
            t2.add_row(f"{d['wall_time_s']:.0f}", f"{d['start_accuracy']:.3f}", f"{d['final_accuracy']:.3f}",
                       str(d["rollouts"]), f"{d['peak_rss_mb']:.0f}")
            console.print(t2)
    out = ROOT / "bench" / "results" / "train_step.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
