"""Rollout efficiency: does VIGOR reach a target held-out accuracy with fewer rollouts, and when?

Trains the tiny model with every allocation strategy at the same per-step
rollout budget, over several seeds, for the same total number of rollouts,
evaluating the held-out split every fixed number of rollouts; then measures,
per strategy, the rollouts, generated tokens and training seconds needed to
reach a target accuracy (median and spread over seeds), the final accuracy and
the wall time per rollout, each against ``grpo``. A regime study repeats the
comparison on starting models with different pass-rate distributions (the
tiny model warmed up for shorter or longer with ``vigor make-tiny``).

    python bench/efficiency.py                     # the full study: 100 runs, about 50 min on 2 shared cores
    python bench/efficiency.py --quick             # minutes: a smoke run of the whole pipeline
    python bench/efficiency.py --aggregate-only    # recompute tables and plots from the runs

Writes bench/results/efficiency.json, bench/results/efficiency.md (the markdown
tables; with --quick: efficiency-quick.*), a compact copy of the full study's JSON in
bench/efficiency_results.json (committed; BENCHMARKS.md cites it) and, per task and regime, the accuracy plots of `vigor report`
(bench/results/efficiency/<task>-<regime>/accuracy_vs_{rollouts,tokens}.png).
Runs live in bench/results/efficiency/runs/; a finished run (summary.json) is
not run again, so an interrupted study continues where it stopped.

Equal budgets. Every strategy generates 8 x prompts_per_step rollouts per step
where its design allows: grpo 8 per prompt; vigor/random/difficulty a budget of
8 x prompts_per_step over 4 rounds; pods generates 8 and trains on 4; dapo and
greso start from a generation batch of prompts_per_step prompts
(gen_batch_multiplier 1) and draw more only while the train batch is short of
non-zero-variance groups, which is their design. Every generated rollout counts.
Each run stops at the first step that reaches the total rollout budget.

Target. Per task and regime, target = start + gain x (median final accuracy of
grpo - start), gain 0.8 by default (``--target-gain``): a level the baseline
reaches late in its run, fixed before any other strategy is looked at.
Crossings follow `vigor report` (first crossing, linear interpolation,
vigor_cli/report/curves.py); a seed that never reaches the target counts as
infinitely many rollouts, so the median is "not reached" when most seeds fail.
Speed-up = grpo's median / the strategy's median (2.0 = half the rollouts).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STRATEGIES = ["grpo", "vigor", "dapo", "greso", "pods", "random", "difficulty"]
BASELINE = "grpo"

ARM_SETS: dict[str, list[str]] = {
    "grpo": ["allocation.strategy=grpo"],
    "vigor": ["allocation.strategy=vigor"],
    "random": ["allocation.strategy=random"],
    "difficulty": ["allocation.strategy=difficulty"],
    "dapo": ["allocation.strategy=dapo", "allocation.gen_batch_multiplier=1"],
    "greso": ["allocation.strategy=greso", "allocation.gen_batch_multiplier=1"],
    "pods": ["allocation.strategy=pods", "allocation.pods_n=8", "allocation.pods_m=4"],
    # Ablations that look for why VIGOR wins or loses (--arms ...).
    "vigor-agg-grpo": ["allocation.strategy=vigor", "grpo.loss_agg=grpo"],
    "grpo-agg-grpo": ["allocation.strategy=grpo", "grpo.loss_agg=grpo"],
    "vigor-scale-none": ["allocation.strategy=vigor", "grpo.scale_rewards=none"],
    "grpo-scale-none": ["allocation.strategy=grpo", "grpo.scale_rewards=none"],
    # schedule: 2 rounds of 4 then 8 (every prompt gets 4, half of them 12) instead of 2/4/8/16
    "vigor-T2": ["allocation.strategy=vigor", "allocation.rounds=2", "allocation.m0=4"],
    # breadth at the same 256 rollouts per step: 64 prompts, 2 each, then 4 more for half
    "vigor-wide": ["allocation.strategy=vigor", "train.prompts_per_step=64", "allocation.rounds=2", "allocation.budget=256"],
    "grpo-wide": ["allocation.strategy=grpo", "train.prompts_per_step=64", "allocation.group_size=4"],
    # a larger batch at the paper's 8 per prompt: 64 prompts, 512 rollouts per step (half the steps)
    "vigor-64": ["allocation.strategy=vigor", "train.prompts_per_step=64"],
    "grpo-64": ["allocation.strategy=grpo", "train.prompts_per_step=64"],
}
"""Config overrides per arm (``--set`` syntax); the group size 8 and budget come from the task config."""

@dataclass(frozen=True)
class Regime:
    """A starting point for RL: which model, sampled how.

    ``warmup_target`` None is the bundled tiny model; a number builds one with `vigor
    make-tiny --target` (warm-up stops once sampled accuracy on a training probe reaches
    it; a few CPU minutes, cached). ``temperature`` is the rollout temperature: lower
    pushes per-prompt pass rates towards 0 and 1 (more zero-variance groups, where
    variance-guided allocation should help most), higher spreads them out.
    """

    warmup_target: float | None = None
    temperature: float = 1.0
    about: str = ""


REGIMES: dict[str, Regime] = {
    "default": Regime(None, 1.0, "bundled tiny model, rollout temperature 1 (the default config)"),
    "peaked": Regime(None, 0.5, "bundled tiny model, rollout temperature 0.5: pass rates pushed to 0 and 1"),
    "flat": Regime(None, 1.5, "bundled tiny model, rollout temperature 1.5: lower, more spread pass rates"),
    "weak": Regime(0.2, 1.0, "tiny model warmed up to probe accuracy 0.2 (vigor make-tiny --target 0.2)"),
    "strong": Regime(0.8, 1.0, "tiny model warmed up to probe accuracy 0.8 (vigor make-tiny --target 0.8)"),
}
"""Every regime the harness knows; STUDY picks the ones the full run uses (weak and strong build a model first)."""

ABLATIONS = ["vigor-T2", "vigor-wide", "grpo-wide", "vigor-64", "grpo-64"]
"""Arms that look for why VIGOR wins or loses on the default regime (sized for 32 prompts per step)."""

TASK_SIZES = {
    "tiny-math": dict(prompts_per_step=32, total_rollouts=256 * 30, eval_every_rollouts=512),
    "tiny-code": dict(prompts_per_step=16, total_rollouts=128 * 20, eval_every_rollouts=512),
}
"""Per task: the batch (as in configs/<task>.yaml; 8 rollouts per prompt), each run's total
rollouts, and the evaluation interval in rollouts."""
TASK_SETS = {
    "tiny-math": [],
    "tiny-code": ["train.eval_samples=4", "train.eval_temperature=1.0"],
}
"""Per-task overrides: tiny-code's held-out set has only 40 problems and the start model
solves 33 greedily, so its accuracy is avg@4 at temperature 1 (finer steps, more headroom)."""
QUICK_SIZE = dict(prompts_per_step=8, total_rollouts=64 * 3, eval_every_rollouts=64)

STUDY: list[tuple[str, str, list[str]]] = [
    ("tiny-math", "default", STRATEGIES),
    ("tiny-math", "peaked", ["grpo", "vigor", "dapo"]),
    ("tiny-math", "flat", ["grpo", "vigor", "dapo"]),
    ("tiny-math", "default", ABLATIONS),
    ("tiny-code", "default", ["grpo", "vigor"]),
]
"""The full study: (task, regime, arms), run in this order (most important first), seeds
fastest within a row; rows with the same task and regime form one table."""
QUICK_STUDY: list[tuple[str, str, list[str]]] = [("tiny-math", "default", STRATEGIES)]


@dataclass
class Cell:
    """One comparison: a task, a starting regime, the arms, and the run size."""

    task: str
    regime: str
    arms: list[str]
    prompts_per_step: int
    total_rollouts: int
    eval_every_rollouts: int

    @property
    def key(self) -> str:
        return f"{self.task}-{self.regime}"


@dataclass
class Plan:
    """What a study runs."""

    cells: list[Cell]
    seeds: int
    jobs: int
    target_gain: float
    extra_sets: list[str] = field(default_factory=list)


@dataclass
class RunSpec:
    task: str
    regime: str
    arm: str
    seed: int
    model: str
    sets: list[str]
    total_rollouts: int
    eval_every_rollouts: int
    run_dir: str

    @property
    def name(self) -> str:
        return Path(self.run_dir).name


# =========================================================================== one run (child)
def run_one(spec: RunSpec) -> dict:
    """Train until ``total_rollouts`` rollouts were generated, evaluating every
    ``eval_every_rollouts``; the trainer's own step, logging and evaluation code does
    the work, only the stopping and evaluation schedule is by rollouts instead of steps."""
    import torch
    from rich.console import Console

    from vigor_cli.commands.train import default_config_file
    from vigor_cli.config import build_config
    from vigor_cli.runs import RunDir
    from vigor_cli.trainer import Trainer

    torch.set_num_threads(1)
    run_dir = Path(spec.run_dir)
    sets = [
        f"model.name_or_path={spec.model}",
        f"train.seed={spec.seed}",
        f"train.output_dir={run_dir.parent}",
        f"train.run_name={run_dir.name}",
        "train.steps=100000",  # stopping is by rollouts (below)
        "train.log_completions_every=0",
        "train.reward_workers=1",
        *spec.sets,
    ]
    cfg = build_config(default_config_file(None, spec.task), overrides={"task.name": spec.task}, sets=sets)
    out = Console(file=sys.stdout, width=160, force_terminal=False)
    run = RunDir.planned(cfg)
    trainer = Trainer(cfg, run, None, out)
    run.make(cfg)
    started = time.time()
    try:
        trainer.start_accuracy = trainer.evaluate(0)
        next_eval = spec.eval_every_rollouts
        while trainer.rollouts_total < spec.total_rollouts:
            trainer.step += 1
            log = trainer.train_step(trainer.step)
            trainer._write_step(log)  # the trainer's metrics line and console line
            if trainer.rollouts_total >= next_eval or trainer.rollouts_total >= spec.total_rollouts:
                trainer.last_accuracy = trainer.evaluate(trainer.step)
                while next_eval <= trainer.rollouts_total:
                    next_eval += spec.eval_every_rollouts
        summary = {
            "run_dir": str(run.path),
            "start_accuracy": trainer.start_accuracy,
            "final_accuracy": trainer.last_accuracy,
            "steps": trainer.step,
            "rollouts": trainer.rollouts_total,
            "tokens": trainer.tokens_total,
            "wall_time": time.time() - started,
        }
        run.write_summary(summary)
        return summary
    finally:
        trainer.task.close()
        trainer.engine.close()


def timing(model: str, arms: list[str], steps: int, prompts_per_step: int, workdir: Path) -> dict:
    """Seconds per rollout of each arm, measured in one process with the arms' steps
    interleaved (A B A B ...), so machine load hits every arm alike; wall and CPU time of
    the process (CPU time is immune to other processes on the machine). The first step of
    each arm is a warm-up and not counted."""
    import torch
    from rich.console import Console

    from vigor_cli.commands.train import default_config_file
    from vigor_cli.config import build_config
    from vigor_cli.runs import RunDir
    from vigor_cli.trainer import Trainer

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
    for step in range(1, steps + 2):
        for arm, tr in trainers.items():
            w0, c0 = time.perf_counter(), time.process_time()
            log = tr.train_step(step)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if step > 1:
                m = log.metrics
                rows[arm].append({"wall": wall, "cpu": cpu, "rollouts": m["rollouts/step"],
                                  "generate": m["time/generate"], "update": m["time/update"]})
    for tr in trainers.values():
        tr.task.close()
        tr.engine.close()
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


# =========================================================================== the plan
def regime_model(regime: str, models_dir: Path) -> str:
    """The starting model of ``regime``: 'tiny' (bundled) or a make-tiny directory (built once)."""
    target = REGIMES[regime].warmup_target
    if target is None:
        return "tiny"
    path = models_dir / f"warm-{target}"
    if (path / "config.json").is_file() and (path / "recipe.json").is_file():
        return str(path)
    if path.exists():
        shutil.rmtree(path)  # a build that was interrupted
    log = models_dir / f"warm-{target}.log"
    models_dir.mkdir(parents=True, exist_ok=True)
    print(f"building the '{regime}' starting model: vigor make-tiny --target {target} (a few minutes)", flush=True)
    with open(log, "w") as f:
        proc = subprocess.run(
            ["nice", "-n", "10", sys.executable, "-m", "vigor_cli", "make-tiny", "--out", str(path), "--target", str(target)],
            cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=_child_env(),
        )
    if proc.returncode != 0:
        raise SystemExit(f"vigor make-tiny --target {target} failed; see {log}")
    return str(path)


def model_dir(model: str) -> Path:
    if model == "tiny":
        from vigor_cli.models import TINY_DIR

        return TINY_DIR
    return Path(model)


def model_digest(model: str) -> str | None:
    """sha256 of the starting model's weights, so a result names the exact model."""
    import hashlib

    path = model_dir(model) / "model.safetensors"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def make_specs(plan: Plan, runs_dir: Path, models: dict[str, str]) -> list[RunSpec]:
    """Every run of the study; seeds vary fastest so an interrupted cell has every arm."""
    specs = []
    for cell in plan.cells:
        for seed in range(plan.seeds):
            for arm in cell.arms:
                sets = [
                    f"train.prompts_per_step={cell.prompts_per_step}",
                    f"sampling.temperature={REGIMES[cell.regime].temperature}",
                    *TASK_SETS[cell.task],
                    *ARM_SETS[arm],
                    *plan.extra_sets,
                ]
                specs.append(
                    RunSpec(
                        task=cell.task, regime=cell.regime, arm=arm, seed=seed, model=models[cell.regime],
                        sets=sets, total_rollouts=cell.total_rollouts, eval_every_rollouts=cell.eval_every_rollouts,
                        run_dir=str(runs_dir / cell.key / f"{arm}-s{seed}"),
                    )
                )
    return specs


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return env


