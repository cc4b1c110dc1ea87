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


@pytest.mark.slow
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


@pytest.mark.slow
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
                total_rollouts=None, eval_every_rollouts=None, jobs=2, target_gain=0.8, sets=[], skip_arms=None,
                cells=None, first_seed=0)
    args.update(kw)
    return eff.make_plan(argparse.Namespace(**args))


@pytest.mark.parametrize("argv, flag", [
    (["--regimes", "nosuch"], "--regimes"), (["--arms", "grpo,nosuch"], "--arms"), (["--tasks", "nosuch"], "--tasks"),
    (["--make-plateau", "default"], "--make-plateau"), (["--restat", "{missing}"], "--restat"),
    (["--keep-from", "{broken}", "--aggregate-only"], "--keep-from"), (["--settle-from", "{missing}"], "--settle-from"),
])
def test_bad_flags_exit_2_with_one_line_before_any_work(tmp_path, capsys, argv, flag):
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    argv = [a.format(missing=tmp_path / "missing.json", broken=broken) for a in argv]
    with pytest.raises(SystemExit) as e:
        eff.main([*argv, "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(flag), err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written


def test_the_study_covers_six_regimes_with_eight_arms_seed_by_seed(tmp_path):
    plan = _plan()
    assert [c.key for c in plan.cells] == ["tiny-facts", "tiny-ladder", "tiny-math-default", "tiny-math-peaked",
                                           "tiny-math-flat", "tiny-code-default"]
    assert all(c.arms == eff.ISSUE11_ARMS for c in plan.cells) and plan.seeds == 8
    models = {r: "tiny" for r in eff.REGIMES}
    specs = eff.make_specs(plan, tmp_path, models)
    assert len(specs) == 6 * 8 * 8
    # seed-major: every run of seed 0 before any of seed 1, so a study cut short is balanced
    seeds = [s.seed for s in specs]
    assert seeds == sorted(seeds)
    assert specs[0].run_dir.endswith("tiny-facts/grpo-s0")
    # a task's own regime does not leak onto other tasks
    assert [c.key for c in _plan(regimes="facts").cells] == ["tiny-facts"]
    assert [c.key for c in _plan(tasks="tiny-ladder", arms="grpo,auto").cells] == ["tiny-ladder"]
    assert len(_plan(study="issue7").cells) == 5


def test_the_issue25_study_adds_plateaus_the_compute_axis_and_pilot_commit(tmp_path):
    plan = _plan(study="issue25")
    keys = [c.key for c in plan.cells]
    assert keys == ["tiny-facts", "tiny-ladder", "tiny-math-default", "tiny-math-peaked", "tiny-math-flat",
                    "tiny-code-default", "tiny-math-plateau", "tiny-facts-plateau", "tiny-ladder-plateau", "tiny-math-compute"]
    by = {c.key: c for c in plan.cells}
    assert by["tiny-math-default"].arms == eff.ISSUE25_ARMS and "pilot-commit" in eff.ISSUE25_ARMS
    assert (by["tiny-math-plateau"].total_rollouts, by["tiny-math-plateau"].eval_every_rollouts) == (3 * 2560, 768) and by["tiny-math-plateau"].regime == "plateau-math"
    compute = by["tiny-math-compute"]
    assert compute.arms == ["grpo-n2", "grpo-n4", "grpo", "grpo-n16"]
    assert (compute.total_rollouts, compute.eval_every_rollouts) == (100 * 256, 1280)
    specs = eff.make_specs(plan, tmp_path, {r: "tiny" for r in eff.REGIMES})
    assert len(specs) == 8 * (6 * 9 + 3 * 8 + 4)
    assert any(s.run_dir.endswith("tiny-math-compute/grpo-n2-s0") for s in specs)


def test_depth_arms_keep_the_rollouts_per_step():
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config

    for arm, n in [("grpo-n2", 2), ("grpo-n4", 4), ("grpo", 8), ("grpo-n16", 16)]:
        cfg = build_config(default_config_file(None, "tiny-math"), sets=["train.prompts_per_step=32", *eff.arm_sets(arm, 32)])
        assert cfg.allocation.group_size == n == eff.rollouts_per_prompt(arm)
        assert cfg.train.prompts_per_step * n == 256


def test_a_plateau_is_three_evaluations_without_a_gain():
    assert not eff.plateau_reached([0.5, 0.6, 0.62], 3)  # too few
    assert not eff.plateau_reached([0.5, 0.6, 0.58, 0.59, 0.61], 3)  # 0.61 is a gain
    assert eff.plateau_reached([0.5, 0.6, 0.58, 0.6, 0.55], 3)  # a tie is no gain
    assert not eff.plateau_reached([0.5, 0.55, 0.6, 0.65, 0.7], 3)


def _measures(rtt: list[float | None], mean_acc: list[float]) -> list[dict]:
    """Per seed: rollouts to target (None: never) and a curve whose mean after the start is mean_acc."""
    return [{"seed": s, "rollouts_to_target": r, "curve": {"accuracy": [0.5, m, m]}} for s, (r, m) in enumerate(zip(rtt, mean_acc))]


def test_speedup_counts_misses_and_verdicts_read_the_interval():
    assert eff.speedup_of([100, 200, 300], [50, 100, 150]) == pytest.approx(2.0)
    assert eff.speedup_of([100, math.inf, math.inf], [100, 100, math.inf]) == math.inf  # only the reference misses
    assert eff.speedup_of([100, 100, 100], [math.inf, math.inf, 1]) == 0.0
    assert eff.speedup_of([math.inf] * 3, [math.inf] * 3) == 1.0
    assert eff.speedup_of([100, 100, 0], [0, 0, 50]) == math.inf and eff.speedup_of([0], [0]) == 1.0  # at the start
    assert eff.verdict(0.1, 0.3, 0.0) == "win" and eff.verdict(-0.3, -0.1, 0.0) == "loss"
    assert eff.verdict(-0.1, 0.3, 0.0) == "tie" and eff.verdict(1.2, 3.0, 1.0) == "win" and eff.verdict(None, 1, 0) is None


def test_paired_intervals_tell_a_win_from_a_tie():
    ref = _measures([400] * 8, [0.60, 0.62, 0.58, 0.61, 0.59, 0.60, 0.63, 0.57])
    # +2 points on every seed, half the rollouts: a win on both
    better = _measures([200] * 8, [m["curve"]["accuracy"][1] + 0.02 for m in ref])
    vs = eff.paired_intervals(better, ref)
    assert vs["seeds"] == 8 and vs["mean_accuracy_delta"] == pytest.approx(0.02)
    assert vs["mean_accuracy_delta_ci"] == pytest.approx([0.02, 0.02]) and vs["accuracy_verdict"] == "win"
    assert vs["speedup"] == pytest.approx(2.0) and vs["speedup_verdict"] == "win"
    # alternating +3 / -3 points: a tie; pairing is by seed, so a shuffled list changes nothing
    noisy = _measures([400] * 8, [m["curve"]["accuracy"][1] + (0.03 if i % 2 else -0.03) for i, m in enumerate(ref)])
    vs = eff.paired_intervals(list(reversed(noisy)), ref)
    lo, hi = vs["mean_accuracy_delta_ci"]
    assert lo < 0 < hi and vs["accuracy_verdict"] == "tie" and vs["speedup_verdict"] == "tie"
    assert eff.paired_intervals(better, _measures([1], [0.5])[:0]) == {"seeds": 0}


@pytest.mark.slow
def test_a_cell_where_grpo_did_not_learn_reports_no_speedups(tmp_path):
    # tiny-code's case: grpo 0.550 -> 0.556 on 160 graded answers (SE 3.9 points): no learning
    for seed in range(3):
        make_run(tmp_path, f"grpo-s{seed}", seed, [(0, 0.55), (5, 0.556), (10, 0.556)])
        make_run(tmp_path, f"auto-s{seed}", seed, [(0, 0.55), (5, 0.6), (10, 0.6)], strategy="auto")
        for arm in ("grpo", "auto"):
            ev = tmp_path / f"{arm}-s{seed}" / "eval"
            ev.mkdir()
            (ev / "step-0.json").write_text(json.dumps({"sets": {"tiny-code": {"examples": 40, "n": 4}}}))
    cell = eff.aggregate_cell(sorted(tmp_path.iterdir()), ["grpo", "auto"], 0.8, None, tmp_path / "p")
    assert cell["eval_se"] == pytest.approx(math.sqrt(0.55 * 0.45 / 160))
    assert cell["grpo_gain"] == pytest.approx(0.006) and cell["learned"] is False
    table = eff.interval_tables({"cells": {"tiny-code-default": cell}})
    assert "no learning" in table and "x [" not in table.split("rollouts to target")[1]
    assert cell["arms"]["auto"]["vs_grpo"]["accuracy_verdict"] == "win"  # accuracy still compares


@pytest.mark.slow
def test_compute_axis_finds_the_best_rollouts_per_prompt_per_length(tmp_path):
    """4 per prompt is best early and 16 late: the curves cross between 1,000 and 5,000 rollouts."""
    for seed in range(4):
        jitter = 0.002 * seed
        make_run(tmp_path, f"grpo-n4-s{seed}", seed, [(0, 0.5), (10, 0.62 + jitter), (30, 0.64 + jitter), (100, 0.65 + jitter)])
        make_run(tmp_path, f"grpo-s{seed}", seed, [(0, 0.5), (10, 0.6 + jitter), (30, 0.65 + jitter), (100, 0.68 + jitter)])
        make_run(tmp_path, f"grpo-n16-s{seed}", seed, [(0, 0.5), (10, 0.55 + jitter), (30, 0.63 + jitter), (100, 0.72 + jitter)])
    cell = eff.aggregate_cell(sorted(tmp_path.iterdir()), ["grpo-n4", "grpo", "grpo-n16"], 0.8, None, tmp_path / "p")
    ax = cell["compute_axis"]
    assert ax["levels"] == [1000, 3000, 10000]
    assert [ax["best"][str(c)]["rollouts_per_prompt"] for c in ax["levels"]] == [4, 8, 16]
    assert ax["arms"]["grpo-n4"]["levels"]["1000"]["accuracy_mean"] == pytest.approx(0.623)
    assert ax["best"]["10000"]["others"]["grpo-n4"]["verdict"] == "loss"
    assert "**best**" in eff.compute_table(cell)
    assert eff.plot_compute("tiny-math-compute", cell, tmp_path / "compute.png").is_file()


def _cell_with(tmp_path, arms: dict[str, list[float]]):
    """Runs whose accuracy reaches 0.7 at the given steps (one list entry per seed)."""
    for arm, steps in arms.items():
        for seed, at in enumerate(steps):
            make_run(tmp_path, f"{arm}-s{seed}", seed, [(0, 0.4), (at, 0.7), (12, 0.72)], strategy=arm.split("-")[0])
    return eff.aggregate_cell(sorted(tmp_path.iterdir()), list(arms), 0.8, 0.6, tmp_path / "plots")


@pytest.mark.slow
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
    # the plot's title reads mean accuracy against grpo by interval (equal here: every curve
    # has the same evaluations after the start, only their timing differs)
    assert eff._finding("tiny-x", cell) == ("tiny-x: best grpo-wide +0.0 pts (tie), auto +0.0 (tie), vigor +0.0 (tie) "
                                            "(mean accuracy vs grpo)")


def test_law_table_prints_the_census(tmp_path):
    from vigor_cli.study.variance_law import census

    law = census([0] * 50 + [16] * 40 + [8] * 10, 16).to_dict()
    results = {"cells": {"tiny-facts": {"start_distribution": {"variance_law": law}}}}
    row = eff.law_table(results).splitlines()[-1]
    assert row.startswith("| tiny-facts | 100 x 16 | 50 / 0 / 0 / 10 / 0 / 40 |")
    assert f"{law['eta']:.2f}" in row


@pytest.mark.slow
def test_quick_mode_runs_every_strategy_end_to_end(tmp_path):
    from vigor_cli.model.loading import TINY_DIR

    if not (TINY_DIR / "config.json").is_file():
        pytest.skip(f"the bundled tiny model is missing at {TINY_DIR}")
    out = tmp_path / "eff"
    rc = eff.main(["--quick", "--out", str(out)])
    assert rc == 0
    results = json.loads((tmp_path / "eff.json").read_text())
    cell = results["cells"]["tiny-math-default"]
    assert list(cell["arms"]) == eff.ISSUE25_ARMS
    for arm, runs in cell["runs"].items():
        assert len(runs) == 2, arm
        for r in runs:
            assert r["rollouts"] >= 192 and r["curve"]["rollouts"][0] == 0
            assert len(r["curve"]["accuracy"]) >= 3  # start + every 64 rollouts
    assert (out / "tiny-math-default" / "accuracy_vs_rollouts_panels.png").is_file()
    assert "starting variance laws" in (tmp_path / "eff.md").read_text()
    assert "| vigor |" in (tmp_path / "eff.md").read_text()


def test_the_committed_study_holds_every_regime_with_intervals_and_no_machine_paths():
    """Issue 25: bench/efficiency_results.json holds at least 8 regimes, each arm with its median
    rollouts to target and its paired 95 % interval against grpo over at least 8 seeds; the
    plateau cells say how their start was made; nothing names this machine's folders."""
    path = Path(__file__).resolve().parents[1] / "bench" / "efficiency_results.json"
    text = path.read_text()
    assert "/work/" not in text and "/tmp/" not in text and "/home/" not in text
    results = json.loads(text)
    regimes = {k: c for k, c in results["cells"].items() if "compute_axis" not in c and "study" not in c}
    assert len(regimes) >= 8
    for key, cell in regimes.items():
        assert "pilot-commit" in cell["arms"] and "auto" in cell["arms"], key
        for arm, a in cell["arms"].items():
            assert "rollouts_to_target_median" in a, (key, arm)
            assert a["seeds"] >= 8, (key, arm)
            if arm != "grpo":
                vs = a["vs_grpo"]
                lo, hi = vs["mean_accuracy_delta_ci"]
                assert lo <= vs["mean_accuracy_delta"] <= hi, (key, arm)
                assert vs["accuracy_verdict"] in {"win", "tie", "loss"}
                assert len(vs["speedup_ci"]) == 2
    plateaus = [c for c in regimes.values() if c.get("plateau")]
    assert len(plateaus) >= 3
    for cell in plateaus:
        assert cell["plateau"]["plateaued"] and cell["plateau"]["command"].startswith("python bench/efficiency.py --make-plateau")
    compute = [c for c in results["cells"].values() if "compute_axis" in c]
    assert compute and len({len(r) for r in compute[0]["runs"].values()}) == 1


def test_the_default_150_cell_is_the_default_config_at_full_length(tmp_path):
    plan = _plan(study="default150")
    [cell] = plan.cells
    assert cell.key == "default-150" and plan.seeds == 12 == eff.DEFAULT150_SEEDS
    assert cell.arms == ["grpo", "grpo-wide", "auto", "auto-wide", "auto-revisit", "auto-plain"]
    assert (cell.prompts_per_step, cell.total_rollouts, cell.eval_every_rollouts) == (64, 150 * 512, 15 * 512)
    specs = eff.make_specs(plan, tmp_path, {r: "tiny" for r in eff.REGIMES})
    assert len(specs) == 12 * 6 and specs[0].run_dir.endswith("default-150/grpo-s0")
    assert _plan(study="default150", seeds=2).seeds == 2
    from vigor_cli.commands.train import default_config_file
    from vigor_cli.settings import build_config

    def config(arm):
        return build_config(default_config_file(None, "tiny-math"), sets=["train.prompts_per_step=64", *eff.arm_sets(arm, 64)])

    wide = config("auto-wide")
    assert wide.allocation.strategy == "auto" and wide.allocation.auto.margin == 100  # no plan clears 100x
    assert config("auto-plain").allocation.auto.hold == 0 and config("auto").allocation.auto.hold == 1
    assert config("auto").allocation.auto.recency == 0.5  # the default: recurrence an epoch later hardly counts
    assert config("auto-revisit").allocation.auto.recency == 1 == config("auto-plain").allocation.auto.recency
    assert config("grpo-wide").train.prompts_per_step * config("grpo-wide").allocation.group_size == 512
    assert config("grpo").train.steps == 150  # the default config's length


def test_rollouts_without_signal_from_the_allocation_record(tmp_path):
    from bench.efficiency_study.measures import no_signal_at, no_signal_rollouts, update_signal

    rec = {"strategy": "auto", "prompts": [
        {"uid": "a", "rollouts": 4, "rounds": [{"rewards": [1, 1]}, {"rewards": [1, 1]}], "in_update": True},
        {"uid": "b", "rollouts": 2, "rounds": [{"rewards": [0, 1]}], "in_update": True},
        {"uid": "c", "rollouts": 2, "rounds": [{"rewards": [0, 0]}], "in_update": False},
        {"uid": "d", "rollouts": 0, "rounds": [], "in_update": False}]}
    assert no_signal_rollouts(rec) == (6, 8)
    run = tmp_path / "run"
    run.mkdir()
    lines = [{**rec, "step": 1, "totals": {"auto": {"decision": "wide"}}},
             {**rec, "step": 2, "totals": {"auto": {"decision": "deep"}}, "prompts": rec["prompts"][:2]}]
    (run / "allocation.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    signal = update_signal(run)
    assert signal["zero_variance_share"] == pytest.approx((6 + 4) / (8 + 6))
    assert signal["wide_zero_variance_share"] == pytest.approx(6 / 8)
    assert signal["deep_zero_variance_share"] == pytest.approx(4 / 6)
    assert signal["no_signal"] == [[8, 6], [14, 10]]
    assert no_signal_at(signal["no_signal"], [0, 8, 10, 14]) == [0, 6, 6, 10]


def test_a_cell_study_is_added_to_the_committed_copy_keeping_the_others(tmp_path, monkeypatch):
    from bench.efficiency_study import results as res

    published = tmp_path / "published.json"
    published.write_text(json.dumps({"command": "the full study", "cells": {"tiny-facts": {"arms": {"grpo": {"seeds": 8}}}}}))
    monkeypatch.setattr(res, "PUBLISHED", published)
    monkeypatch.setattr(res, "print_tables", lambda *a: None)
    monkeypatch.setattr(res, "render_markdown", lambda r: "")
    new = {"command": "python bench/efficiency.py --study default150 --seeds 2", "plan": {"seeds": 2},
           "cells": {"default-150": {"arms": {"grpo": {"seeds": 2}, "auto": {"seeds": 2}}, "runs": {}}}}
    res.write_results(new, tmp_path / "out", None, publish=True, merge=True)
    out = json.loads(published.read_text())
    assert out["command"] == "the full study" and out["cells"]["tiny-facts"] == {"arms": {"grpo": {"seeds": 8}}}
    cell = out["cells"]["default-150"]
    assert cell["study"]["command"].endswith("--seeds 2") and cell["seeds"] == 2
    assert cell["seeds_per_arm"] == {"grpo": 2, "auto": 2}
    # an arm left out of a later run of the study (--skip-arms) keeps its seeds, apart from the cell's count
    new["cells"]["default-150"]["arms"] = {"grpo": {"seeds": 12}, "auto": {"seeds": 12}, "auto-plain": {"seeds": 2}}
    res.write_results(new, tmp_path / "out", None, publish=True, merge=True, side_arms=["auto-plain"])
    cell = json.loads(published.read_text())["cells"]["default-150"]
    assert cell["seeds"] == 12 and cell["seeds_per_arm"]["auto-plain"] == 2


def test_the_committed_default_150_cell_says_its_arms_and_seeds():
    """The default run at full length: every arm with its seed count and rollouts spent
    without signal; auto with its deep share; the command that made it."""
    results = json.loads((ROOT / "bench" / "efficiency_results.json").read_text())
    cell = results["cells"]["default-150"]
    main = ("grpo", "grpo-wide", "auto", "auto-wide")
    assert set(main) <= set(cell["arms"])
    assert cell["seeds"] == min(cell["arms"][a]["seeds"] for a in main) >= 12
    for arm, a in cell["arms"].items():
        assert 0 < a["zero_variance_share_median"] < 1, arm
        assert len(cell["runs"][arm]) == a["seeds"] == cell["seeds_per_arm"][arm]
    # the rule before recency went deep after the first epoch; auto now stays wide, as auto held wide
    assert cell["arms"]["auto-revisit"]["deep_share_median"] > 0.8
    assert cell["arms"]["auto"]["deep_share_median"] == 0 == cell["arms"]["auto-wide"]["deep_share_median"]
    assert cell["study"]["command"].startswith("python bench/efficiency.py --study default150")


def test_a_cells_run_records_list_only_finished_runs(tmp_path):
    """Issue 33: a cell's `records` group its finished runs by what made them; a run stopped
    mid-way (a record, no summary.json: not in the tables) is not named among them."""
    made = {"vigor": {"version": "0.1.0", "commit": "abc", "dirty": False}, "python": {"version": "3.11.7"},
            "libraries": {"torch": "2.13.0+cpu", "vllm": None}, "machine": {"cpu": "x", "cpu_capability": "AVX2"},
            "threads": {"torch_intra_op": 1}}
    dirs = []
    for name, finished in (("grpo-s8", True), ("auto-s8", False), ("grpo-s9", True)):
        d = tmp_path / name
        d.mkdir()
        (d / "provenance.json").write_text(json.dumps(made))
        if finished:
            (d / "summary.json").write_text("{}")
        dirs.append(d)
    (records,) = eff.run_records(dirs)
    assert records["runs"] == ["grpo-s8", "grpo-s9"]
    assert records["libraries"] == {"torch": "2.13.0+cpu"} and records["machine"]["cpu_capability"] == "AVX2"


def _on_the_line(ref: list[dict], deltas: tuple[float, ...] = (0.01, 0.03, -0.01, 0.02, 0.0, 0.03, 0.01, -0.005)) -> list[dict]:
    """An arm whose paired gain over ``ref`` is on the line at 8 seeds (|t| 2.2 by default: a
    tie at 95 %, a win at 80 %)."""
    return _measures([400] * len(deltas), [m["curve"]["accuracy"][1] + d for m, d in zip(ref, deltas)])


def test_settling_skips_the_seeds_the_json_holds_and_runs_auto_and_vigor_first(tmp_path):
    """Issue 48: `--settle-from` runs only the arm-seeds its JSON lacks, auto and vigor (and the
    grpo seeds they pair with) before grpo-wide and the rest; the list it prints counts them."""
    ref = _measures([400] * 12, [0.60, 0.62, 0.58, 0.61, 0.59, 0.60, 0.63, 0.57, 0.6, 0.6, 0.6, 0.6])
    held = {"cells": {
        "tiny-math-peaked": {"runs": {"grpo": ref, "knapsack": _on_the_line(ref), "vigor": _on_the_line(ref)}},
        "tiny-code-default": {"runs": {"grpo": ref[:9], "auto": _on_the_line(ref), "grpo-wide": _on_the_line(ref)}},
        "tiny-math-flat": {"runs": {"grpo": ref[:8], "vigor": _measures([400] * 8, [0.6] * 8)}},  # off the line
    }}
    assert eff.unsettled_arms(held) == {"tiny-math-peaked": ["knapsack", "vigor"], "tiny-code-default": ["auto", "grpo-wide"]}
    source = tmp_path / "held.json"
    source.write_text(json.dumps(held))
    cells = "tiny-math-peaked,tiny-code-default,tiny-math-flat"
    plan = _plan(study="issue25", cells=cells, seeds=12, first_seed=8)
    from rich.console import Console

    console = Console(file=open(tmp_path / "out.txt", "w"), width=1000)
    assert eff.settle(plan, str(source), console) == held
    specs = eff.make_specs(plan, tmp_path / "runs", {"default": "tiny", "peaked": "tiny"})
    specs = eff.settling_runs(specs, plan, held)
    eff.settling_order(specs, plan, cells)
    got = [(Path(s.run_dir).parent.name, s.arm, s.seed) for s in specs]
    assert len(got) == 4 + 4 + 3 + 4 + 4  # peaked vigor, knapsack; code grpo s9-11, auto, grpo-wide
    assert not any(arm == "grpo" and key == "tiny-math-peaked" for key, arm, _ in got)  # all 12 held
    assert [s for k, a, s in got if (k, a) == ("tiny-code-default", "grpo")] == [9, 10, 11]
    assert {a for _, a, _ in got[:11]} == {"vigor", "auto", "grpo"} and got[11][1] == "grpo-wide"
    assert got[:4] == [("tiny-math-peaked", "vigor", s) for s in range(8, 12)]
    assert {a for _, a, _ in got[-4:]} == {"knapsack"}
    eff.list_runs(specs, console)
    console.file.close()
    assert "19 runs to settle" in (tmp_path / "out.txt").read_text()


@pytest.mark.slow
def test_restat_keeps_a_cell_another_study_added(tmp_path, monkeypatch):
    """Issue 48: `--restat` recomputes the study's own cells and copies a cell another study
    merged in (default-150, with its `study`) exactly as the JSON has it."""
    from rich.console import Console

    from bench.efficiency_study import results as res

    def run(seed, acc):
        return {"seed": seed, "final_accuracy": acc[-1], "curve": {"rollouts": [0, 256, 512], "tokens": [0, 900, 1800],
                                                                   "train_seconds": [0, 1.5, 3.0], "accuracy": acc}}
    own = {"arms": {"grpo": {}, "auto": {}}, "model": "tiny", "runs": {
        "grpo": [run(s, [0.5, 0.55, 0.6 + s / 100]) for s in range(3)],
        "auto": [run(s, [0.5, 0.58, 0.62 + s / 100]) for s in range(3)]}}
    other = {"arms": {"grpo": {"seeds": 2, "mean_accuracy_median": 0.61}}, "runs": {"grpo": [run(0, [0.5, 0.6, 0.7])]},
             "seeds": 2, "plot": "bench/results/default150/x.png", "study": {"command": "python bench/efficiency.py --study default150"}}
    source = tmp_path / "results.json"
    source.write_text(json.dumps({"command": "the study", "cells": {"tiny-math-default": own, "default-150": other}}))
    published = tmp_path / "published.json"
    monkeypatch.setattr(res, "PUBLISHED", published)
    monkeypatch.setattr(res, "print_tables", lambda *a: None)
    monkeypatch.setattr(res, "render_markdown", lambda r: "")
    for name in ("plot_cell", "plot_summary"):
        monkeypatch.setattr(res, name, lambda *a: tmp_path / "x.png")
    res.restat(source, tmp_path / "out", None, 0.8, Console(file=open(tmp_path / "log.txt", "w")))
    out = json.loads(published.read_text())
    assert out["cells"]["default-150"] == other
    mine = out["cells"]["tiny-math-default"]
    assert mine["arms"]["auto"]["seeds"] == 3 and mine["arms"]["auto"]["vs_grpo"]["seeds"] == 3 and "study" not in mine


def test_restat_keeps_the_records_of_runs_made_before():
    """A restat's cell names what made every fresh run: the earlier JSON's records for runs
    whose directories are elsewhere, the fresh runs' own, a run made again only once."""
    from bench.efficiency_study.results import merged_records

    made = {"vigor": {"commit": "a"}, "torch_threads": 1}
    earlier = [{**made, "runs": ["auto-s8", "grpo-s8"]}, {"vigor": {"commit": "b"}, "torch_threads": 1, "runs": ["grpo-s9"]}]
    fresh = [{**made, "runs": ["vigor-s8"]}, {"vigor": {"commit": "c"}, "torch_threads": 1, "runs": ["grpo-s9"]}]
    got = merged_records(earlier, fresh)
    assert got == [{**made, "runs": ["auto-s8", "grpo-s8", "vigor-s8"]}, {"vigor": {"commit": "c"}, "torch_threads": 1, "runs": ["grpo-s9"]}]
    assert merged_records(earlier, []) == earlier and merged_records([], fresh) == fresh


def test_the_verdict_table_states_a_comparison_on_the_line_as_a_tie_with_its_width():
    """Issue 48: per regime, auto's and vigor's verdict against grpo at their seeds; one still on
    the line reads as a tie with its interval's width; a cell another study added is not a regime."""
    ref = _measures([400] * 8, [0.60, 0.62, 0.58, 0.61, 0.59, 0.60, 0.63, 0.57])
    auto = eff.paired_intervals(_measures([200] * 8, [m["curve"]["accuracy"][1] + 0.02 for m in ref]), ref)
    vigor = eff.paired_intervals(_on_the_line(ref, (0.01, 0.03, 0.0, 0.02, 0.01, 0.03, 0.01, 0.0)), ref)  # |t| 3.3
    assert vigor["accuracy_label"] == "unsettled" and auto["accuracy_label"] == "win"
    cell = {"arms": {"grpo": {"seeds": 8}, "auto": {"vs_grpo": auto}, "vigor": {"vs_grpo": vigor}}}
    other = {"arms": {"auto": {"vs_grpo": auto}}, "study": {}}
    table = eff.verdict_table({"cells": {"tiny-math-peaked": cell, "default-150": other}})
    lo, hi = vigor["mean_accuracy_delta_ci"]
    assert f"| tiny-math-peaked | 8: +2.0 [+2.0, +2.0] **win** | 8: +1.4 [{lo * 100:+.1f}, {hi * 100:+.1f}] " \
           f"tie, on the line ({(hi - lo) * 100:.1f} points wide) |" in table
    assert "default-150" not in table and "default-150" not in eff.interval_tables({"cells": {"default-150": other}})
