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
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vigor_cli.allocation import STRATEGIES  # noqa: E402 - after the sys.path line: every registered strategy


def _sibling(name: str) -> Any:
    """A module of bench/ beside this file, loaded by path (bench/ is not a package, and not on
    sys.path when the tests load this file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


intervals = _sibling("intervals")
"""bench/intervals.py: the paired intervals and the rule for a comparison on the line."""

ISSUE7_ARMS = ["grpo", "vigor", "dapo", "greso", "pods", "random", "difficulty"]
"""The strategies issue 7's study compared (every one registered then): a record of that study."""
BASELINE = "grpo"
CHILD_NICE = int(os.environ.get("VIGOR_BENCH_NICE", "5"))
"""Niceness of every child run (the shared machine's convention for heavy work; the
environment variable VIGOR_BENCH_NICE overrides it); start the study itself without `nice`,
or the children inherit it on top of this."""

STRATEGY_SETS: dict[str, list[str]] = {
    "dapo": ["allocation.gen_batch_multiplier=1"],
    "greso": ["allocation.gen_batch_multiplier=1"],
    "pods": ["allocation.pods.n=8", "allocation.pods.m=4"],
}
"""Overrides that give a strategy the study's budget (see "Equal budgets" above); a strategy
not named here runs on the task config's settings."""

ARM_SETS: dict[str, list[str]] = {
    **{name: [f"allocation.strategy={name}", *STRATEGY_SETS.get(name, [])] for name in STRATEGIES},
    # Ablations that look for why VIGOR wins or loses (--arms ...).
    "vigor-agg-grpo": ["allocation.strategy=vigor", "grpo.loss_agg=grpo"],
    "grpo-agg-grpo": ["allocation.strategy=grpo", "grpo.loss_agg=grpo"],
    "vigor-scale-none": ["allocation.strategy=vigor", "grpo.scale_rewards=none"],
    "grpo-scale-none": ["allocation.strategy=grpo", "grpo.scale_rewards=none"],
    # schedule: 2 rounds of 4 then 8 (every prompt gets 4, half of them 12) instead of 2/4/8/16
    "vigor-T2": ["allocation.strategy=vigor", "allocation.rounds=2", "allocation.m0=4"],
    # breadth at the same 256 rollouts per step: 64 prompts, 2 each, then 4 more for half
    "vigor-wide": ["allocation.strategy=vigor", "train.prompts_per_step=64", "allocation.rounds=2", "allocation.budget=256"],
    # the same rollouts on twice the prompts, 4 each (the cell's batch x 2: see arm_sets)
    "grpo-wide": ["allocation.strategy=grpo", "allocation.group_size=4"],
    # a larger batch at the paper's 8 per prompt: 64 prompts, 512 rollouts per step (half the steps)
    "vigor-64": ["allocation.strategy=vigor", "train.prompts_per_step=64"],
    # issue 11: per-prompt loss weighting and the peers
    "vigor-prompt-mean": ["allocation.strategy=vigor", "grpo.loss_agg=prompt_mean"],
    "grpo-64": ["allocation.strategy=grpo", "train.prompts_per_step=64"],
}
"""Config overrides per arm (``--set`` syntax): one arm per registered strategy
(vigor_cli.allocation.STRATEGIES), then the ablations; the group size 8 and budget come from
the task config."""

WIDE_ARMS = {"grpo-wide"}
"""Arms that spread the cell's rollouts over twice its prompts (4 per prompt instead of 8)."""
DEPTH_ARMS = {"grpo-n2": 2, "grpo-n4": 4, "grpo-n16": 16}
"""The compute axis (issue 25): grpo with this many rollouts per prompt at the cell's rollouts
per step (8 x its prompts), so n x prompts stays the same; `grpo` is the n = 8 point."""
ARM_SETS.update({arm: ["allocation.strategy=grpo", f"allocation.group_size={n}"] for arm, n in DEPTH_ARMS.items()})


def arm_sets(arm: str, prompts_per_step: int) -> list[str]:
    """The arm's overrides for a cell of ``prompts_per_step`` prompts."""
    extra = [f"train.prompts_per_step={2 * prompts_per_step}"] if arm in WIDE_ARMS else []
    if arm in DEPTH_ARMS:
        extra = [f"train.prompts_per_step={8 * prompts_per_step // DEPTH_ARMS[arm]}"]
    return [*ARM_SETS[arm], *extra]


def rollouts_per_prompt(arm: str) -> int:
    """The compute axis's x: rollouts per prompt of a grpo arm (grpo itself: 8)."""
    return DEPTH_ARMS.get(arm, 8)


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
    recipe: str | None = None
    """A task warm-up of the bundled model (`vigor make-tiny --recipe`), built once per study."""
    task: str | None = None
    """The only task this regime applies to (None: any)."""
    plateau_of: str | None = None
    """Issue 25: the model of this regime is the one of ``plateau_of`` trained further with grpo
    until its held-out accuracy stops rising (`python bench/efficiency.py --make-plateau REGIME`)."""
    label: str | None = None
    """The cell's name is '<task>-<label>' (plateau regimes: 'tiny-math-plateau')."""


REGIMES: dict[str, Regime] = {
    "default": Regime(None, 1.0, "bundled tiny model, rollout temperature 1 (the default config)"),
    "peaked": Regime(None, 0.5, "bundled tiny model, rollout temperature 0.5: pass rates pushed to 0 and 1"),
    "flat": Regime(None, 1.5, "bundled tiny model, rollout temperature 1.5: lower, more spread pass rates"),
    "weak": Regime(0.2, 1.0, "tiny model warmed up to probe accuracy 0.2 (vigor make-tiny --target 0.2)"),
    "strong": Regime(0.8, 1.0, "tiny model warmed up to probe accuracy 0.8 (vigor make-tiny --target 0.8)"),
    "facts": Regime(None, 1.0, "tiny-facts: the bundled model warmed on the facts with unequal exposure "
                    "(vigor make-tiny --recipe facts): low transfer, pass rates heavy at 0 and 1", recipe="facts", task="tiny-facts"),
    "ladder": Regime(None, 1.0, "tiny-ladder: the bundled model warmed on additions of 1+1 to 3+3 digits "
                     "(vigor make-tiny --recipe ladder): a difficulty ladder", recipe="ladder", task="tiny-ladder"),
    "plateau-math": Regime(None, 1.0, "tiny-math at a plateau: the bundled model trained with grpo until held-out "
                           "accuracy stopped rising", task="tiny-math", plateau_of="default", label="plateau"),
    "plateau-facts": Regime(None, 1.0, "tiny-facts at a plateau: the facts model trained with grpo until its recall "
                            "stopped rising", task="tiny-facts", plateau_of="facts", label="plateau"),
    "plateau-ladder": Regime(None, 1.0, "tiny-ladder at a plateau: the ladder model trained with grpo until held-out "
                             "accuracy stopped rising", task="tiny-ladder", plateau_of="ladder", label="plateau"),
}
"""Every regime the harness knows; STUDY picks the ones the full run uses (weak and strong build a model first)."""

ABLATIONS = ["vigor-T2", "vigor-wide", "grpo-wide", "vigor-64", "grpo-64"]
"""Arms that look for why VIGOR wins or loses on the default regime (sized for 32 prompts per step)."""

TASK_SIZES = {
    "tiny-math": dict(prompts_per_step=32, total_rollouts=256 * 10, eval_every_rollouts=512),
    "tiny-code": dict(prompts_per_step=16, total_rollouts=128 * 10, eval_every_rollouts=256),
    "tiny-facts": dict(prompts_per_step=32, total_rollouts=256 * 10, eval_every_rollouts=512),
    "tiny-ladder": dict(prompts_per_step=32, total_rollouts=256 * 10, eval_every_rollouts=512),
}
"""Per task: the batch (as in configs/<task>.yaml; 8 rollouts per prompt), each run's total
rollouts (10 grpo steps: sized so 6 regimes x 8 arms x 3-5 seeds fit an afternoon on two
shared cores; issue 7's study ran 30 steps), and the evaluation interval in rollouts."""
TASK_SETS = {
    "tiny-math": [],
    "tiny-code": ["train.eval_samples=4", "train.eval_temperature=1.0"],
    "tiny-facts": ["train.eval_samples=2", "train.eval_temperature=1.0"],
    # the warmed ladder model is fragile under RL at the default lr 5e-4: on seed 0, grpo lost
    # 2.5 points of held-out accuracy in 10 steps (0.454 -> 0.429) and gained 7 at 2e-4
    "tiny-ladder": ["grpo.learning_rate=2e-4"],
}
"""Per-task overrides: tiny-code's held-out set has only 40 problems and the start model
solves 33 greedily, so its accuracy is avg@4 at temperature 1 (finer steps, more headroom).
tiny-facts evaluates recall of its own 256 facts as avg@2 at temperature 1 (the mean pass rate
RL moves; greedy decoding would hide a fact rising from 0.3 to 0.45; 2 samples, not 4, because
evaluation cost more than training)."""
QUICK_SIZE = dict(prompts_per_step=8, total_rollouts=64 * 3, eval_every_rollouts=64)

ISSUE11_ARMS = ["grpo", "grpo-wide", "vigor", "vigor-prompt-mean", "vigor-scale-none", "knapsack", "reinforce-ada", "auto"]
"""Every arm of the regime study (issue 11)."""

ISSUE11_STUDY: list[tuple] = [
    ("tiny-facts", "facts", ISSUE11_ARMS),
    ("tiny-ladder", "ladder", ISSUE11_ARMS),
    ("tiny-math", "default", ISSUE11_ARMS),
    ("tiny-math", "peaked", ISSUE11_ARMS),
    ("tiny-math", "flat", ISSUE11_ARMS),
    ("tiny-code", "default", ISSUE11_ARMS),
]
"""Issue 11's study (`--study issue11`): six regimes at 10 grpo steps per run."""
ISSUE25_ARMS = [*ISSUE11_ARMS[:-1], "pilot-commit", "auto"]
"""Every arm of the issue 25 study on issue 11's regimes: issue 11's and Pilot-Commit."""
PLATEAU_ARMS = [a for a in ISSUE25_ARMS if a != "vigor-scale-none"]
"""The plateau regimes' arms: vigor-scale-none (no better than vigor in issue 11, not asked
for by issue 25) is left out to fit the machine's time."""
COMPUTE_ARMS = ["grpo-n2", "grpo-n4", "grpo", "grpo-n16"]
"""The compute axis: grpo at 2, 4, 8 and 16 rollouts per prompt, the same rollouts per step."""
COMPUTE_LENGTHS = (10, 30, 100)
"""The compute axis's run lengths, in grpo steps' worth of rollouts (one 100-step run per
seed and arm, read at 10, 30 and 100: the schedule does not depend on the length)."""
PLATEAU_LENGTH = 3
"""Plateau runs are this many times the 10 grpo steps of issue 11's (30 steps, 7,680 rollouts),
evaluated every 768 rollouts (3 steps): 10 evaluations after the start, not 15, since an
evaluation of tiny-facts (avg@2 over 256 facts) costs about as much as a training step's."""