def execute(specs: list[RunSpec], jobs: int, logs_dir: Path, console: Any) -> list[dict]:
    """Run every spec without a summary.json as a niced child process, ``jobs`` at a time."""
    todo = [s for s in specs if not (Path(s.run_dir) / "summary.json").is_file()]
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
            cmd = ["nice", "-n", "10", sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(asdict(spec))]
            running.append((spec, subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=_child_env()), time.time(), log))
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


# =========================================================================== aggregation
def train_seconds_at_evals(metrics: list[dict]) -> dict[int, float]:
    """Cumulative training seconds (sum of time/step, evaluation excluded) at each step."""
    total, out = 0.0, {0: 0.0}
    for rec in sorted((r for r in metrics if "time/step" in r), key=lambda r: r["step"]):
        total += float(rec["time/step"])
        out[int(rec["step"])] = total
    return out


def update_signal(run_path: Path) -> dict[str, float | None]:
    """Per step, from allocation.jsonl: prompts whose used rewards differ (the only groups
    with a gradient), the rollouts in them, and the largest share of those rollouts that one
    prompt holds; each averaged over steps. This is where allocations differ in kind:
    the same rollout budget spread over many prompts or concentrated on a few."""
    from vigor_cli.report.rundir import read_jsonl

    empty = {"signal_prompts": None, "signal_rollouts": None, "top_prompt_share": None, "kept_zero_var_share": None}
    path = run_path / "allocation.jsonl"
    if not path.is_file():
        return empty
    prompts, rollouts, top = [], [], []
    kept = kept_flat = 0
    for rec in read_jsonl(path).records:
        if rec.get("strategy") in ("vigor", "random", "difficulty"):
            for p in rec.get("prompts", []):
                for rnd in p.get("rounds", []):
                    if rnd.get("kept") is True:
                        kept += 1
                        kept_flat += rnd.get("var", 0) == 0
        sizes = []
        for p in rec.get("prompts", []):
            if not p.get("in_update"):
                continue
            rewards = [r for rnd in p.get("rounds", []) for r in rnd.get("rewards", [])]
            used = [rewards[i] for i in p["used_idx"]] if "used_idx" in p else rewards
            if used and max(used) != min(used):
                sizes.append(len(used))
        prompts.append(len(sizes))
        rollouts.append(sum(sizes))
        top.append(max(sizes) / sum(sizes) if sizes else 0.0)
    if not prompts:
        return empty
    return {
        "signal_prompts": statistics.mean(prompts),
        "signal_rollouts": statistics.mean(rollouts),
        "top_prompt_share": statistics.mean(top),
        # vigor family: share of the prompts kept for another round whose pool had no
        # variance yet (kept only by the seeded tie-break, or by low mean for difficulty)
        "kept_zero_var_share": kept_flat / kept if kept else None,
    }


