"""The TRL path against `vigor train`: the bundled default run (tiny model, tiny-math, the
default strategy and budget) through VigorGRPOTrainer and through `vigor train`, same seed,
prompts per step, budget, steps, learning rate and clip range; held-out accuracy (greedy, the
whole held-out set, vigor's evaluation code in both arms) before and after, wall time and
rollouts side by side, and where the wall time goes, per phase: generation, rewards, TRL's
scoring pass, the update, evaluation and the rest. Each arm runs in its own process, one
after the other.

    python bench/trl_path.py                  # 20 steps (the shared 2-core CPU's budget)
    python bench/trl_path.py --steps 150      # the full default run

Prints rich tables and writes bench/trl_path_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def vigor_arm(steps: int, seed: int, workdir: Path) -> dict:
    """`vigor train` with the default config, evaluated at the start and the end only."""
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "vigor_cli", "train", "--output-dir", str(workdir), "--run-name", "vigor",
         "--steps", str(steps), "--seed", str(seed), "--set", "train.eval_every=0",
         "--set", "train.save_every=0", "--set", "train.log_completions_every=0"],
        cwd=ROOT, capture_output=True, text=True,
    )
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"vigor train failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((workdir / "vigor" / "summary.json").read_text())
    lines = [json.loads(x) for x in (workdir / "vigor" / "metrics.jsonl").read_text().splitlines()]
    logged = [m for m in lines if "time/step" in m]
    total = lambda key: sum(m[key] for m in logged)  # noqa: E731
    phases = {"generate": total("time/generate"), "reward": total("time/reward"), "scoring pass": 0.0,
              "update": total("time/update"),
              "evaluation, checkpoint, rest": summary["wall_time"] - total("time/step")}
    return {"start_accuracy": summary["start_accuracy"], "final_accuracy": summary["final_accuracy"],
            "rollouts": summary["rollouts"], "train_seconds": summary["wall_time"], "process_seconds": wall,
            "mean_step_seconds": total("time/step") / len(logged),
            "mean_rollout_seconds": (total("time/generate") + total("time/reward")) / len(logged),
            "phases": phases}


def trl_arm(steps: int, seed: int, workdir: Path) -> dict:
    """The same run through VigorGRPOTrainer (in this process; called by --arm trl): the
    default config mapped to TRL's keys by vigor_cli.integrations.trl.trl_args."""
    from transformers import TrainerCallback

    from vigor_cli.commands.train import DEFAULT_CONFIG
    from vigor_cli.settings import build_config
    from vigor_cli.integrations.trl import build_trainer

    class StepClock(TrainerCallback):
        """Wall time of each optimizer step, generation to optimizer step."""

        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.seconds.append(time.perf_counter() - self.t0)

    cfg = build_config(DEFAULT_CONFIG, overrides={"train.seed": seed, "train.steps": steps,
                                                   "train.eval_every": 0})
    t0 = time.time()
    trainer, held_out, task = build_trainer(cfg, workdir / "trl", use_cpu=True)
    clock = StepClock()
    trainer.add_callback(clock)
    t_loaded = time.time()
    try:
        trainer.train()
    finally:
        task.close()
    t_done = time.time()
    logged = [h for h in trainer.state.log_history if "vigor/time/generate" in h]
    total = lambda key: sum(h[key] for h in logged)  # noqa: E731
    in_steps = sum(clock.seconds)
    phases = {"generate": total("vigor/time/generate"), "reward": total("vigor/time/reward"),
              "scoring pass": total("vigor/time/scoring_pass")}
    phases["update"] = in_steps - sum(phases.values())  # loss, backward and optimizer step
    phases["evaluation, checkpoint, rest"] = (t_done - t_loaded) - in_steps
    return {"start_accuracy": held_out.results[0], "final_accuracy": held_out.results[steps],
            "rollouts": trainer.vigor_totals["rollouts"], "train_seconds": t_done - t_loaded,
            "load_seconds": t_loaded - t0, "evaluation_seconds": held_out.seconds,
            "mean_step_seconds": in_steps / len(clock.seconds),
            "mean_rollout_seconds": (total("vigor/time/generate") + total("vigor/time/reward")) / len(logged),
            "phases": phases, "strategy": cfg.allocation.strategy, "prompts_per_step": cfg.train.prompts_per_step}


def run_trl_child(steps: int, seed: int, workdir: Path) -> dict:
    t0 = time.time()
    out = workdir / "trl.json"
    proc = subprocess.run([sys.executable, __file__, "--arm", "trl", "--steps", str(steps), "--seed", str(seed),
                           "--workdir", str(workdir)], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"TRL arm failed:\n{proc.stderr[-3000:]}")
    result = json.loads(out.read_text())
    result["process_seconds"] = time.time() - t0
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arm", choices=["trl"], help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.arm == "trl":  # the child process
        (a.workdir / "trl.json").write_text(json.dumps(trl_arm(a.steps, a.seed, a.workdir)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        arms = {"vigor train": vigor_arm(a.steps, a.seed, work), "TRL path": run_trl_child(a.steps, a.seed, work)}
    report(arms, a)


def report(arms: dict, a: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    import torch
    import trl
    import transformers

    base, trl_row = arms["vigor train"], arms["TRL path"]
    overhead = trl_row["train_seconds"] / base["train_seconds"]
    table = Table(title=f"tiny-math default, {a.steps} steps, seed {a.seed}, {os.cpu_count()} CPU cores")
    for col in ("arm", "held-out acc start", "held-out acc end", "rollouts", "train s", "process s",
                "s/step", "rollout+reward s/step"):
        table.add_column(col, justify="right" if col != "arm" else "left")
    for name, r in arms.items():
        table.add_row(name, f"{r['start_accuracy']:.3f}", f"{r['final_accuracy']:.3f}", str(r["rollouts"]),
                      f"{r['train_seconds']:.1f}", f"{r['process_seconds']:.1f}",
                      f"{r['mean_step_seconds']:.2f}", f"{r['mean_rollout_seconds']:.2f}")
    console = Console()
    console.print(table)
    phases = Table(title="where the wall time goes (seconds over the run)")
    for col in ("phase", "vigor train", "TRL path", "TRL - vigor", "share of the gap"):
        phases.add_column(col, justify="right" if col != "phase" else "left")
    gap = trl_row["train_seconds"] - base["train_seconds"]
    for name in base["phases"]:
        v, t = base["phases"][name], trl_row["phases"][name]
        phases.add_row(name, f"{v:.1f}", f"{t:.1f}", f"{t - v:+.1f}", f"{(t - v) / gap:.0%}" if gap else "-")
    console.print(phases)
    console.print(f"TRL path / vigor train wall time (training + evaluation): {overhead:.2f}x")
    out = ROOT / "bench" / "trl_path_results.json"
    out.write_text(json.dumps({
        "steps": a.steps, "seed": a.seed, "arms": arms, "trl_over_vigor_wall_time": overhead,
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
    }, indent=1) + "\n")
    console.print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