STUDY: list[tuple] = [
    *((t, r, ISSUE25_ARMS) for t, r, _ in ISSUE11_STUDY),
    ("tiny-math", "plateau-math", PLATEAU_ARMS, {"length": PLATEAU_LENGTH, "eval_every_rollouts": 768}),
    ("tiny-facts", "plateau-facts", PLATEAU_ARMS, {"length": PLATEAU_LENGTH, "eval_every_rollouts": 768}),
    ("tiny-ladder", "plateau-ladder", PLATEAU_ARMS, {"length": PLATEAU_LENGTH, "eval_every_rollouts": 768}),
    ("tiny-math", "default", COMPUTE_ARMS,
     {"length": max(COMPUTE_LENGTHS) // 10, "eval_every_rollouts": 1280, "name": "tiny-math-compute"}),
]
"""The full study (issue 25): (task, regime, arms[, size]); size: ``length`` (x the task's 10
grpo steps), ``eval_every_rollouts``, ``name`` (the cell's key). Runs go seed by seed over
every cell (so a study cut short has the same seeds everywhere); rows with the same key form
one table. Issue 11's six regimes are ISSUE11_STUDY (`--study issue11`); issue 7's study
(dapo, greso, pods, random, difficulty and the breadth ablations) is ISSUE7_STUDY."""
QUICK_STUDY: list[tuple] = [("tiny-math", "default", ISSUE25_ARMS)]
ISSUE7_STUDY: list[tuple[str, str, list[str]]] = [
    ("tiny-math", "default", ISSUE7_ARMS),
    ("tiny-math", "peaked", ["grpo", "vigor", "dapo"]),
    ("tiny-math", "flat", ["grpo", "vigor", "dapo"]),
    ("tiny-math", "default", ABLATIONS),
    ("tiny-code", "default", ["grpo", "vigor"]),
]


@dataclass
class Cell:
    """One comparison: a task, a starting regime, the arms, and the run size."""

    task: str
    regime: str
    arms: list[str]
    prompts_per_step: int
    total_rollouts: int
    eval_every_rollouts: int
    name: str | None = None
    """The cell's key when it is not '<task>-<regime>' (the compute axis: 'tiny-math-compute')."""

    @property
    def key(self) -> str:
        return self.name or cell_key(self.task, self.regime)


def cell_key(task: str, regime: str) -> str:
    """'tiny-math-default'; a task's own warmed regime is named by the task alone ('tiny-facts');
    a labelled regime by its label ('tiny-math-plateau')."""
    if REGIMES[regime].label:
        return f"{task}-{REGIMES[regime].label}"
    return task if REGIMES[regime].task == task else f"{task}-{regime}"


@dataclass
class Plan:
    """What a study runs."""

    cells: list[Cell]
    seeds: int
    jobs: int
    target_gain: float
    extra_sets: list[str] = field(default_factory=list)
    first_seed: int = 0
    """Run seeds first_seed..seeds-1 only (the others are kept or run elsewhere); tables use all."""


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
    ``eval_every_rollouts``: `vigor train`'s own entry point (vigor_cli.trainer.train) with
    train.max_rollouts and train.eval_every_rollouts, so a study run is a `vigor train` run."""
    import torch
    from rich.console import Console

    from vigor_cli.trainer import train

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


# =========================================================================== the plan
def recipe_digest(recipe: str) -> str:
    """Short hash of a warm-up recipe's settings and its task's data, naming the cached model."""
    import hashlib

    from vigor_cli import tiny_model
    from vigor_cli.tasks import tiny_facts, tiny_ladder

    parts = {"facts": [tiny_model.FACTS_RECIPE, tiny_facts.FACTS, tiny_facts.CODE_RANGE],
             "ladder": [tiny_model.LADDER_RECIPE, tiny_ladder.RUNGS, tiny_ladder.TRAIN_PER_RUNG, tiny_ladder.HELD_PER_RUNG]}
    return hashlib.sha256(json.dumps(parts[recipe], sort_keys=True).encode()).hexdigest()[:8]


def recipe_model(recipe: str, models_dir: Path) -> str:
    """The bundled model warmed by `vigor make-tiny --recipe RECIPE` (seed 0), built once and cached."""
    path = models_dir / f"{recipe}-s0-{recipe_digest(recipe)}"
    if (path / "config.json").is_file() and (path / "recipe.json").is_file():
        return str(path)
    if path.exists():
        shutil.rmtree(path)  # a build that was interrupted
    models_dir.mkdir(parents=True, exist_ok=True)
    log = models_dir / f"{path.name}.log"
    print(f"building the '{recipe}' starting model: vigor make-tiny --recipe {recipe} (a few CPU minutes)", flush=True)
    with open(log, "w") as f:
        proc = subprocess.run(
            ["nice", "-n", str(CHILD_NICE), sys.executable, "-m", "vigor_cli", "make-tiny", "--recipe", recipe, "--out", str(path)],
            cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=_child_env(),
        )
    if proc.returncode != 0:
        raise SystemExit(f"vigor make-tiny --recipe {recipe} failed; see {log}")
    return str(path)


PLATEAU = dict(seed=1000, eval_every_steps=20, patience=3, max_steps=600)
"""How a plateau start is made: grpo (the task's study settings, 32 prompts x 8 rollouts per
step, seed 1000: not a study seed) evaluated every 20 steps until ``patience`` evaluations in a
row bring no gain over the best before them (at most ``max_steps``); the model after the last
step is the start. Every 5 steps was too often: tiny-math 'plateaued' after 25 steps at 0.566
(best 0.598, evaluation noise about 3 points) where the 150-step default run reaches 0.75."""
PLATEAU_KEEP = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt")


def plateau_reached(accuracies: Sequence[float], patience: int) -> bool:
    """True when the last ``patience`` evaluations are none above the best one before them."""
    if len(accuracies) <= patience:
        return False
    return max(accuracies[-patience:]) <= max(accuracies[:-patience])


def plateau_config(regime: str, base_model: str, run_dir: Path, steps: int) -> Any:
    """The grpo run that makes a plateau start: the task's study settings at 32 prompts per step."""
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config

    task = REGIMES[regime].task
    p = PLATEAU
    sets = [
        f"model.name_or_path={base_model}", f"train.seed={p['seed']}", f"train.output_dir={run_dir.parent}",
        f"train.run_name={run_dir.name}", f"train.steps={steps}", f"train.eval_every={p['eval_every_steps']}",
        f"train.save_every={p['eval_every_steps']}", "train.log_completions_every=0", "train.reward_workers=1",
        f"train.prompts_per_step={TASK_SIZES[task]['prompts_per_step']}",
        f"sampling.temperature={REGIMES[regime].temperature}", *TASK_SETS[task], "allocation.strategy=grpo",
    ]
    return build_config(default_config_file(None, task), overrides={"task.name": task}, sets=sets)


def make_plateau(regime: str, base_model: str, out: Path) -> dict:
    """Train ``base_model`` with grpo until held-out accuracy stops rising (PLATEAU), then copy
    the final weights to ``out`` with plateau.json (how it was made). Child process."""
    import torch
    from rich.console import Console

    from vigor_cli.runs import load_run
    from vigor_cli.trainer import train

    torch.set_num_threads(1)
    run_dir = out.parent / f"{out.name}-run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    quiet = Console(file=sys.stdout, width=160, force_terminal=False)
    step, every = 0, PLATEAU["eval_every_steps"]
    while True:
        step += every
        if step == every:
            train(plateau_config(regime, base_model, run_dir, step), out=quiet)
        else:
            train(resume=run_dir, steps=step, out=quiet)
        evals = sorted((int(r["step"]), float(r["eval/accuracy"])) for r in load_run(run_dir).metrics()
                       if r.get("eval/accuracy") is not None)
        accs = [a for _, a in evals]
        if plateau_reached(accs, PLATEAU["patience"]) or step >= PLATEAU["max_steps"]:
            break
    ckpt = run_dir / "checkpoints" / f"step-{step}"
    tmp = out.parent / f"{out.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name in PLATEAU_KEEP:
        if (ckpt / name).is_file():
            shutil.copy2(ckpt / name, tmp / name)
    info = {
        "regime": regime, "task": REGIMES[regime].task, "base_model": _rel(model_dir(base_model)) if base_model != "tiny" else "tiny",
        "base_model_sha256": model_digest(base_model), "rule": PLATEAU, "steps": step,
        "rollouts": step * TASK_SIZES[REGIMES[regime].task]["prompts_per_step"] * 8,
        "plateaued": plateau_reached(accs, PLATEAU["patience"]), "evaluations": [{"step": s, "accuracy": a} for s, a in evals],
        "command": f"python bench/efficiency.py --make-plateau {regime}",
    }
    (tmp / "plateau.json").write_text(json.dumps(info, indent=1) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the run's logs stay beside the model
    return info


def plateau_digest(regime: str) -> str:
    """Short hash of how a plateau start is made (the rule, the run's config keys, the base)."""
    import hashlib

    r = REGIMES[regime]
    parts = [PLATEAU, r.task, r.plateau_of, r.temperature, TASK_SETS[r.task], TASK_SIZES[r.task]["prompts_per_step"]]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:8]


def plateau_model(regime: str, models_dir: Path) -> str:
    """The plateau start of ``regime``, built once (a child process) and cached."""
    base = regime_model(REGIMES[regime].plateau_of, models_dir)
    path = models_dir / f"{regime}-{plateau_digest(regime)}"
    if (path / "config.json").is_file() and (path / "plateau.json").is_file():
        return str(path)
    models_dir.mkdir(parents=True, exist_ok=True)
    log = models_dir / f"{path.name}.log"
    print(f"building the '{regime}' start: grpo from {base} until held-out accuracy stops rising", flush=True)
    job = {"plateau": {"regime": regime, "base": base, "out": str(path)}}
    with open(log, "w") as f:
        proc = subprocess.run(["nice", "-n", str(CHILD_NICE), sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)],
                              cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=_child_env())
    if proc.returncode != 0:
        raise SystemExit(f"building the {regime} start failed; see {log}")
    return str(path)


def published_differs(path: str) -> str | None:
    """A warning when the committed results used a start model of this name with other weights
    (a model built by make-tiny or a plateau run on another kind of machine differs: the
    warm-up's float kernels follow the CPU's instruction set, BENCHMARKS.md), else None."""
    if not PUBLISHED.is_file() or path == "tiny":
        return None
    mine = model_digest(path)
    for cell in json.loads(PUBLISHED.read_text()).get("cells", {}).values():
        theirs = cell.get("model_sha256")
        if Path(str(cell.get("model"))).name == Path(path).name and theirs and mine and theirs != mine:
            return (f"warning: {_rel(path)} (sha256 {mine[:12]}) is not the model the committed results used "
                    f"(sha256 {theirs[:12]}): runs on it will not reproduce those results")
    return None


def regime_model(regime: str, models_dir: Path) -> str:
    """The starting model of ``regime``: 'tiny' (bundled), a make-tiny directory or a plateau
    start (each built once); a warning when it is not the one the committed results used."""
    path = _regime_model(regime, models_dir)
    warning = published_differs(path)
    if warning:
        print(warning, flush=True)
    return path


def _regime_model(regime: str, models_dir: Path) -> str:
    if REGIMES[regime].plateau_of:
        return plateau_model(regime, models_dir)
    if REGIMES[regime].recipe:
        return recipe_model(REGIMES[regime].recipe, models_dir)
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
            ["nice", "-n", str(CHILD_NICE), sys.executable, "-m", "vigor_cli", "make-tiny", "--out", str(path), "--target", str(target)],
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
    """Every run of the study, seed by seed over every cell: a study cut short has the same
    seeds in every cell and every arm."""
    specs = []
    for seed in range(plan.first_seed, plan.seeds):
        for cell in plan.cells:
            for arm in cell.arms:
                sets = [
                    f"train.prompts_per_step={cell.prompts_per_step}",
                    f"sampling.temperature={REGIMES[cell.regime].temperature}",
                    *TASK_SETS[cell.task],
                    *arm_sets(arm, cell.prompts_per_step),
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
            cmd = ["nice", "-n", str(CHILD_NICE), sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(asdict(spec))]
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
    from vigor_cli.jsonl import read_jsonl

    empty = {"signal_prompts": None, "signal_rollouts": None, "top_prompt_share": None, "kept_zero_var_share": None,
             "deep_share": None}
    path = run_path / "allocation.jsonl"
    if not path.is_file():
        return empty
    prompts, rollouts, top = [], [], []
    kept = kept_flat = 0
    decisions = []
    from vigor_cli.allocation import registry

    vigor_family = registry.in_family("vigor")
    for rec in read_jsonl(path).records:
        if "auto" in rec.get("totals", {}):
            decisions.append(rec["totals"]["auto"].get("decision") == "deep")
        if rec.get("strategy") in vigor_family:
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
        # auto: the share of its steps that went deep
        "deep_share": statistics.mean(decisions) if decisions else None,
    }


def run_measures(run: Any, target: float) -> dict:
    """One run's costs to ``target`` on three axes and its per-rollout timing."""
    from vigor_cli.report.curves import first_crossing, run_curve

    curve = run_curve(run)
    seconds = train_seconds_at_evals(run.metrics())
    eval_steps = sorted({int(r["step"]) for r in run.metrics() if r.get("eval/accuracy") is not None})
    secs = [seconds[s] for s in eval_steps]
    steps = [r for r in run.metrics() if "time/step" in r]
    rollouts = sum(r["rollouts/step"] for r in steps)
    gen = sum(r["time/generate"] for r in steps)
    return {
        "run": run.name,
        "seed": run.config_value("train.seed"),
        "eval_items": eval_items(run.path),
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


def eval_items(run_path: Path) -> int | None:
    """Graded answers behind one evaluation (held-out problems x samples each), from the
    start's evaluation file: what the evaluation's own noise scales with."""
    path = run_path / "eval" / "step-0.json"
    if not path.is_file():
        return None
    sets = json.loads(path.read_text()).get("sets", {})
    return sum(int(s["examples"]) * int(s["n"]) for s in sets.values()) or None


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
    # mean accuracy over the run's evaluations after the start: a read of the whole curve,
    # less at the mercy of one lucky or unlucky evaluation than the first crossing
    means = [statistics.mean(m["curve"]["accuracy"][1:]) for m in measures if len(m["curve"]["accuracy"]) > 1]
    out["mean_accuracy_median"] = statistics.median(means) if means else None
    out["final_accuracy_min"], out["final_accuracy_max"] = min(finals), max(finals)
    for key in ("seconds_per_rollout", "generate_seconds_per_rollout", "zero_var_frac", "reward_mean",
                "signal_prompts", "signal_rollouts", "top_prompt_share", "kept_zero_var_share", "deep_share"):
        vals = [m[key] for m in measures if m.get(key) is not None]
        out[f"{key}_median"] = statistics.median(vals) if vals else None
    return out


def add_ratios(arms: dict[str, dict], baseline: str) -> None:
    """Speed-ups against the baseline: baseline's median / the arm's (2.0 = half the cost)."""
    base = arms.get(baseline)
    for arm in arms.values():
        for axis in ("rollouts", "tokens", "seconds"):
            arm[f"{axis}_speedup"] = ratio(base and base[f"{axis}_to_target_median"], arm[f"{axis}_to_target_median"])
        arm["final_accuracy_delta"] = arm["final_accuracy_median"] - base["final_accuracy_median"] if base else None
        arm["mean_accuracy_delta"] = (arm["mean_accuracy_median"] - base["mean_accuracy_median"]
                                      if base and arm.get("mean_accuracy_median") is not None
                                      and base.get("mean_accuracy_median") is not None else None)
        arm["seconds_per_rollout_ratio"] = (
            arm["seconds_per_rollout_median"] / base["seconds_per_rollout_median"]
            if base and base["seconds_per_rollout_median"] and arm["seconds_per_rollout_median"] else None
        )


# --------------------------------------------------------------------------- statistics (issues 25, 33)
def run_mean_accuracy(m: dict) -> float | None:
    """The mean of a run's evaluations after the start: the whole curve in one number."""
    acc = m["curve"]["accuracy"]
    return statistics.mean(acc[1:]) if len(acc) > 1 else None


def speedup_of(reference: Sequence[float], arm: Sequence[float]) -> float:
    """reference's median rollouts to target / the arm's (misses are +inf): 0 when only the
    arm misses, inf when only the reference does, 1 when both do (neither reaches it)."""
    r, a = statistics.median(reference), statistics.median(arm)  # a miss is +inf
    if math.isinf(a):
        return 1.0 if math.isinf(r) else 0.0
    if a == 0:  # reached at the start (a sampled start evaluation above the target)
        return 1.0 if r == 0 else math.inf
    return math.inf if math.isinf(r) else r / a


verdict = intervals.verdict


def paired_intervals(arm_runs: list[dict], ref_runs: list[dict]) -> dict:
    """The arm against a reference on the seeds both ran (paired by seed: the same data order
    and sampling seeds), by bench/intervals.py: the mean accuracy over the run, arm minus
    reference (points of accuracy as a fraction), with its 95 % t interval, verdict and
    printed label ('unsettled': on the line with fewer than 12 seeds); the speed-up in
    rollouts to target, the reference's median over the arm's (as before) with the 95 %
    order-statistic interval of the per-seed speed-ups (the reference's rollouts over the
    arm's on each seed) and its verdict."""
    a = {m["seed"]: m for m in arm_runs}
    r = {m["seed"]: m for m in ref_runs}
    seeds = sorted(set(a) & set(r))
    if not seeds:
        return {"seeds": 0}
    inf = math.inf
    delta = [run_mean_accuracy(a[s]) - run_mean_accuracy(r[s]) for s in seeds]
    at = [inf if a[s]["rollouts_to_target"] is None else a[s]["rollouts_to_target"] for s in seeds]
    rt = [inf if r[s]["rollouts_to_target"] is None else r[s]["rollouts_to_target"] for s in seeds]
    mean, lo_d, hi_d = intervals.t_interval(delta)
    per_seed = [speedup_of([x], [y]) for x, y in zip(rt, at)]
    _, lo_s, hi_s, held = intervals.median_interval(per_seed)
    return {
        "seeds": len(seeds),
        "mean_accuracy_delta": mean, "mean_accuracy_delta_ci": [lo_d, hi_d],
        "accuracy_verdict": verdict(lo_d, hi_d, 0.0), "accuracy_label": intervals.accuracy_label(delta),
        "accuracy_t": intervals.t_statistic(delta), "on_the_line": intervals.on_the_line(delta),
        "speedup": speedup_of(rt, at), "speedup_per_seed_median": statistics.median(per_seed),
        "speedup_ci": [lo_s, hi_s], "speedup_ci_coverage": held, "speedup_verdict": verdict(lo_s, hi_s, 1.0),
    }


def unsettled_arms(results: dict) -> dict[str, list[str]]:
    """Cell -> arms whose mean-accuracy comparison with grpo sits on the line with fewer than
    12 seeds (bench/intervals.py): the runs `--settle-from` adds seeds to."""
    out: dict[str, list[str]] = {}
    for key, cell in results.get("cells", {}).items():
        base = cell.get("runs", {}).get(BASELINE)
        if not base or "compute_axis" in cell:
            continue
        for arm, runs in cell["runs"].items():
            vs = paired_intervals(runs, base) if arm != BASELINE else {"seeds": 0}
            if vs["seeds"] and vs["seeds"] < intervals.SETTLED_SEEDS and vs["on_the_line"]:
                out.setdefault(key, []).append(arm)
    return out


def evaluation_noise(start: float, items: int | None) -> float | None:
    """One standard error of an evaluation at accuracy ``start`` over ``items`` graded answers."""
    if not items:
        return None
    return math.sqrt(max(start * (1 - start), 1e-12) / items)


def add_intervals(cell: dict) -> None:
    """Issue 25's statistics on one cell: each arm against grpo (intervals and verdicts), the
    arms that beat auto by more than the noise, and whether grpo learned at all (its median
    gain above one standard error of the evaluation): where it did not, the cell's speed-ups
    measure the starting evaluation, not learning, and are not reported."""
    runs = cell["runs"]
    base = runs.get(BASELINE)
    items = [m.get("eval_items") for ms in runs.values() for m in ms if m.get("eval_items")]
    cell["eval_se"] = evaluation_noise(cell["start_accuracy"], int(statistics.median(items)) if items else None)
    if base:
        cell["grpo_gain"] = statistics.median(m["final_accuracy"] for m in base) - cell["start_accuracy"]
        cell["learned"] = cell["eval_se"] is None or cell["grpo_gain"] > cell["eval_se"]
        for arm, ms in runs.items():
            if arm != BASELINE:
                cell["arms"][arm]["vs_grpo"] = paired_intervals(ms, base)
    if "auto" in runs:
        beaten = {}
        for arm, ms in runs.items():
            if arm == "auto":
                continue
            vs = paired_intervals(ms, runs["auto"])
            cell["arms"][arm]["vs_auto"] = vs
            speed_counts = cell.get("learned", True)
            if accuracy_label(vs) == "win" or (speed_counts and vs.get("speedup_verdict") == "win"):
                beaten[arm] = {"accuracy": accuracy_label(vs), "speedup": vs.get("speedup_verdict")}
        cell["auto_beaten_by"] = beaten


def compute_axis(cell: dict, levels: Sequence[int]) -> dict:
    """The compute axis of one cell: per run length (rollouts), each arm's held-out accuracy
    at that length (its evaluation there; mean over seeds with a 95 % t interval) and its mean
    accuracy over the run up to it; the best arm per length and, paired by seed, how much each
    other arm is below it (paired t interval and verdict)."""
    import numpy as np

    out: dict[str, Any] = {"levels": list(levels), "arms": {}, "best": {}}

    def at(m: dict, c: int) -> tuple[float, float] | None:
        x, y = m["curve"]["rollouts"], m["curve"]["accuracy"]
        if c > x[-1] + 1e-9:
            return None
        upto = [acc for xx, acc in zip(x[1:], y[1:]) if xx <= c + 1e-9]
        return float(np.interp(c, x, y)), (statistics.mean(upto) if upto else y[0])

    for arm, ms in cell["runs"].items():
        rows = {}
        for c in levels:
            vals = {m["seed"]: at(m, c) for m in ms}
            vals = {s: v for s, v in vals.items() if v is not None}
            if not vals:
                continue
            mean, lo, hi = intervals.t_interval([v[0] for v in vals.values()])
            rows[str(c)] = {"seeds": len(vals), "accuracy_mean": mean, "accuracy_ci": [lo, hi],
                            "mean_accuracy_upto": float(np.mean([v[1] for v in vals.values()])),
                            "per_seed": {str(s): v[0] for s, v in vals.items()}}
        out["arms"][arm] = {"rollouts_per_prompt": rollouts_per_prompt(arm), "levels": rows}
    for c in levels:
        have = {a: d["levels"][str(c)] for a, d in out["arms"].items() if str(c) in d["levels"]}
        if not have:
            continue
        best = max(have, key=lambda a: have[a]["accuracy_mean"])
        gaps = {}
        for arm, row in have.items():
            if arm == best:
                continue
            seeds = sorted(set(row["per_seed"]) & set(have[best]["per_seed"]))
            delta, lo, hi = intervals.t_interval([row["per_seed"][s] - have[best]["per_seed"][s] for s in seeds])
            gaps[arm] = {"delta": delta, "ci": [lo, hi], "verdict": verdict(lo, hi, 0.0)}
        out["best"][str(c)] = {"arm": best, "rollouts_per_prompt": rollouts_per_prompt(best),
                               "tied_with": [a for a, g in gaps.items() if g["verdict"] == "tie"], "others": gaps}
    return out


def target_for(start: float, baseline_finals: Sequence[float], gain: float) -> float:
    """start + gain x (median baseline final - start); at least start + 0.005 so that a
    baseline that did not learn gives a target above the start."""
    return max(start + gain * (statistics.median(baseline_finals) - start), start + 0.005)


def kept_measures(m: dict, target: float) -> dict:
    """A run kept from an earlier study's results (its curve and per-run measures, no run
    directory), measured again against this study's target."""
    from vigor_cli.report.curves import first_crossing

    c = m["curve"]
    return {**m, "kept": True,
            "rollouts_to_target": first_crossing(c["rollouts"], c["accuracy"], target),
            "tokens_to_target": first_crossing(c["tokens"], c["accuracy"], target),
            "seconds_to_target": first_crossing(c["train_seconds"], c["accuracy"], target)}


def aggregate_cell(run_dirs: list[Path], arms: list[str], gain: float, target: float | None, plots_dir: Path,
                   kept: dict[str, list[dict]] | None = None) -> dict:
    """Tables and plots of one task x regime from its run directories, and from ``kept`` runs
    of an earlier study (arm -> per-run measures with curves) for seeds this study did not run."""
    from vigor_cli.report.curves import Group, run_curve
    from vigor_cli.runs import load_run

    by_arm: dict[str, list[Any]] = {}
    for d in run_dirs:
        if not (d / "summary.json").is_file():
            continue
        arm = d.name.rsplit("-s", 1)[0]
        by_arm.setdefault(arm, []).append(load_run(d))
    old: dict[str, list[dict]] = {}
    for arm, ms in (kept or {}).items():
        fresh = {r.config_value("train.seed") for r in by_arm.get(arm, [])}
        old[arm] = [m for m in ms if m["seed"] not in fresh]
    if not by_arm and not any(old.values()):
        return {}
    starts = [run_curve(r).by_rollouts.y[0] for runs in by_arm.values() for r in runs]
    starts += [m["curve"]["accuracy"][0] for ms in old.values() for m in ms]
    start = statistics.median(starts)
    if target is None:
        finals = [run_curve(r).final_accuracy for r in by_arm.get(BASELINE, [])]
        finals += [m["final_accuracy"] for m in old.get(BASELINE, [])]
        if not finals:
            finals = [run_curve(r).final_accuracy for r in next(iter(by_arm.values()))]
        target = target_for(start, finals, gain)
    cell: dict[str, Any] = {"start_accuracy": start, "target": target, "target_gain": gain, "arms": {}, "runs": {}}
    names = set(by_arm) | {a for a, ms in old.items() if ms}
    for arm in [a for a in arms if a in names] + sorted(a for a in names if a not in arms):
        measures = [run_measures(r, target) for r in by_arm.get(arm, [])]
        measures += [kept_measures(m, target) for m in old.get(arm, [])]
        measures.sort(key=lambda m: m["seed"])
        cell["runs"][arm] = measures
        cell["arms"][arm] = summarize_arm(measures)
        cell["arms"][arm]["kept_seeds"] = sorted(m["seed"] for m in measures if m.get("kept"))
    add_ratios(cell["arms"], BASELINE)
    add_intervals(cell)
    if any(a in DEPTH_ARMS for a in cell["runs"]):
        unit = cell["runs"][BASELINE][0]["curve"]["rollouts"][-1] / max(COMPUTE_LENGTHS) if BASELINE in cell["runs"] else None
        if unit:
            cell["compute_axis"] = compute_axis(cell, [round(n * unit) for n in COMPUTE_LENGTHS])
    if len(cell["runs"]) > 6 or any(old.values()):  # plot_cell draws small multiples from the measures
        return cell
    from vigor_cli.report.plots import plot_accuracy

    groups = [Group(arm, runs, [run_curve(r) for r in runs]) for arm, runs in by_arm.items()]
    crossings = {}
    for axis in ("rollouts", "tokens"):
        from vigor_cli.report.curves import first_crossing

        crossings[axis] = [
            first_crossing(getattr(g.mean, f"by_{axis}").x, getattr(g.mean, f"by_{axis}").y, target) for g in groups
        ]
        cell[f"plot_{axis}"] = _rel(
            plot_accuracy([g.mean for g in groups], axis, plots_dir / f"accuracy_vs_{axis}.png", target, crossings[axis])
        )
    return cell


def _rel(path: str | Path) -> str:
    """``path`` relative to the repository when inside it (no absolute paths in results)."""
    for candidate in (Path(os.path.abspath(path)), Path(path).resolve()):  # bench/results may be a link
        try:
            return str(candidate.relative_to(ROOT))
        except ValueError:
            continue
    return str(path)


def start_distribution(task_name: str, model: str, temperature: float, cache: Path, problems: int = 256, samples: int = 16) -> dict:
    """Pass counts out of ``samples`` of the starting model on ``problems`` training prompts at
    the regime's rollout temperature, and their variance law: the distribution allocation
    starts from (cached)."""
    if cache.is_file():
        cached = json.loads(cache.read_text())
        if "variance_law" in cached:
            return cached
    import random

    import torch

    from vigor_cli.config import TaskConfig
    from vigor_cli.models import resolve_model_path
    from vigor_cli.tasks import get_task
    from vigor_cli.tiny_model import load, pass_rates
    from vigor_cli.variance_law import census

    torch.set_num_threads(1)
    model_obj, tokenizer = load(resolve_model_path(model))
    task = get_task(TaskConfig(name=task_name), workers=1)
    try:
        train = task.train_examples()
        examples = random.Random(0).sample(train, min(problems, len(train)))
        max_new = 48 if task_name == "tiny-code" else 16
        rates = pass_rates(task, model_obj, tokenizer, examples, samples, seed=0, temperature=temperature, max_new_tokens=max_new)
    finally:
        task.close()
    counts = [round(r * samples) for r in rates]
    law = census(counts, samples)
    out = {
        "problems": len(examples),
        "samples_per_problem": samples,
        "temperature": temperature,
        "pass_counts": counts,
        "mean_pass_rate": law.mean_pass_rate,
        "pass_count_histogram": law.histogram,
        # unbiased share of zero-variance groups of 8 (vigor_cli/variance_law.py)
        "zero_variance_at_8": law.zero_variance_share_8,
        # unbiased per-prompt reward variances: their mean, the mean over the top eighth (the
        # prompts VIGOR's last round concentrates on), the fitted Pareto k and its eta
        "mean_variance": law.mean_variance,
        "top_eighth_variance": law.top_eighth_variance,
        "variance_law": law.to_dict(),
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


def _pts(d: float | None) -> str:
    return "-" if d is None else f"{d * 100:+.1f} pts"


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def markdown_table(cell: dict) -> str:
    learned = cell.get("learned", True)
    lines = [
        "| strategy | reached | rollouts to target: median [min-max] | speed-up | tokens to target | speed-up | "
        "train seconds to target | speed-up | final accuracy: median [min-max] | vs grpo | mean accuracy over the run | vs grpo "
        "| s/rollout vs grpo |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in cell["arms"].items():
        lines.append(
            f"| {arm} | {a['reached']}/{a['seeds']} "
            f"| {_count(a['rollouts_to_target_median'])} [{_count(a['rollouts_to_target_min'])}-{_count(a['rollouts_to_target_max'])}] "
            f"| {_x(a['rollouts_speedup']) if learned else 'no learning'} "
            f"| {_count(a['tokens_to_target_median'])} | {_x(a['tokens_speedup']) if learned else '-'} "
            f"| {_count(a['seconds_to_target_median'], 's')} | {_x(a['seconds_speedup']) if learned else '-'} "
            f"| {a['final_accuracy_median']:.3f} [{a['final_accuracy_min']:.3f}-{a['final_accuracy_max']:.3f}] "
            f"| {a['final_accuracy_delta'] * 100:+.1f} pts "
            f"| {_num(a.get('mean_accuracy_median'), 3)} | {_pts(a.get('mean_accuracy_delta'))} "
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


VIGOR_VARIANTS = ["vigor", "vigor-prompt-mean", "vigor-scale-none"]
ARM_COLORS = {
    "grpo": "#000000", "grpo-wide": "#7f7f7f", "vigor": "#1f77b4", "vigor-prompt-mean": "#17becf",
    "vigor-scale-none": "#9467bd", "knapsack": "#2ca02c", "reinforce-ada": "#ff7f0e", "auto": "#d62728",
    "pilot-commit": "#8c564b", "grpo-n2": "#e377c2", "grpo-n4": "#bcbd22", "grpo-n16": "#1f77b4",
}
"""One colour per arm, the same in every panel."""
PANELS = [("grpo and VIGOR variants", ["grpo", "grpo-wide", "vigor", "vigor-prompt-mean", "vigor-scale-none"]),
          ("peers and auto", ["grpo", "grpo-wide", "knapsack", "reinforce-ada", "pilot-commit", "auto"])]
"""Small multiples: at most 6 curves per panel."""
LEVEL_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c"]
"""The compute axis's run lengths, one colour each."""


def _speedup_value(a: dict | None) -> float:
    """Speed-up over grpo for ranking arms; an arm that misses the target ranks as 0."""
    return (a or {}).get("rollouts_speedup") or 0.0


def cell_checks(cell: dict) -> dict:
    """The issue's targets on one table: auto >= 1.0x grpo and within 10 % of the best arm;
    the best VIGOR variant's speed-up (>= 1.3x is the target in the low-transfer regime)."""
    arms = cell["arms"]
    if not arms.get(BASELINE) or arms[BASELINE].get("rollouts_to_target_median") is None:
        return {"baseline_reached": False}
    best = max(arms, key=lambda a: _speedup_value(arms[a]))
    out: dict[str, Any] = {"baseline_reached": True, "best_arm": best, "best_speedup": _speedup_value(arms[best])}
    if "auto" in arms:
        auto = _speedup_value(arms["auto"])
        out.update(auto_speedup=auto, auto_at_least_grpo=auto >= 1.0,
                   auto_within_10pct_of_best=auto >= 0.9 * out["best_speedup"])
    variants = [a for a in VIGOR_VARIANTS if a in arms]
    if variants:
        v = max(variants, key=lambda a: _speedup_value(arms[a]))
        out.update(best_vigor=v, best_vigor_speedup=_speedup_value(arms[v]))
    return out


def _cell_label(key: str) -> str:
    return key


def summary_table(results: dict) -> str:
    """Regime x strategy: median speed-up in rollouts to target over grpo (seeds reaching it)."""
    cells = results["cells"]
    arms = list(dict.fromkeys(a for c in cells.values() for a in c["arms"]))
    lines = ["| regime | " + " | ".join(arms) + " | best arm | auto >= 1.0x | auto within 10 % of best |",
             "|---|" + "---|" * (len(arms) + 3)]
    for key, cell in cells.items():
        row = []
        for a in arms:
            x = cell["arms"].get(a)
            if x is None:
                row.append("-")
            elif x["rollouts_speedup"] is None:
                row.append(f"not reached ({x['reached']}/{x['seeds']})")
            else:
                row.append(f"{x['rollouts_speedup']:.2f}x ({x['reached']}/{x['seeds']})")
        ch = cell_checks(cell)
        if not ch["baseline_reached"]:
            tail = ["grpo missed its own target", "-", "-"]
        else:
            yes = lambda b: "-" if b is None else ("yes" if b else "**no**")
            tail = [f"{ch['best_arm']} {ch['best_speedup']:.2f}x", yes(ch.get("auto_at_least_grpo")),
                    yes(ch.get("auto_within_10pct_of_best"))]
        lines.append(f"| {_cell_label(key)} | " + " | ".join(row + tail) + " |")
    return "\n".join(lines)


def mean_accuracy_table(results: dict) -> str:
    """Regime x strategy: mean accuracy over the run minus grpo's, in points (median of seeds)."""
    cells = results["cells"]
    arms = list(dict.fromkeys(a for c in cells.values() for a in c["arms"]))
    lines = ["| regime | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for key, cell in cells.items():
        row = [_pts(cell["arms"][a].get("mean_accuracy_delta")) if a in cell["arms"] else "-" for a in arms]
        lines.append(f"| {key} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def law_table(results: dict) -> str:
    """Per regime: the starting variance law (vigor_cli/variance_law.py)."""
    lines = ["| regime | prompts x samples | pass counts 0 / 1-3 / 4-7 / 8-11 / 12-15 / 16 | mean pass rate "
             "| zero-variance groups of 8 | top-eighth / mean variance | Pareto k (concentration) | k (Hill, top 25 %) "
             "| closed-form eta | eta^(1/3) | empirical eta |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, cell in results["cells"].items():
        d = cell["start_distribution"]
        law = d.get("variance_law")
        if not law:
            continue
        fmt = lambda k: k if isinstance(k, str) else ("-" if k is None else f"{k:.2f}")
        lines.append(
            f"| {key} | {law['prompts']} x {law['samples']} | {' / '.join(str(v) for v in law['histogram'].values())} "
            f"| {law['mean_pass_rate']:.3f} | {law['zero_variance_share_8']:.2f} | {law['concentration']['0.125']:.2f} "
            f"| {fmt(law['k'])} | {fmt(law['k_hill'])} | {law['eta']:.2f} | {law['speedup']:.2f} | {law['eta_empirical']:.2f} |"
        )
    return "\n".join(lines)


def _mean_curve(measures: list[dict]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Mean, min and max accuracy over seeds on the union of their evaluation points (interpolated)."""
    import numpy as np

    xs = sorted({x for m in measures for x in m["curve"]["rollouts"]})
    top = min(max(m["curve"]["rollouts"]) for m in measures)
    xs = [x for x in xs if x <= top]
    ys = np.array([np.interp(xs, m["curve"]["rollouts"], m["curve"]["accuracy"]) for m in measures])
    return xs, ys.mean(0).tolist(), ys.min(0).tolist(), ys.max(0).tolist()


def _finding(key: str, cell: dict) -> str:
    """The cell's finding for a plot title: by mean accuracy over the run against grpo (95 %
    intervals, win/tie/loss) where the intervals exist, else by rollouts to target."""
    arms = cell["arms"]
    if any("vs_grpo" in a for a in arms.values()):
        scored = {a: x["vs_grpo"] for a, x in arms.items() if x.get("vs_grpo", {}).get("seeds")}
        best = max(scored, key=lambda a: scored[a]["mean_accuracy_delta"])
        parts = [f"best {best} {scored[best]['mean_accuracy_delta'] * 100:+.1f} pts ({accuracy_label(scored[best])})"]
        if "auto" in scored and best != "auto":
            parts.append(f"auto {scored['auto']['mean_accuracy_delta'] * 100:+.1f} ({accuracy_label(scored['auto'])})")
        variants = [a for a in VIGOR_VARIANTS if a in scored]
        if variants:
            v = max(variants, key=lambda a: scored[a]["mean_accuracy_delta"])
            parts.append(f"{v} {scored[v]['mean_accuracy_delta'] * 100:+.1f} ({accuracy_label(scored[v])})")
        learned = "" if cell.get("learned", True) else "; grpo did not learn beyond the noise"
        return f"{key}: " + ", ".join(parts) + f" (mean accuracy vs grpo{learned})"
    ch = cell_checks(cell)
    if not ch["baseline_reached"]:
        return f"{key}: grpo misses its own target"
    parts = [f"best {ch['best_arm']} {ch['best_speedup']:.2f}x"]
    if "auto_speedup" in ch:
        parts.append(f"auto {ch['auto_speedup']:.2f}x" if ch["auto_speedup"] else "auto misses")
    if "best_vigor" in ch:
        parts.append(f"{ch['best_vigor']} {ch['best_vigor_speedup']:.2f}x" if ch["best_vigor_speedup"] else "VIGOR misses")
    return f"{key}: " + ", ".join(parts) + " (rollouts to target vs grpo)"


def plot_cell(key: str, cell: dict, path: Path) -> Path:
    """Accuracy vs cumulative rollouts, mean over seeds with a min-max band, two panels of
    at most 6 curves, one colour per arm; the finding in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(12, 4.2), dpi=110, sharey=True)
    for ax, (title, arms) in zip(axes, PANELS):
        for arm in arms:
            runs = cell["runs"].get(arm)
            if not runs:
                continue
            x, mean, lo, hi = _mean_curve(runs)
            color = ARM_COLORS.get(arm, "#bcbd22")
            ax.plot(x, mean, marker="o", markersize=3, color=color, label=arm)
            ax.fill_between(x, lo, hi, color=color, alpha=0.12, linewidth=0)
        ax.axhline(cell["target"], color="grey", linestyle="--", linewidth=1, label=f"target {cell['target']:.3f}")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("cumulative rollouts")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("held-out accuracy" if not key.startswith("tiny-facts") else "recall of the facts (sampled)")
    fig.suptitle(_finding(key, cell), fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def plot_compute(key: str, cell: dict, path: Path) -> Path:
    """The compute axis in two panels: held-out accuracy at each run length against rollouts
    per prompt (one colour per length, 95 % intervals), and accuracy against cumulative
    rollouts per arm; the finding (the best rollouts per prompt per length) in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax_data = cell["compute_axis"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), dpi=110)
    arms = sorted(ax_data["arms"], key=lambda a: ax_data["arms"][a]["rollouts_per_prompt"])
    ns = [ax_data["arms"][a]["rollouts_per_prompt"] for a in arms]
    for color, c in zip(LEVEL_COLORS, ax_data["levels"]):
        rows = [ax_data["arms"][a]["levels"].get(str(c)) for a in arms]
        xs = [n for n, r in zip(ns, rows) if r]
        ys = [r["accuracy_mean"] for r in rows if r]
        err = [[r["accuracy_mean"] - r["accuracy_ci"][0] for r in rows if r], [r["accuracy_ci"][1] - r["accuracy_mean"] for r in rows if r]]
        steps = round(c / (ax_data["levels"][-1] / max(COMPUTE_LENGTHS)))
        left.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=color, label=f"{c:,} rollouts ({steps} grpo steps)")
        best = ax_data["best"].get(str(c))
        if best:
            r = ax_data["arms"][best["arm"]]["levels"][str(c)]
            left.scatter([best["rollouts_per_prompt"]], [r["accuracy_mean"]], s=140, facecolors="none", edgecolors=color, linewidths=2)
    left.set_xscale("log", base=2)
    left.set_xticks(ns, [str(n) for n in ns])
    left.set_xlabel("rollouts per prompt (same 256 rollouts per step)")
    left.set_ylabel("held-out accuracy at that length (mean of seeds)")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    left.set_title("accuracy at each run length (circle: best)", fontsize=10)
    for arm in arms:
        runs = cell["runs"][arm]
        x, mean, lo, hi = _mean_curve(runs)
        color = ARM_COLORS.get(arm, "#333333")
        right.plot(x, mean, marker="o", markersize=2, color=color, label=f"{rollouts_per_prompt(arm)} per prompt ({arm})")
        right.fill_between(x, lo, hi, color=color, alpha=0.1, linewidth=0)
    for c in ax_data["levels"]:
        right.axvline(c, color="grey", linestyle=":", linewidth=1)
    right.set_xlabel("cumulative rollouts")
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="lower right")
    right.set_title("accuracy vs rollouts (mean of seeds, band min-max)", fontsize=10)
    finding = "; ".join(
        f"{int(c):,}: {b['rollouts_per_prompt']}" + (f" (ties {', '.join(str(rollouts_per_prompt(a)) for a in b['tied_with'])})" if b["tied_with"] else "")
        for c, b in ax_data["best"].items())
    fig.suptitle(f"{key}: best rollouts per prompt by run length (rollouts): {finding}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def plot_summary(results: dict, path: Path) -> Path:
    """One panel per regime: grpo, grpo-wide, the best VIGOR variant and auto (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = {k: c for k, c in results["cells"].items() if "compute_axis" not in c}
    n = len(cells)
    cols = 3
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.3 * cols, 3.4 * rows), dpi=100, squeeze=False)
    wins = {}
    for ax, (key, cell) in zip(axes.flat, cells.items()):
        ch = cell_checks(cell)
        arms = ["grpo", "grpo-wide", ch.get("best_vigor") or "vigor", "auto"]
        if ch.get("best_arm") and ch["best_arm"] not in arms:
            arms.append(ch["best_arm"])
        for arm in dict.fromkeys(arms):
            runs = cell["runs"].get(arm)
            if not runs:
                continue
            x, mean, _, _ = _mean_curve(runs)
            ax.plot(x, mean, marker="o", markersize=2, color=ARM_COLORS.get(arm, "#bcbd22"), label=arm)
        ax.axhline(cell["target"], color="grey", linestyle="--", linewidth=1)
        title = _finding(key, cell).replace(" (rollouts to target vs grpo)", "")
        ax.set_title("\n".join(textwrap.wrap(title, 58)), fontsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
        ax.tick_params(labelsize=7)
        ax.set_xlabel("rollouts", fontsize=7)
        if ch.get("baseline_reached"):
            wins[key] = ch["best_arm"]
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    per_arm = sorted({len(r) for c in cells.values() for r in c["runs"].values()}) or [0]
    seeds = str(per_arm[0]) if len(per_arm) == 1 else f"{per_arm[0]}-{per_arm[-1]}"
    verdicts: dict[str, dict[str, int]] = {}  # arm -> win/tie/loss counts by interval (issue 25)
    for cell in cells.values():
        for arm, a in cell["arms"].items():
            v = accuracy_label(a.get("vs_grpo", {}))
            if v:
                verdicts.setdefault(arm, {}).setdefault(v, 0)
                verdicts[arm][v] += 1
    if verdicts:
        said = [f"{arm} " + "/".join(f"{verdicts[arm].get(v, 0)} {v}" for v in ("win", "tie", "loss", "unsettled")
                                     if v != "unsettled" or verdicts[arm].get(v))
                for arm in ("auto", "grpo-wide", "vigor") if arm in verdicts]
        finding = "Against grpo by 95 % t interval (mean accuracy over the run): " + ", ".join(said)
    else:
        counts: dict[str, int] = {}
        for v in wins.values():
            counts[v] = counts.get(v, 0) + 1
        finding = "Best arm: " + ", ".join(f"{v} in {n}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1])) + f" of {len(wins)} regimes"
    fig.suptitle(f"{finding}\nheld-out accuracy vs cumulative rollouts, mean of {seeds} seeds; dashed: target", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def _ci(d: dict, key: str, scale: float = 1.0, fmt: str = "{:+.1f}") -> str:
    lo, hi = d[f"{key}_ci"]
    show = lambda v: "inf" if math.isinf(v) else fmt.format(v * scale)  # noqa: E731
    return f"{fmt.format(d[key] * scale) if not math.isinf(d[key]) else 'inf'} [{show(lo)}, {show(hi)}]"


VERDICT_MARK = {"win": "**win**", "tie": "tie", "loss": "*loss*", "unsettled": "unsettled", None: "-"}


def accuracy_label(vs: dict) -> str | None:
    """A mean-accuracy comparison's printed label ('unsettled': on the line with fewer than 12
    seeds, bench/intervals.py); results from before labels give the interval's verdict."""
    return vs.get("accuracy_label", vs.get("accuracy_verdict"))


def _accuracy_mark(vs: dict, seeds: int) -> str:
    """The label, with the comparison's seeds when they are not the regime's."""
    more = f" ({vs['seeds']} seeds)" if vs.get("seeds") != seeds else ""
    return VERDICT_MARK[accuracy_label(vs)] + more


def interval_tables(results: dict) -> str:
    """Issue 25's summary: each arm against grpo by 95 % interval (paired seeds), mean accuracy
    over the run and rollouts to target, win / tie / loss by whether the interval clears 0 (1x);
    cells where grpo did not learn beyond the evaluation's noise get no speed-ups."""
    cells = {k: c for k, c in results["cells"].items() if "compute_axis" not in c}
    arms = [a for a in dict.fromkeys(a for c in cells.values() for a in c["arms"]) if a != BASELINE]
    head = "| regime | seeds | grpo gain / eval SE | " + " | ".join(arms) + " |"
    sep = "|---|---|---|" + "---|" * len(arms)
    acc_rows, speed_rows = [head, sep], [head, sep]
    for key, cell in cells.items():
        seeds = cell["arms"].get(BASELINE, {}).get("seeds", 0)
        gain = cell.get("grpo_gain")
        se = cell.get("eval_se")
        g = "-" if gain is None else f"{gain * 100:+.1f} / {se * 100:.1f} pts" if se else f"{gain * 100:+.1f} pts"
        acc, speed = [], []
        for arm in arms:
            vs = cell["arms"].get(arm, {}).get("vs_grpo")
            if not vs or not vs.get("seeds"):
                acc.append("-")
                speed.append("-")
                continue
            acc.append(f"{_ci(vs, 'mean_accuracy_delta', 100)} {_accuracy_mark(vs, seeds)}")
            if cell.get("learned", True):
                speed.append(f"{_ci(vs, 'speedup', 1.0, '{:.2f}x')} {VERDICT_MARK[vs['speedup_verdict']]}")
            else:
                speed.append("no learning")
        acc_rows.append(f"| {key} | {seeds} | {g} | " + " | ".join(acc) + " |")
        speed_rows.append(f"| {key} | {seeds} | {g} | " + " | ".join(speed) + " |")
    return ("#### mean accuracy over the run, points above grpo [95 % interval], paired seeds\n\n" + "\n".join(acc_rows)
            + "\n\n#### rollouts to target, speed-up over grpo [95 % interval] (no learning: grpo's median gain is "
            "below one standard error of the evaluation, so a target would measure the start)\n\n" + "\n".join(speed_rows))


def auto_table(results: dict) -> str:
    """Per regime: auto's share of deep steps, its speed-up and accuracy against grpo, and any
    arm that beats it by more than the noise (interval above 0 or 1x)."""
    lines = ["| regime | auto deep steps | auto vs grpo: mean accuracy | auto vs grpo: speed-up (median) | arms above auto beyond the noise |",
             "|---|---|---|---|---|"]
    for key, cell in results["cells"].items():
        a = cell["arms"].get("auto")
        if not a or "vs_grpo" not in a:
            continue
        vs = a["vs_grpo"]
        deep = a.get("deep_share_median")
        beaten = cell.get("auto_beaten_by", {})
        who = ", ".join(f"{arm} ({'accuracy' if v['accuracy'] == 'win' else 'speed-up'})" for arm, v in beaten.items()) or "none"
        speed = f"{vs['speedup']:.2f}x {VERDICT_MARK[vs['speedup_verdict']]}" if cell.get("learned", True) else "no learning"
        seeds = cell["arms"].get(BASELINE, {}).get("seeds", 0)
        lines.append(f"| {key} | {'-' if deep is None else f'{deep:.0%}'} | {_ci(vs, 'mean_accuracy_delta', 100)} "
                     f"{_accuracy_mark(vs, seeds)} | {speed} | {who} |")
    return "\n".join(lines)


def compute_table(cell: dict) -> str:
    """The compute axis: accuracy at each run length per rollouts per prompt, the best marked."""
    ax = cell["compute_axis"]
    levels = [str(c) for c in ax["levels"]]
    lines = ["| rollouts per prompt (prompts per step) | " + " | ".join(f"accuracy at {int(c):,} rollouts" for c in levels) + " |",
             "|---|" + "---|" * len(levels)]
    for arm, d in sorted(ax["arms"].items(), key=lambda kv: kv[1]["rollouts_per_prompt"]):
        n = d["rollouts_per_prompt"]
        cells = []
        for c in levels:
            row = d["levels"].get(c)
            if not row:
                cells.append("-")
                continue
            best = ax["best"].get(c, {})
            mark = " **best**" if best.get("arm") == arm else (" (tie)" if arm in best.get("tied_with", []) else "")
            cells.append(f"{row['accuracy_mean']:.3f} [{row['accuracy_ci'][0]:.3f}, {row['accuracy_ci'][1]:.3f}]{mark}")
        lines.append(f"| {n} ({256 // n} of 256) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(results: dict) -> str:
    parts = []
    if any("vs_grpo" in a for c in results["cells"].values() for a in c["arms"].values()):
        parts.append("### summary by interval (issues 25, 33: paired t intervals)\n\n" + interval_tables(results) + "\n\n#### auto\n\n"
                     + auto_table(results) + "\n")
    for key, cell in results["cells"].items():
        if "compute_axis" in cell:
            parts.append(f"### compute axis: {key}\n\n" + compute_table(cell) + "\n")
    if results["cells"] and not parts:  # issue 11's summary (the interval tables above replace it)
        parts.append("### summary: speed-up in rollouts to target over grpo (median of seeds; seeds reaching the target)\n\n"
                     + summary_table(results) + "\n")
    if results["cells"]:
        parts.append("### mean accuracy over the run, points above grpo (median of seeds)\n\n" + mean_accuracy_table(results) + "\n")
        parts.append("### starting variance laws\n\n" + law_table(results) + "\n")
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
            f"mean {dist['mean_variance']:.3f}, top eighth of prompts {dist['top_eighth_variance']:.3f})"
            + (f". Variance law: {_law_line(dist['variance_law'])}" if dist.get("variance_law") else "") + "\n\n"
            + markdown_table(cell) + "\n\n" + mechanism_table(cell) + "\n"
        )
    return "\n".join(parts)


def _law_line(law: dict) -> str:
    fmt = lambda k: k if isinstance(k, str) else ("-" if k is None else f"{k:.2f}")
    return (f"Pareto k {fmt(law['k'])} (Hill {fmt(law['k_hill'])}), closed-form eta {law['eta']:.2f}, "
            f"eta^(1/3) {law['speedup']:.2f}, empirical eta {law['eta_empirical']:.2f}")


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
        if cell.get("start_distribution", {}).get("variance_law"):
            console.print(f"  starting variance law: {_law_line(cell['start_distribution']['variance_law'])}", highlight=False)
    if results["cells"]:
        console.print(summary_table(results), highlight=False)


# =========================================================================== main
PUBLISHED = ROOT / "bench" / "efficiency_results.json"
"""A compact copy of the full study's results, committed (bench/results/ is not)."""


def reproduction(results: dict, earlier: dict) -> dict:
    """Runs of an earlier study (same cell, arm and seed) whose evaluation curve this study
    reproduced exactly (to the 4 places the committed JSON rounds accuracies to)."""
    same, differ = 0, []
    for key, cell in results["cells"].items():
        old_cell = earlier.get("cells", {}).get(key)
        if not old_cell:
            continue
        for arm, runs in cell["runs"].items():
            old = {m["seed"]: m for m in old_cell.get("runs", {}).get(arm, [])}
            for m in runs:
                if m["seed"] not in old or m.get("kept"):
                    continue
                a, b = m["curve"]["accuracy"], old[m["seed"]]["curve"]["accuracy"]
                if len(a) == len(b) and all(abs(x - y) <= 6e-5 for x, y in zip(a, b)):  # b rounded to 4 places
                    same += 1
                else:
                    differ.append(f"{key}/{arm}-s{m['seed']}")
    return {"compared": same + len(differ), "identical": same, "different": differ}


def _rounded(obj: Any) -> Any:
    if isinstance(obj, float):
        return round(obj, 4)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def machine() -> dict:
    from vigor_cli.provenance import cpu_model

    return {"cpus": os.cpu_count(), "cpu_model": cpu_model(), "load_average": list(os.getloadavg()),
            "python": sys.version.split()[0]}


CELL_FACTS = ("model", "regime", "model_sha256", "start_distribution", "plateau")
"""What --restat keeps of a cell as the results JSON says it (how its start was made and measured)."""


def restat(source: Path, out: Path, seeds: int | None, gain: float, console: Any) -> int:
    """`--restat JSON`: every cell of an earlier results JSON again, its statistics recomputed
    (bench/intervals.py) from the JSON's per-seed curves and the finished runs under ``out``
    for the seeds it lacks (``--settle-from`` made them); seeds 0..``seeds``-1 when given.
    Writes the results, tables and the committed copy as a study does; builds no model."""
    from vigor_cli import provenance

    earlier = json.loads(source.read_text())
    results = {k: earlier[k] for k in ("plan", "machine", "command", "kept_from", "reproduction") if k in earlier}
    results.update(cells={}, failures=[], aggregated_only=True, study_seconds=None,
                   restat={"from": _rel(source), "intervals": "bench/intervals.py", "seeds": seeds,
                           "provenance": provenance.environment()})
    for key, cell in earlier["cells"].items():
        dirs = sorted((out / "runs" / key).glob("*-s*")) if (out / "runs" / key).is_dir() else []
        dirs = [d for d in dirs if seeds is None or int(d.name.rsplit("-s", 1)[1]) < seeds]
        kept = {arm: [m for m in ms if seeds is None or m["seed"] < seeds] for arm, ms in cell["runs"].items()}
        new = aggregate_cell(dirs, list(cell["arms"]), gain, None, out / key, kept)
        new.update({k: cell[k] for k in CELL_FACTS if k in cell})
        new["records"] = run_records(dirs)
        if "compute_axis" in new:
            new["plot"] = _rel(plot_compute(key, new, out / key / "compute_axis.png"))
        elif len(new["arms"]) > 1:
            new["plot"] = _rel(plot_cell(key, new, out / key / "accuracy_vs_rollouts_panels.png"))
        results["cells"][key] = new
    results["summary_plot"] = _rel(plot_summary(results, out / "summary_rollouts.png"))
    json_path, md_path = out.parent / f"{out.name}.json", out.parent / f"{out.name}.md"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(render_markdown(results))
    PUBLISHED.write_text(json.dumps(_rounded(results), separators=(",", ":")) + "\n")
    print_tables(results, console)
    console.print(f"results: {json_path}; tables: {md_path}; committed copy: {_rel(PUBLISHED)}")
    return 0


def run_records(dirs: Sequence[Path]) -> list[dict]:
    """What made a cell's fresh runs (their provenance.json): each distinct version set, with
    the runs that share it; runs kept from an earlier study have none, and a run that did not
    finish (no summary.json: not in the tables either) is left out."""
    from vigor_cli import provenance

    groups: dict[str, dict] = {}
    for d in dirs:
        record = provenance.read(d) if (d / "summary.json").is_file() else None
        if record is None:
            continue
        made = {"vigor": record.get("vigor"), "python": record.get("python", {}).get("version"),
                "libraries": {k: v for k, v in record.get("libraries", {}).items() if v},
                "machine": {k: record.get("machine", {}).get(k) for k in ("cpu", "cpu_capability", "device")},
                "torch_threads": record.get("threads", {}).get("torch_intra_op")}
        group = groups.setdefault(json.dumps(made, sort_keys=True), {**made, "runs": []})
        group["runs"].append(d.name)
    return list(groups.values())


def make_plan(args: argparse.Namespace) -> Plan:
    """The study's cells, filtered and resized by the command-line options."""
    study = QUICK_STUDY if args.quick else {"issue7": ISSUE7_STUDY, "issue11": ISSUE11_STUDY}.get(args.study, STUDY)
    tasks = args.tasks.split(",") if args.tasks else None
    regimes = args.regimes.split(",") if args.regimes else None
    for r in regimes or []:
        if r not in REGIMES:
            raise SystemExit(f"--regimes: unknown regime {r!r}; choose from {list(REGIMES)}")
    arms = args.arms.split(",") if args.arms else None
    for a in arms or []:
        if a not in ARM_SETS:
            raise SystemExit(f"--arms: unknown arm {a!r}; choose from {sorted(ARM_SETS)}")
    rows = [(row[0], row[1], list(row[2]), dict(row[3]) if len(row) > 3 else {}) for row in study]
    for t in tasks or []:
        if t not in TASK_SIZES:
            raise SystemExit(f"--tasks: unknown task {t!r}; choose from {list(TASK_SIZES)}")
    for r in regimes or []:  # a regime outside the study gets the default regime's arms
        for t in tasks or sorted({row[0] for row in rows}):
            if REGIMES[r].task not in (None, t):
                continue
            if not any(row[:2] == (t, r) for row in rows):
                base = next((row[2] for row in rows if row[:2] == (t, "default")), list(STRATEGIES))
                rows.append((t, r, list(base), {}))
    cells = []
    for t, r, a, extra in rows:
        if (tasks and t not in tasks) or (regimes and r not in regimes):
            continue
        size = dict(QUICK_SIZE if args.quick else TASK_SIZES[t])
        if not args.quick:
            size["total_rollouts"] *= extra.get("length", 1)
            size["eval_every_rollouts"] = extra.get("eval_every_rollouts", size["eval_every_rollouts"])
        for key in size:
            if getattr(args, key) is not None:
                size[key] = getattr(args, key)
        skip = set(args.skip_arms.split(",")) if args.skip_arms else set()
        cell = Cell(task=t, regime=r, arms=[x for x in (arms or a) if x not in skip],
                    name=None if args.quick else extra.get("name"), **size)
        if not cell.arms or (args.cells and cell.key not in args.cells.split(",")):
            continue
        if cell not in cells:  # --arms makes rows of one task and regime identical
            cells.append(cell)
    if not cells:
        raise SystemExit("no cell of the study matches --tasks/--regimes")
    return Plan(cells=cells, seeds=args.seeds or (2 if args.quick else 8), jobs=args.jobs,
                target_gain=args.target_gain, extra_sets=args.sets, first_seed=args.first_seed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="Minutes: every strategy, 2 seeds, 8 prompts per step, 192 rollouts per run, default regime.")
    p.add_argument("--study", choices=["issue25", "issue11", "issue7"], default="issue25",
                   help="issue25 (default): issue 11's 6 regimes, 3 plateau regimes and the compute axis, with Pilot-Commit; "
                   "issue11: 6 regimes x 8 arms; issue7: the earlier tiny-math study (dapo, greso, pods, ablations).")
    p.add_argument("--tasks", default=None, help="Only the study's cells of these tasks (comma-separated).")
    p.add_argument("--regimes", default=None, help=f"Only the study's cells of these regimes; a regime not in the study ({list(REGIMES)}) adds cells.")
    p.add_argument("--arms", default=None, help=f"Replace every cell's arms: strategies or ablations {sorted(ARM_SETS)}.")
    p.add_argument("--cells", default=None, help="Only these cells of the study, by key (tiny-math-default, tiny-math-plateau, tiny-math-compute, ...).")
    p.add_argument("--first-seed", type=int, default=0, help="Run only seeds from this one on (the earlier ones kept from --keep-from).")
    p.add_argument("--skip-arms", default=None, help="Leave these arms out of every cell (comma-separated); their finished runs stay.")
    p.add_argument("--seeds", type=int, default=None, help="Seeds per arm (0..N-1); default 8 (--quick: 2).")
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
    p.add_argument("--keep-from", default=None, metavar="JSON",
                   help="An earlier study's results JSON: its runs (curves and measures) count for the seeds this study did not run, "
                   "measured against this study's targets (issue 25 keeps issue 11's five seeds).")
    p.add_argument("--keep-skip", default=None, help="Arms whose kept runs are not used (their code changed since: auto).")
    p.add_argument("--compare-with", default=None, metavar="JSON",
                   help="An earlier study's results JSON: count the runs (same cell, arm, seed) whose evaluations this study reproduced exactly.")
    p.add_argument("--settle-from", default=None, metavar="JSON",
                   help="Only the runs that settle this results JSON's comparisons on the line (bench/intervals.py): "
                   "seeds --first-seed..--seeds-1 of each such arm and of grpo in its cell (with --cells: those cells); "
                   "then --restat recomputes the tables.")
    p.add_argument("--restat", default=None, metavar="JSON",
                   help="Recompute every cell's statistics from this results JSON's per-seed curves and the finished runs "
                   "under --out (the seeds it lacks), keeping what the JSON says of each cell's model; builds no model.")
    p.add_argument("--make-plateau", default=None, metavar="REGIME",
                   help="Only build the plateau start of REGIME (plateau-math, plateau-facts, plateau-ladder; 'all': the three) and print where it is.")
    p.add_argument("--timing-steps", type=int, default=None, help="Steps per arm of the interleaved timing of grpo and vigor (default 12; --quick 2; 0 skips it).")
    args = p.parse_args(argv)

    if args.child:
        spec = json.loads(args.child)
        if "plateau" in spec:
            job = spec["plateau"]
            print(json.dumps(make_plateau(job["regime"], job["base"], Path(job["out"]))))
            return 0
        if "timing" in spec:
            t = spec["timing"]
            result = timing(t["model"], t["arms"], t["steps"], t["prompts_per_step"], Path(t["workdir"]))
            Path(t["result"]).write_text(json.dumps(result))
        else:
            print(json.dumps(run_one(RunSpec(**spec))))
        return 0

    from rich.console import Console

    from vigor_cli import provenance

    console = Console()
    name = "efficiency-quick" if args.quick else "efficiency"
    out = args.out or ROOT / "bench" / "results" / name
    if args.make_plateau:
        wanted = [r for r in REGIMES if REGIMES[r].plateau_of] if args.make_plateau == "all" else [args.make_plateau]
        for r in wanted:
            if r not in REGIMES or not REGIMES[r].plateau_of:
                raise SystemExit(f"--make-plateau: unknown plateau regime {r!r}; choose from "
                                 f"{[x for x in REGIMES if REGIMES[x].plateau_of]} or all")
            path = Path(regime_model(r, out.parent / "efficiency-models"))
            info = json.loads((path / "plateau.json").read_text())
            console.print(f"{r}: {_rel(path)} after {info['steps']} grpo steps; held-out accuracy "
                          + " ".join(f"{e['accuracy']:.3f}" for e in info["evaluations"]), highlight=False)
        return 0
    if args.restat:
        return restat(Path(args.restat), out, args.seeds, args.target_gain, console)
    plan = make_plan(args)
    runs_dir = out / "runs"
    if args.settle_from:
        unsettled = unsettled_arms(json.loads(Path(args.settle_from).read_text()))
        plan.cells = [c for c in plan.cells if c.key in unsettled]
        for c in plan.cells:
            c.arms = [BASELINE, *unsettled[c.key]]
        console.print("settling: " + "; ".join(f"{c.key}: {', '.join(c.arms[1:])}" for c in plan.cells), highlight=False)
    regimes = list(dict.fromkeys(c.regime for c in plan.cells))
    models = {r: regime_model(r, out.parent / "efficiency-models") for r in regimes}
    if args.default_model:
        for r in regimes:
            if REGIMES[r].warmup_target is None and not REGIMES[r].recipe:
                models[r] = str(Path(args.default_model).resolve())
    if "tiny" in models.values() and not (model_dir("tiny") / "config.json").is_file():
        raise SystemExit(f"the bundled tiny model is missing at {model_dir('tiny')}: rebuild it with `vigor make-tiny`")
    specs = make_specs(plan, runs_dir, models)
    if args.settle_from:  # auto (the default strategy) and its reference first, then grpo-wide, then the rest;
        tier = {BASELINE: 0, "auto": 0, "grpo-wide": 1}  # a cell's seeds before the next cell's (--cells order)
        order = {key: i for i, key in enumerate((args.cells or "").split(","))}
        cell_of = {(c.task, c.regime): c.key for c in plan.cells}
        specs.sort(key=lambda s: (tier.get(s.arm, 2), order.get(cell_of[(s.task, s.regime)], len(order)), s.seed))
    started = time.time()
    failures = [] if args.aggregate_only else execute(specs, plan.jobs, out / "logs", console)
    if args.settle_from:  # the tables come from --restat, with the seeds the JSON holds
        console.print(f"{len(specs) - len(failures)} of {len(specs)} runs done in {time.time() - started:.0f} s")
        return 1 if failures else 0

    results: dict[str, Any] = {
        "plan": asdict(plan), "machine": machine(), "command": " ".join(  # the study's command (tables recomputed later still name it)
            ["python bench/efficiency.py", *(a for a in (sys.argv[1:] if argv is None else argv) if a != "--aggregate-only")]),
        "study_seconds": None if args.aggregate_only else time.time() - started,
        "aggregated_only": args.aggregate_only, "failures": failures, "cells": {},
        "provenance": provenance.environment(),  # the code and machine that ran (or aggregated) it
    }
    timing_steps = args.timing_steps if args.timing_steps is not None else (2 if args.quick else 12)
    timing_path = out / "timing.json"
    math_cell = next((c for c in plan.cells if c.task == "tiny-math" and c.regime == "default"), None)
    if timing_steps and math_cell and not args.aggregate_only:
        timed = [BASELINE, "vigor"] + (["auto"] if "auto" in STRATEGIES else [])
        console.print(f"timing: {', '.join(timed)} interleaved, {timing_steps} steps each, one process")
        job = {"timing": {"model": models["default"], "arms": timed, "steps": timing_steps,
                          "prompts_per_step": math_cell.prompts_per_step, "workdir": str(out / "timing"), "result": str(timing_path)}}
        with open(out / "logs" / "timing.log", "w") as log:
            subprocess.run(["nice", "-n", str(CHILD_NICE), sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)],
                           cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=_child_env())
    if timing_path.is_file():
        results["timing"] = json.loads(timing_path.read_text())
    keep_from = json.loads(Path(args.keep_from).read_text()) if args.keep_from else None
    if keep_from:
        results["kept_from"] = {"command": keep_from.get("command"), "seeds": keep_from.get("plan", {}).get("seeds"),
                                "skipped_arms": args.keep_skip}
    merged: dict[str, Cell] = {}
    for c in plan.cells:  # rows of one task and regime make one table
        if c.key in merged:
            merged[c.key].arms = merged[c.key].arms + [a for a in c.arms if a not in merged[c.key].arms]
        else:
            merged[c.key] = Cell(**asdict(c))
    for c in merged.values():
        dirs = sorted((runs_dir / c.key).glob("*-s*")) if (runs_dir / c.key).is_dir() else []
        dirs = [d for d in dirs if int(d.name.rsplit("-s", 1)[1]) < plan.seeds]  # only the seeds asked for
        kept = {}
        if keep_from and c.key in keep_from.get("cells", {}):
            skip = set((args.keep_skip or "").split(","))
            kept = {arm: [m for m in ms if m["seed"] < plan.seeds] for arm, ms in keep_from["cells"][c.key]["runs"].items()
                    if arm in c.arms and arm not in skip}
        cell = aggregate_cell(dirs, c.arms, plan.target_gain, args.target, out / c.key, kept)
        if cell:
            cell["model"] = _rel(models[c.regime]) if models[c.regime] != "tiny" else "tiny"
            cell["regime"] = asdict(REGIMES[c.regime])
            cell["model_sha256"] = model_digest(models[c.regime])
            cell["start_distribution"] = start_distribution(
                c.task, models[c.regime], REGIMES[c.regime].temperature, out / c.key / "start_pass_rates.json"
            )
            cell["records"] = run_records(dirs)  # what made the cell's runs (their provenance.json)
            made = model_dir(models[c.regime]) / "plateau.json"
            if made.is_file():  # how the plateau start was made
                cell["plateau"] = json.loads(made.read_text())
            results["cells"][c.key] = cell
            if "compute_axis" in cell:
                cell["plot"] = _rel(plot_compute(c.key, cell, out / c.key / "compute_axis.png"))
            elif len(cell["arms"]) > 1:
                cell["plot"] = _rel(plot_cell(c.key, cell, out / c.key / "accuracy_vs_rollouts_panels.png"))
    if len(results["cells"]) > 1:
        results["summary_plot"] = _rel(plot_summary(results, out / "summary_rollouts.png"))
    if args.compare_with:
        results["reproduction"] = reproduction(results, json.loads(Path(args.compare_with).read_text()))
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