def run_measures(run: Any, target: float) -> dict:
    """One run's costs to ``target`` on three axes and its per-rollout timing."""
    from vigor_cli.report.curves import first_crossing, run_curve

    curve = run_curve(run)
    seconds = train_seconds_at_evals(run.metrics)
    eval_steps = sorted({int(r["step"]) for r in run.metrics if r.get("eval/accuracy") is not None})
    secs = [seconds[s] for s in eval_steps]
    steps = [r for r in run.metrics if "time/step" in r]
    rollouts = sum(r["rollouts/step"] for r in steps)
    gen = sum(r["time/generate"] for r in steps)
    return {
        "run": run.name,
        "seed": run.config_value("train.seed"),
        "start_accuracy": curve.by_rollouts.y[0],
        "final_accuracy": curve.final_accuracy,
        "rollouts_to_target": first_crossing(curve.by_rollouts.x, curve.by_rollouts.y, target),
        "tokens_to_target": first_crossing(curve.by_tokens.x, curve.by_tokens.y, target),
        "seconds_to_target": first_crossing(secs, curve.by_rollouts.y, target),
        "rollouts": rollouts,
        "steps": len(steps),
        "seconds_per_rollout": sum(r["time/step"] for r in steps) / rollouts if rollouts else None,
        "generate_seconds_per_rollout": gen / rollouts if rollouts else None,
        "zero_var_frac": statistics.mean(r["groups/zero_var_frac"] for r in steps) if steps else None,
        "reward_mean": statistics.mean(r["reward/mean"] for r in steps) if steps else None,
        **update_signal(run.path),
        "curve": {"rollouts": curve.by_rollouts.x, "tokens": curve.by_tokens.x, "train_seconds": secs, "accuracy": curve.by_rollouts.y},
    }


