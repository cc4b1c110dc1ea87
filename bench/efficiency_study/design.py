"""What the efficiency study compares: the arms (config overrides per strategy and ablation),
the starting regimes, the per-task run sizes, the studies (the earlier studies' cells), and the
plan a command line makes of them (cells, then one run spec per cell, arm and seed)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from vigor_cli.allocation import STRATEGIES

ISSUE7_ARMS = ["grpo", "vigor", "dapo", "greso", "pods", "random", "difficulty"]
"""The strategies issue 7's study compared (every one registered then): a record of that study."""

BASELINE = "grpo"
STRATEGY_SETS: dict[str, list[str]] = {
    "dapo": ["allocation.gen_batch_multiplier=1"],
    "greso": ["allocation.gen_batch_multiplier=1"],
    "pods": ["allocation.pods.n=8", "allocation.pods.m=4"],
}
"""Overrides that give a strategy the study's budget (8 x prompts_per_step rollouts per step where
its design allows; dapo and greso draw more only while their train batch is short, and every
generated rollout counts: BENCHMARKS.md's method); a strategy
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
    # auto held wide: no plan can clear a margin of 100x, so every step spreads the budget
    # evenly over the census prompts (auto's depth rule switched off, its census kept)
    "auto-wide": ["allocation.strategy=auto", "allocation.auto.margin=100"],
    # auto as it was before its depth weight counted how recently prompts recur: every prompt
    # seen before counts in full (on the default run: deep from the second epoch on)
    "auto-revisit": ["allocation.strategy=auto", "allocation.auto.recency=1"],
    # auto-revisit deciding by the plain margin, without the hysteresis in units of the ratio's noise
    "auto-plain": ["allocation.strategy=auto", "allocation.auto.hold=0", "allocation.auto.recency=1"],
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

DEFAULT150_ARMS = ["grpo", "grpo-wide", "auto", "auto-wide", "auto-revisit", "auto-plain"]
"""The default run's cell: auto, auto held wide, grpo at 8 and 4 rollouts per prompt, auto
counting every prompt seen before in full (the rule before recency) and that rule by the
plain margin (its decision before the hysteresis)."""

DEFAULT150_STUDY: list[tuple] = [
    ("tiny-math", "default", DEFAULT150_ARMS,
     {"name": "default-150", "prompts_per_step": 64, "total_rollouts": 64 * 8 * 150, "eval_every_rollouts": 64 * 8 * 15}),
]
"""`--study default150`: configs/tiny-math.yaml at its full length (150 steps of 64 prompts,
512 rollouts each: 2,164 training prompts, so the census revisits prompts from step 18 on),
evaluated every 15 steps; 12 seeds by default (DEFAULT150_SEEDS)."""

DEFAULT150_SEEDS = 12

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


def bad_flag(message: str) -> NoReturn:
    """Bad command-line input: one line naming the flag on stderr, exit code 2 (as argparse)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def make_plan(args: argparse.Namespace) -> Plan:
    """The study's cells, filtered and resized by the command-line options."""
    study = QUICK_STUDY if args.quick else {"issue7": ISSUE7_STUDY, "issue11": ISSUE11_STUDY,
                                            "default150": DEFAULT150_STUDY}.get(args.study, STUDY)
    tasks = args.tasks.split(",") if args.tasks else None
    regimes = args.regimes.split(",") if args.regimes else None
    for r in regimes or []:
        if r not in REGIMES:
            bad_flag(f"--regimes: unknown regime {r!r}; choose from {list(REGIMES)}")
    arms = args.arms.split(",") if args.arms else None
    for a in arms or []:
        if a not in ARM_SETS:
            bad_flag(f"--arms: unknown arm {a!r}; choose from {sorted(ARM_SETS)}")
    rows = [(row[0], row[1], list(row[2]), dict(row[3]) if len(row) > 3 else {}) for row in study]
    for t in tasks or []:
        if t not in TASK_SIZES:
            bad_flag(f"--tasks: unknown task {t!r}; choose from {list(TASK_SIZES)}")
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
            for key in ("prompts_per_step", "total_rollouts"):  # a cell sized on its own
                size[key] = extra.get(key, size[key])
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
        bad_flag("no cell of the study matches --tasks/--regimes")
    default_seeds = 2 if args.quick else DEFAULT150_SEEDS if args.study == "default150" else 8
    return Plan(cells=cells, seeds=args.seeds or default_seeds, jobs=args.jobs,
                target_gain=args.target_gain, extra_sets=args.sets, first_seed=args.first_seed)
