"""The rollout-efficiency benchmark (bench/efficiency.py): its aggregation on hand-made run
directories (fast), and the whole pipeline in --quick mode on the bundled tiny model (slow)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_efficiency", ROOT / "bench" / "efficiency.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_efficiency"] = module
    spec.loader.exec_module(module)
    return module


eff = _load_bench()


def make_run(parent: Path, name: str, seed: int, evals: list[tuple[int, float]], per_step: int = 100,
             step_seconds: float = 2.0, strategy: str = "grpo") -> Path:
    """A run directory as the trainer writes it: a step line per step, eval lines at given steps."""
    d = parent / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"allocation": {"strategy": strategy}, "train": {"seed": seed}}))
    lines = []
    last = max(s for s, _ in evals)
    acc = dict(evals)
    for step in range(0, last + 1):
        if step:
            lines.append({"step": step, "rollouts/step": per_step, "rollouts/cumulative": per_step * step,
                          "tokens/step": 5 * per_step, "tokens/cumulative": 5 * per_step * step,
                          "time/step": step_seconds, "time/generate": step_seconds / 2,
                          "groups/zero_var_frac": 0.25, "reward/mean": 0.5})
        if step in acc:
            lines.append({"step": step, "eval/accuracy": acc[step], "rollouts/cumulative": per_step * step,
                          "tokens/cumulative": 5 * per_step * step, "time/elapsed": 99.0})
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (d / "summary.json").write_text("{}")
    return d


def test_median_counts_a_miss_as_infinite():
    assert eff.median_with_misses([3.0, 1.0, 2.0]) == 2.0
    assert eff.median_with_misses([1.0, None, 4.0, 2.0]) == 3.0
    assert eff.median_with_misses([1.0, None, None]) is None
    assert eff.median_with_misses([]) is None
    assert eff.spread([None, 5.0, 2.0]) == (2.0, 5.0)
    assert eff.spread([None]) == (None, None)


def test_target_is_a_share_of_the_baselines_gain():
    assert eff.target_for(0.5, [0.6, 0.7, 0.9], 0.8) == pytest.approx(0.66)
    # a baseline that did not learn still gives a target above the start
    assert eff.target_for(0.5, [0.45, 0.5], 0.8) == pytest.approx(0.505)


def test_train_seconds_exclude_evaluation_time():
    metrics = [{"step": 0, "eval/accuracy": 0.1, "time/elapsed": 50.0},
               {"step": 1, "time/step": 2.0}, {"step": 2, "time/step": 3.0},
               {"step": 2, "eval/accuracy": 0.2, "time/elapsed": 80.0}]
    assert eff.train_seconds_at_evals(metrics) == {0: 0.0, 1: 2.0, 2: 5.0}


def test_cell_measures_crossings_on_three_axes_and_ratios(tmp_path):
    # grpo crosses 0.6 half-way between its step-2 (0.5) and step-4 (0.7) evaluations:
    # 300 rollouts, 1500 tokens, 6 s; vigor crosses at step 1 exactly: 100 rollouts.
    for seed in range(3):
        make_run(tmp_path, f"grpo-s{seed}", seed, [(0, 0.4), (2, 0.5), (4, 0.7)])
        make_run(tmp_path, f"vigor-s{seed}", seed, [(0, 0.4), (1, 0.6), (4, 0.62)], step_seconds=2.2, strategy="vigor")
    # one vigor seed never reaches the target
    make_run(tmp_path, "vigor-s3", 3, [(0, 0.4), (4, 0.45)], strategy="vigor")
    cell = eff.aggregate_cell(sorted(tmp_path.iterdir()), ["grpo", "vigor"], 0.8, 0.6, tmp_path / "plots")
    g, v = cell["arms"]["grpo"], cell["arms"]["vigor"]
    assert g["rollouts_to_target_median"] == pytest.approx(300)
    assert g["tokens_to_target_median"] == pytest.approx(1500)
    assert g["seconds_to_target_median"] == pytest.approx(6.0)
    assert (v["reached"], v["seeds"]) == (3, 4)
    assert v["rollouts_to_target_median"] == pytest.approx(100)  # median of 100,100,100,inf
    assert v["rollouts_to_target_max"] == pytest.approx(100)
    assert v["rollouts_speedup"] == pytest.approx(3.0)
    assert v["seconds_per_rollout_ratio"] == pytest.approx(1.1, rel=0.02)  # 3 of 4 seeds at 2.2 s/step
    assert v["final_accuracy_delta"] == pytest.approx(0.62 - 0.7)
    assert (tmp_path / "plots" / "accuracy_vs_rollouts.png").is_file()
    table = eff.markdown_table(cell)
    assert "| vigor | 3/4 | 100 [100-100] | 3.00x |" in table
    # mean accuracy after the start: vigor seeds 0-2 (0.6 + 0.62) / 2 = 0.61, seed 3 0.45 -> median 0.61;
    # grpo (0.5 + 0.7) / 2 = 0.6 -> +1.0 point
    assert "| 0.610 | +1.0 pts |" in table
    assert "| vigor | 0.25 |" in eff.mechanism_table(cell)


def test_default_target_comes_from_the_baseline(tmp_path):
    for seed in range(2):
        make_run(tmp_path, f"grpo-s{seed}", seed, [(0, 0.5), (2, 0.6 + 0.1 * seed)])
        make_run(tmp_path, f"vigor-s{seed}", seed, [(0, 0.5), (2, 0.9)], strategy="vigor")
    cell = eff.aggregate_cell(sorted(tmp_path.iterdir()), ["grpo", "vigor"], 0.5, None, tmp_path / "p")
    assert cell["target"] == pytest.approx(0.5 + 0.5 * 0.15)
    assert math.isclose(cell["start_accuracy"], 0.5)


def test_every_arm_is_a_valid_config():
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config

    for arm, sets in eff.ARM_SETS.items():
        cfg = build_config(default_config_file(None, "tiny-math"), sets=sets)
        assert cfg.allocation.strategy == sets[0].split("=")[1], arm
    for arm in eff.ISSUE11_ARMS:
        cfg = build_config(default_config_file(None, "tiny-math"), sets=eff.arm_sets(arm, 32))
        assert cfg.allocation.strategy in ("grpo", "vigor", "knapsack", "reinforce-ada", "auto")
    wide = build_config(default_config_file(None, "tiny-math"), sets=["train.prompts_per_step=16", *eff.arm_sets("grpo-wide", 16)])
    assert (wide.train.prompts_per_step, wide.allocation.group_size) == (32, 4)  # the cell's rollouts on twice its prompts
    pm = build_config(default_config_file(None, "tiny-math"), sets=eff.arm_sets("vigor-prompt-mean", 32))
    assert pm.grpo.loss_agg == "prompt_mean"
    assert build_config(default_config_file(None, "tiny-math"), sets=eff.arm_sets("vigor-scale-none", 32)).grpo.scale_rewards == "none"


def _plan(**kw):
    import argparse

    args = dict(quick=False, study="issue11", tasks=None, regimes=None, arms=None, seeds=None, prompts_per_step=None,
                total_rollouts=None, eval_every_rollouts=None, jobs=2, target_gain=0.8, sets=[])
    args.update(kw)
    return eff.make_plan(argparse.Namespace(**args))


def test_the_study_covers_six_regimes_with_eight_arms_seed_by_seed(tmp_path):
    plan = _plan()
    assert [c.key for c in plan.cells] == ["tiny-facts", "tiny-ladder", "tiny-math-default", "tiny-math-peaked",
                                           "tiny-math-flat", "tiny-code-default"]
    assert all(c.arms == eff.ISSUE11_ARMS for c in plan.cells) and plan.seeds == 5
    models = {r: "tiny" for r in eff.REGIMES}
    specs = eff.make_specs(plan, tmp_path, models)
    assert len(specs) == 6 * 8 * 5
    # seed-major: every run of seed 0 before any of seed 1, so a study cut short is balanced
    seeds = [s.seed for s in specs]
    assert seeds == sorted(seeds)
    assert specs[0].run_dir.endswith("tiny-facts/grpo-s0")
    # a task's own regime does not leak onto other tasks
    assert [c.key for c in _plan(regimes="facts").cells] == ["tiny-facts"]
    assert [c.key for c in _plan(tasks="tiny-ladder", arms="grpo,auto").cells] == ["tiny-ladder"]
    assert len(_plan(study="issue7").cells) == 5


def _cell_with(tmp_path, arms: dict[str, list[float]]):
    """Runs whose accuracy reaches 0.7 at the given steps (one list entry per seed)."""
    for arm, steps in arms.items():
        for seed, at in enumerate(steps):
            make_run(tmp_path, f"{arm}-s{seed}", seed, [(0, 0.4), (at, 0.7), (12, 0.72)], strategy=arm.split("-")[0])
    return eff.aggregate_cell(sorted(tmp_path.iterdir()), list(arms), 0.8, 0.6, tmp_path / "plots")


def test_summary_and_checks_name_the_best_arm_and_autos_standing(tmp_path):
    cell = _cell_with(tmp_path, {"grpo": [6, 6, 6], "grpo-wide": [3, 3, 3], "vigor": [9, 9, 9], "auto": [4, 4, 4]})
    ch = eff.cell_checks(cell)
    assert ch["best_arm"] == "grpo-wide" and ch["best_speedup"] == pytest.approx(2.0)
    assert ch["auto_speedup"] == pytest.approx(1.5) and ch["auto_at_least_grpo"]
    assert not ch["auto_within_10pct_of_best"]  # 1.5 < 0.9 x 2.0
    assert ch["best_vigor"] == "vigor" and ch["best_vigor_speedup"] == pytest.approx(2 / 3)
    table = eff.summary_table({"cells": {"tiny-x": cell}})
    assert "| tiny-x | 1.00x (3/3) | 2.00x (3/3) | 0.67x (3/3) | 1.50x (3/3) | grpo-wide 2.00x | yes | **no** |" in table
    path = eff.plot_cell("tiny-x", cell, tmp_path / "panels.png")
    assert path.is_file()
    assert all(len(arms) <= 6 for _, arms in eff.PANELS)
    assert "best grpo-wide 2.00x" in eff._finding("tiny-x", cell) and "auto 1.50x" in eff._finding("tiny-x", cell)


def test_law_table_prints_the_census(tmp_path):
    from vigor_cli.variance_law import census

    law = census([0] * 50 + [16] * 40 + [8] * 10, 16).to_dict()
    results = {"cells": {"tiny-facts": {"start_distribution": {"variance_law": law}}}}
    row = eff.law_table(results).splitlines()[-1]
    assert row.startswith("| tiny-facts | 100 x 16 | 50 / 0 / 0 / 10 / 0 / 40 |")
    assert f"{law['eta']:.2f}" in row


@pytest.mark.slow
def test_quick_mode_runs_every_strategy_end_to_end(tmp_path):
    from vigor_cli.models import TINY_DIR

    if not (TINY_DIR / "config.json").is_file():
        pytest.skip(f"the bundled tiny model is missing at {TINY_DIR}")
    out = tmp_path / "eff"
    rc = eff.main(["--quick", "--out", str(out)])
    assert rc == 0
    results = json.loads((tmp_path / "eff.json").read_text())
    cell = results["cells"]["tiny-math-default"]
    assert list(cell["arms"]) == eff.ISSUE11_ARMS
    for arm, runs in cell["runs"].items():
        assert len(runs) == 2, arm
        for r in runs:
            assert r["rollouts"] >= 192 and r["curve"]["rollouts"][0] == 0
            assert len(r["curve"]["accuracy"]) >= 3  # start + every 64 rollouts
    assert (out / "tiny-math-default" / "accuracy_vs_rollouts_panels.png").is_file()
    assert "starting variance laws" in (tmp_path / "eff.md").read_text()
    assert "| vigor |" in (tmp_path / "eff.md").read_text()