def median_with_misses(values: Sequence[float | None]) -> float | None:
    """Median where None (target never reached) counts as +infinity; None if the median is."""
    vals = sorted(math.inf if v is None else v for v in values)
    if not vals:
        return None
    n = len(vals)
    mid = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    return None if math.isinf(mid) else mid


def spread(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(min, max) over the seeds that reached the target."""
    got = [v for v in values if v is not None]
    return (min(got), max(got)) if got else (None, None)


def ratio(base: float | None, mine: float | None) -> float | None:
    return base / mine if base and mine else None


def summarize_arm(measures: list[dict]) -> dict:
    out: dict[str, Any] = {"seeds": len(measures)}
    out["reached"] = sum(m["rollouts_to_target"] is not None for m in measures)
    for axis in ("rollouts", "tokens", "seconds"):
        vals = [m[f"{axis}_to_target"] for m in measures]
        out[f"{axis}_to_target_median"] = median_with_misses(vals)
        out[f"{axis}_to_target_min"], out[f"{axis}_to_target_max"] = spread(vals)
    finals = [m["final_accuracy"] for m in measures]
    out["final_accuracy_median"] = statistics.median(finals)
    out["final_accuracy_min"], out["final_accuracy_max"] = min(finals), max(finals)
    for key in ("seconds_per_rollout", "generate_seconds_per_rollout", "zero_var_frac", "reward_mean",
                "signal_prompts", "signal_rollouts", "top_prompt_share", "kept_zero_var_share"):
        vals = [m[key] for m in measures if m[key] is not None]
        out[f"{key}_median"] = statistics.median(vals) if vals else None
    return out


def add_ratios(arms: dict[str, dict], baseline: str) -> None:
    """Speed-ups against the baseline: baseline's median / the arm's (2.0 = half the cost)."""
    base = arms.get(baseline)
    for arm in arms.values():
        for axis in ("rollouts", "tokens", "seconds"):
            arm[f"{axis}_speedup"] = ratio(base and base[f"{axis}_to_target_median"], arm[f"{axis}_to_target_median"])
        arm["final_accuracy_delta"] = arm["final_accuracy_median"] - base["final_accuracy_median"] if base else None
        arm["seconds_per_rollout_ratio"] = (
            arm["seconds_per_rollout_median"] / base["seconds_per_rollout_median"]
            if base and base["seconds_per_rollout_median"] and arm["seconds_per_rollout_median"] else None
        )


def target_for(start: float, baseline_finals: Sequence[float], gain: float) -> float:
    """start + gain x (median baseline final - start); at least start + 0.005 so that a
    baseline that did not learn gives a target above the start."""
    return max(start + gain * (statistics.median(baseline_finals) - start), start + 0.005)


def aggregate_cell(run_dirs: list[Path], arms: list[str], gain: float, target: float | None, plots_dir: Path) -> dict:
    """Tables and plots of one task x regime from its run directories."""
    from vigor_cli.report.curves import Group, run_curve
    from vigor_cli.report.plots import plot_accuracy
    from vigor_cli.report.rundir import load_run

    by_arm: dict[str, list[Any]] = {}
    for d in run_dirs:
        if not (d / "summary.json").is_file():
            continue
        arm = d.name.rsplit("-s", 1)[0]
        by_arm.setdefault(arm, []).append(load_run(d))
    if not by_arm:
        return {}
    starts = [run_curve(r).by_rollouts.y[0] for runs in by_arm.values() for r in runs]
    start = statistics.median(starts)
    if target is None:
        base_runs = by_arm.get(BASELINE) or next(iter(by_arm.values()))
        target = target_for(start, [run_curve(r).final_accuracy for r in base_runs], gain)
    cell: dict[str, Any] = {"start_accuracy": start, "target": target, "target_gain": gain, "arms": {}, "runs": {}}
    by_arm = {a: by_arm[a] for a in [a for a in arms if a in by_arm] + [a for a in by_arm if a not in arms]}
    for arm in by_arm:
        measures = [run_measures(r, target) for r in by_arm[arm]]
        cell["runs"][arm] = measures
        cell["arms"][arm] = summarize_arm(measures)
    add_ratios(cell["arms"], BASELINE)
    groups = [Group(arm, runs, [run_curve(r) for r in runs]) for arm, runs in by_arm.items()]
    crossings = {}
    for axis in ("rollouts", "tokens"):
        from vigor_cli.report.curves import first_crossing

        crossings[axis] = [
            first_crossing(getattr(g.mean, f"by_{axis}").x, getattr(g.mean, f"by_{axis}").y, target) for g in groups
        ]
        cell[f"plot_{axis}"] = str(
            plot_accuracy([g.mean for g in groups], axis, plots_dir / f"accuracy_vs_{axis}.png", target, crossings[axis])
        )
    return cell


def start_distribution(task_name: str, model: str, temperature: float, cache: Path, problems: int = 256, samples: int = 16) -> dict:
    """Pass counts out of ``samples`` of the starting model on ``problems`` training prompts at
    the regime's rollout temperature: the distribution allocation starts from (cached)."""
    if cache.is_file():
        return json.loads(cache.read_text())
    import random

    import torch

    from vigor_cli.config import TaskConfig
    from vigor_cli.models import resolve_model_path
    from vigor_cli.tasks import get_task
    from vigor_cli.tiny_model import load, pass_count_histogram, pass_rates

    torch.set_num_threads(1)
    model_obj, tokenizer = load(resolve_model_path(model))
    task = get_task(TaskConfig(name=task_name), workers=1)
    try:
        train = task.train_examples()
        examples = random.Random(0).sample(train, min(problems, len(train)))
        max_new = 16 if task_name == "tiny-math" else 48
        rates = pass_rates(task, model_obj, tokenizer, examples, samples, seed=0, temperature=temperature, max_new_tokens=max_new)
    finally:
        task.close()
    out = {
        "problems": len(examples),
        "samples_per_problem": samples,
        "temperature": temperature,
        "mean_pass_rate": sum(rates) / len(rates),
        "pass_count_histogram": pass_count_histogram(rates, samples),
        "zero_variance_at_8": sum(p ** 8 + (1 - p) ** 8 for p in rates) / len(rates),
        # reward variance p(1-p) per prompt: its mean, and the mean over the top eighth (the
        # prompts VIGOR's last round concentrates on): their ratio bounds how much more
        # gradient signal per rollout concentrating can buy (docs/algorithms.md)
        "mean_variance": statistics.mean(p * (1 - p) for p in rates),
        "top_eighth_variance": statistics.mean(sorted((p * (1 - p) for p in rates), reverse=True)[: max(1, len(rates) // 8)]),
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, indent=1) + "\n")
    return out


# =========================================================================== tables
def _count(x: float | None, unit: str = "") -> str:
    if x is None:
        return "not reached"
    if unit == "s":
        return f"{x:.1f} s" if x < 10 else f"{x:.0f} s"
    return f"{x / 1000:.1f}k" if x >= 10000 else f"{x:.0f}"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def markdown_table(cell: dict) -> str:
    lines = [
        "| strategy | reached | rollouts to target: median [min-max] | speed-up | tokens to target | speed-up | "
        "train seconds to target | speed-up | final accuracy: median [min-max] | vs grpo | s/rollout vs grpo |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in cell["arms"].items():
        lines.append(
            f"| {arm} | {a['reached']}/{a['seeds']} "
            f"| {_count(a['rollouts_to_target_median'])} [{_count(a['rollouts_to_target_min'])}-{_count(a['rollouts_to_target_max'])}] "
            f"| {_x(a['rollouts_speedup'])} "
            f"| {_count(a['tokens_to_target_median'])} | {_x(a['tokens_speedup'])} "
            f"| {_count(a['seconds_to_target_median'], 's')} | {_x(a['seconds_speedup'])} "
            f"| {a['final_accuracy_median']:.3f} [{a['final_accuracy_min']:.3f}-{a['final_accuracy_max']:.3f}] "
            f"| {a['final_accuracy_delta'] * 100:+.1f} pts "
            f"| {_x(a['seconds_per_rollout_ratio'])} |"
        )
    return "\n".join(lines)


def mechanism_table(cell: dict) -> str:
    """Where each arm's rollouts went (medians over seeds of per-step means)."""
    lines = [
        "| strategy | zero-variance groups in update | prompts with signal / step | rollouts with signal / step "
        "| largest prompt's share of them | kept prompts with zero variance so far | generate s/rollout vs grpo |",
        "|---|---|---|---|---|---|---|",
    ]
    base = cell["arms"].get(BASELINE, {}).get("generate_seconds_per_rollout_median")
    for arm, a in cell["arms"].items():
        gen = a["generate_seconds_per_rollout_median"]
        lines.append(
            f"| {arm} | {_num(a['zero_var_frac_median'], 2)} | {_num(a['signal_prompts_median'])} "
            f"| {_num(a['signal_rollouts_median'])} | {_num(a['top_prompt_share_median'], 2)} "
            f"| {_num(a['kept_zero_var_share_median'], 2)} | {_x(gen / base if gen and base else None)} |"
        )
    return "\n".join(lines)


def timing_table(t: dict) -> str:
    lines = [
        f"Interleaved timing, {t['steps']} steps each after a warm-up step, {t['prompts_per_step']} prompts per step, "
        "one process (medians of per-step seconds per rollout):\n",
        "| strategy | wall ms/rollout | vs grpo | CPU ms/rollout | vs grpo | generate ms/rollout | vs grpo | update ms/rollout | vs grpo |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in t["arms"].items():
        lines.append(
            f"| {arm} | {a['wall'] * 1e3:.2f} | {_x(a.get('wall_ratio'))} | {a['cpu'] * 1e3:.2f} | {_x(a.get('cpu_ratio'))} "
            f"| {a['generate'] * 1e3:.2f} | {_x(a.get('generate_ratio'))} | {a['update'] * 1e3:.2f} | {_x(a.get('update_ratio'))} |"
        )
    return "\n".join(lines)


def render_markdown(results: dict) -> str:
    parts = []
    if results.get("timing"):
        parts.append("### wall time per rollout\n\n" + timing_table(results["timing"]) + "\n")
    for key, cell in results["cells"].items():
        dist = cell["start_distribution"]
        parts.append(
            f"### {key}\n\n{cell['regime']['about']}. Held-out accuracy at start {cell['start_accuracy']:.3f}; "
            f"target {cell['target']:.3f} (start + {cell['target_gain']} x grpo's median gain). Starting pass counts "
            f"out of {dist['samples_per_problem']} on {dist['problems']} training prompts at temperature "
            f"{dist['temperature']}: {dist['pass_count_histogram']} (mean pass rate {dist['mean_pass_rate']:.3f}; "
            f"expected zero-variance share of groups of 8: {dist['zero_variance_at_8']:.2f}; reward variance p(1-p): "
            f"mean {dist['mean_variance']:.3f}, top eighth of prompts {dist['top_eighth_variance']:.3f})\n\n"
            + markdown_table(cell) + "\n\n" + mechanism_table(cell) + "\n"
        )
    return "\n".join(parts)


def print_tables(results: dict, console: Any) -> None:
    from rich.table import Table

    for key, cell in results["cells"].items():
        t = Table(title=f"{key}: target {cell['target']:.3f} (start {cell['start_accuracy']:.3f}); speed-up = grpo / strategy", title_justify="left")
        for col in ("strategy", "reached", "rollouts to target", "x", "tokens", "x", "train s", "x", "final acc", "vs grpo", "s/rollout", "zero-var"):
            t.add_column(col, justify="left" if col == "strategy" else "right")
        for arm, a in cell["arms"].items():
            t.add_row(
                arm, f"{a['reached']}/{a['seeds']}",
                f"{_count(a['rollouts_to_target_median'])} [{_count(a['rollouts_to_target_min'])}-{_count(a['rollouts_to_target_max'])}]",
                _x(a["rollouts_speedup"]), _count(a["tokens_to_target_median"]), _x(a["tokens_speedup"]),
                _count(a["seconds_to_target_median"], "s"), _x(a["seconds_speedup"]),
                f"{a['final_accuracy_median']:.3f}", f"{a['final_accuracy_delta'] * 100:+.1f}",
                _x(a["seconds_per_rollout_ratio"]), f"{a['zero_var_frac_median']:.2f}",
            )
        console.print(t)


# =========================================================================== main
PUBLISHED = ROOT / "bench" / "efficiency_results.json"
"""A compact copy of the full study's results, committed (bench/results/ is not)."""


def _rounded(obj: Any) -> Any:
    if isinstance(obj, float):
        return round(obj, 4)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "load_average": list(os.getloadavg()), "python": sys.version.split()[0]}


def make_plan(args: argparse.Namespace) -> Plan:
    """The study's cells, filtered and resized by the command-line options."""
    study = QUICK_STUDY if args.quick else STUDY
    tasks = args.tasks.split(",") if args.tasks else None
    regimes = args.regimes.split(",") if args.regimes else None
    for r in regimes or []:
        if r not in REGIMES:
            raise SystemExit(f"--regimes: unknown regime {r!r}; choose from {list(REGIMES)}")
    arms = args.arms.split(",") if args.arms else None
    for a in arms or []:
        if a not in ARM_SETS:
            raise SystemExit(f"--arms: unknown arm {a!r}; choose from {sorted(ARM_SETS)}")
    rows = [(t, r, list(a)) for t, r, a in study]
    for t in tasks or []:
        if t not in TASK_SIZES:
            raise SystemExit(f"--tasks: unknown task {t!r}; choose from {list(TASK_SIZES)}")
    for r in regimes or []:  # a regime outside the study gets the default regime's arms
        for t in tasks or sorted({row[0] for row in rows}):
            if not any(row[:2] == (t, r) for row in rows):
                base = next((row[2] for row in rows if row[:2] == (t, "default")), STRATEGIES)
                rows.append((t, r, list(base)))
    cells = []
    for t, r, a in rows:
        if (tasks and t not in tasks) or (regimes and r not in regimes):
            continue
        size = dict(QUICK_SIZE if args.quick else TASK_SIZES[t])
        for key in size:
            if getattr(args, key) is not None:
                size[key] = getattr(args, key)
        cell = Cell(task=t, regime=r, arms=arms or a, **size)
        if cell not in cells:  # --arms makes rows of one task and regime identical
            cells.append(cell)
    if not cells:
        raise SystemExit("no cell of the study matches --tasks/--regimes")
    return Plan(cells=cells, seeds=args.seeds or (2 if args.quick else 5), jobs=args.jobs,
                target_gain=args.target_gain, extra_sets=args.sets)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="Minutes: every strategy, 2 seeds, 8 prompts per step, 192 rollouts per run, default regime.")
    p.add_argument("--tasks", default=None, help="Only the study's cells of these tasks (comma-separated).")
    p.add_argument("--regimes", default=None, help=f"Only the study's cells of these regimes; a regime not in the study ({list(REGIMES)}) adds cells.")
    p.add_argument("--arms", default=None, help=f"Replace every cell's arms: strategies or ablations {sorted(ARM_SETS)}.")
    p.add_argument("--seeds", type=int, default=None, help="Seeds per arm (0..N-1); default 5 (--quick: 2).")
    p.add_argument("--prompts-per-step", type=int, default=None, help="Override every cell's batch.")
    p.add_argument("--total-rollouts", type=int, default=None, help="Each run stops once it has generated this many.")
    p.add_argument("--eval-every-rollouts", type=int, default=None)
    p.add_argument("--jobs", type=int, default=2, help="Runs at a time (each uses one thread).")
    p.add_argument("--target-gain", type=float, default=0.8, help="Target = start + gain x grpo's median gain.")
    p.add_argument("--target", type=float, default=None, help="Absolute target accuracy for every cell (overrides --target-gain).")
    p.add_argument("--set", dest="sets", action="append", default=[], help="Extra config override for every run.")
    p.add_argument("--out", type=Path, default=None, help="Results directory (default bench/results/efficiency[-quick]).")
    p.add_argument("--default-model", default=None, help="Starting model of the default, peaked and flat regimes (default: the bundled tiny model).")
    p.add_argument("--aggregate-only", action="store_true", help="Only recompute tables and plots from finished runs.")
    p.add_argument("--timing-steps", type=int, default=None, help="Steps per arm of the interleaved timing of grpo and vigor (default 12; --quick 2; 0 skips it).")
    args = p.parse_args(argv)

    if args.child:
        spec = json.loads(args.child)
        if "timing" in spec:
            t = spec["timing"]
            result = timing(t["model"], t["arms"], t["steps"], t["prompts_per_step"], Path(t["workdir"]))
            Path(t["result"]).write_text(json.dumps(result))
        else:
            print(json.dumps(run_one(RunSpec(**spec))))
        return 0

    from rich.console import Console

    console = Console()
    plan = make_plan(args)
    name = "efficiency-quick" if args.quick else "efficiency"
    out = args.out or ROOT / "bench" / "results" / name
    runs_dir = out / "runs"
    regimes = list(dict.fromkeys(c.regime for c in plan.cells))
    models = {r: regime_model(r, out.parent / "efficiency-models") for r in regimes}
    if args.default_model:
        for r in regimes:
            if REGIMES[r].warmup_target is None:
                models[r] = str(Path(args.default_model).resolve())
    if "tiny" in models.values() and not (model_dir("tiny") / "config.json").is_file():
        raise SystemExit(f"the bundled tiny model is missing at {model_dir('tiny')}: rebuild it with `vigor make-tiny`")
    specs = make_specs(plan, runs_dir, models)
    started = time.time()
    failures = [] if args.aggregate_only else execute(specs, plan.jobs, out / "logs", console)

    results: dict[str, Any] = {
        "plan": asdict(plan), "machine": machine(), "command": " ".join(  # the study's command (tables recomputed later still name it)
            ["python bench/efficiency.py", *(a for a in (sys.argv[1:] if argv is None else argv) if a != "--aggregate-only")]),
        "study_seconds": None if args.aggregate_only else time.time() - started,
        "aggregated_only": args.aggregate_only, "failures": failures, "cells": {},
    }
    timing_steps = args.timing_steps if args.timing_steps is not None else (2 if args.quick else 12)
    timing_path = out / "timing.json"
    math_cell = next((c for c in plan.cells if c.task == "tiny-math" and c.regime == "default"), None)
    if timing_steps and math_cell and not args.aggregate_only:
        console.print(f"timing: grpo and vigor interleaved, {timing_steps} steps each, one process")
        job = {"timing": {"model": models["default"], "arms": [BASELINE, "vigor"], "steps": timing_steps,
                          "prompts_per_step": math_cell.prompts_per_step, "workdir": str(out / "timing"), "result": str(timing_path)}}
        with open(out / "logs" / "timing.log", "w") as log:
            subprocess.run(["nice", "-n", "10", sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)],
                           cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=_child_env())
    if timing_path.is_file():
        results["timing"] = json.loads(timing_path.read_text())
    merged: dict[str, Cell] = {}
    for c in plan.cells:  # rows of one task and regime make one table
        if c.key in merged:
            merged[c.key].arms = merged[c.key].arms + [a for a in c.arms if a not in merged[c.key].arms]
        else:
            merged[c.key] = Cell(**asdict(c))
    for c in merged.values():
        dirs = sorted((runs_dir / c.key).glob("*-s*")) if (runs_dir / c.key).is_dir() else []
        cell = aggregate_cell(dirs, c.arms, plan.target_gain, args.target, out / c.key)
        if cell:
            cell["model"] = models[c.regime]
            cell["regime"] = asdict(REGIMES[c.regime])
            cell["model_sha256"] = model_digest(models[c.regime])
            cell["start_distribution"] = start_distribution(
                c.task, models[c.regime], REGIMES[c.regime].temperature, out / c.key / "start_pass_rates.json"
            )
            results["cells"][c.key] = cell
    json_path, md_path = out.parent / f"{out.name}.json", out.parent / f"{out.name}.md"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(render_markdown(results))
    if not args.quick and args.out is None:  # the committed copy BENCHMARKS.md cites
        PUBLISHED.write_text(json.dumps(_rounded(results), separators=(",", ":")) + "\n")
    print_tables(results, console)
    console.print(f"results: {json_path}; tables: {md_path}; plots under {out}")
    if failures:
        console.print(f"[red]{len(failures)} runs failed:[/] " + "; ".join(f"{f['run']}: {f['last_line']}" for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
