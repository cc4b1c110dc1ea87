"""Wall time per rollout of the multi-round strategies against grpo, interleaved in one process.

    python bench/round_timing.py                       # grpo, vigor, auto; before and after; 12 steps
    python bench/round_timing.py --steps 4 --arms grpo,vigor

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_ARMS = "grpo,vigor,auto,grpo-nodedupe,vigor-nodedupe,auto-nodedupe"
KEYS = ("wall", "cpu", "cpu_all", "generate", "reward", "update")
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def worker_cpu(trainer) -> float:
    """CPU seconds used so far by the task's reward worker processes (Linux /proc; 0 elsewhere).
    With the trainer's own process time this is the step's whole CPU work, which machine
    load changes far less than wall time."""
    verifier = getattr(trainer.task, "_verifier", None)
    total = 0.0
    for w in getattr(verifier, "_pool", []) or []:
        try:
            fields = Path(f"/proc/{w.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
        except (OSError, IndexError, ValueError, AttributeError):
            pass
    return total


def build(arm: str, workdir: Path, prompts: int):
    from rich.console import Console

    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config
    from vigor_cli.run.directory import RunDir
    from vigor_cli.train.trainer import Trainer

    strategy = arm.removesuffix("-nodedupe")
    sets = ["model.name_or_path=tiny", f"train.prompts_per_step={prompts}", f"train.output_dir={workdir}",
            f"train.run_name=timing-{arm}", "train.reward_workers=1", f"allocation.strategy={strategy}"]
    cfg = build_config(default_config_file(None, "tiny-math"), sets=sets)
    trainer = Trainer(cfg, RunDir.planned(cfg).make(cfg), None, Console(file=open(os.devnull, "w")))
    trainer.dedupe_scoring = not arm.endswith("-nodedupe")
    return trainer


def timing(arms: list[str], steps: int, prompts: int, workdir: Path) -> dict:
    import torch

    torch.set_num_threads(1)
    trainers = {arm: build(arm, workdir, prompts) for arm in arms}
    rows: dict[str, list[dict]] = {arm: [] for arm in arms}
    try:
        for step in range(1, steps + 2):
            for arm, tr in trainers.items():
                k0 = worker_cpu(tr)
                w0, c0 = time.perf_counter(), time.process_time()
                m = tr.train_step(step).metrics
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                if step > 1:
                    rows[arm].append({"wall": wall, "cpu": cpu, "cpu_all": cpu + worker_cpu(tr) - k0,
                                      "generate": m["time/generate"],
                                      "reward": m["time/reward"], "update": m["time/update"],
                                      "rollouts": m["rollouts/step"]})
    finally:
        for tr in trainers.values():
            tr.close()
    out: dict = {"steps": steps, "prompts_per_step": prompts, "load_average": list(os.getloadavg()), "arms": {}}
    for arm, rs in rows.items():
        out["arms"][arm] = {k: statistics.median(r[k] / r["rollouts"] for r in rs) for k in KEYS}
        out["arms"][arm]["rollouts_per_step"] = statistics.mean(r["rollouts"] for r in rs)
    for arm, a in out["arms"].items():
        base = out["arms"].get("grpo-nodedupe" if arm.endswith("-nodedupe") else "grpo")
        if base:
            for k in KEYS:
                a[f"{k}_ratio"] = a[k] / base[k]
    return out


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", default=DEFAULT_ARMS, help=f"comma-separated (default {DEFAULT_ARMS})")
    p.add_argument("--steps", type=int, default=12, help="timed steps per arm (after one warm-up step)")
    p.add_argument("--prompts", type=int, default=32, help="prompts per step")
    args = p.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        result = timing(arms, args.steps, args.prompts, Path(tmp))
    console = Console(width=140)
    table = Table(title=f"ms per rollout, interleaved, median of {args.steps} steps, {args.prompts} prompts/step "
                  f"(ratio to grpo with the same grading; load {result['load_average'][0]:.1f})")
    table.add_column("arm")
    for k in KEYS:
        table.add_column(k, justify="right")
        table.add_column("x", justify="right")
    for arm, a in result["arms"].items():
        cells = []
        for k in KEYS:
            cells += [f"{1000 * a[k]:.3f}", f"{a.get(f'{k}_ratio', float('nan')):.2f}"]
        table.add_row(arm, *cells)
    console.print(table)
    out = ROOT / "bench" / "results" / "round_timing.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
