"""`vigor report` on hand-written run directories: the first-crossing rule, seed groups,
speed-ups, plots and bad input. (tests/test_report_run.py covers a real training run.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vigor_cli.errors import UserError
from vigor_cli.report.curves import first_crossing, group_runs, run_curve, target_table
from vigor_cli.user.jsonl import read_jsonl
from vigor_cli.run.directory import load_run


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(path: Path, strategy: str, seed: int, accs: list[float], per_step: int = 64,
              tokens_per_rollout: int = 100, tail: str = "") -> Path:
    """A run directory as the contract describes it: eval every 2 steps, step 0 first."""
    path.mkdir(parents=True)
    cfg = {"allocation": {"strategy": strategy}, "train": {"seed": seed, "run_name": path.name}}
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    lines = []
    for i, acc in enumerate(accs):
        step = 2 * i
        cum = {"rollouts/cumulative": step * per_step,
               "tokens/cumulative": step * per_step * tokens_per_rollout}
        if step:
            lines.append({"step": step, "reward/mean": acc} | cum)
        lines.append({"step": step, "eval/accuracy": acc} | cum)
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + tail)
    return path


def test_first_crossing_rule():
    xs = [0, 100, 200, 300]
    assert first_crossing(xs, [0.1, 0.3, 0.5, 0.7], 0.4) == pytest.approx(150)
    assert first_crossing(xs, [0.1, 0.3, 0.5, 0.7], 0.5) == pytest.approx(200)  # exact hit
    assert first_crossing(xs, [0.5, 0.3, 0.5, 0.7], 0.4) == 0  # starts above the target
    # a dip after the first crossing does not move it
    assert first_crossing(xs, [0.1, 0.5, 0.2, 0.7], 0.4) == pytest.approx(75)
    assert first_crossing(xs, [0.1, 0.2, 0.3, 0.35], 0.4) is None


def test_seed_groups_mean_curve_and_speedups(tmp_path):
    runs = [
        write_run(tmp_path / "g0", "grpo", 0, [0.1, 0.2, 0.3, 0.35, 0.4]),
        write_run(tmp_path / "g1", "grpo", 1, [0.1, 0.15, 0.25, 0.4, 0.45]),
        write_run(tmp_path / "v0", "vigor", 0, [0.1, 0.3, 0.4, 0.45, 0.5]),
        write_run(tmp_path / "v1", "vigor", 1, [0.1, 0.25, 0.35, 0.5, 0.5]),
    ]
    loaded = [load_run(p) for p in runs]
    curves = [run_curve(r) for r in loaded]
    groups = group_runs(loaded, curves)
    assert [g.label for g in groups] == ["grpo (2 seeds)", "vigor (2 seeds)"]
    assert groups[0].mean.by_rollouts.y == pytest.approx([0.1, 0.175, 0.275, 0.375, 0.425])
    assert groups[0].mean.by_rollouts.low == pytest.approx([0.1, 0.15, 0.25, 0.35, 0.4])
    table = target_table(loaded, curves, groups, 0.4, baseline_index=0)
    runs_by_name = {r["name"]: r for r in table["runs"]}
    # v1: 0.35 at 256 rollouts, 0.5 at 384 -> 256 + (0.05 / 0.15) * 128
    assert runs_by_name["v1"]["rollouts_to_target"] == pytest.approx(256 + 128 / 3)
    assert runs_by_name["g0"]["rollouts_to_target"] == pytest.approx(512)
    assert runs_by_name["v0"]["rollouts_speedup"] == pytest.approx(2.0)
    grpo, vigor = table["groups"]
    assert grpo["rollouts_to_target"] == pytest.approx(448)  # mean curve 0.375 -> 0.425
    assert vigor["rollouts_to_target"] == pytest.approx(288)  # mean curve 0.375 -> 0.475
    assert vigor["rollouts_speedup"] == pytest.approx(448 / 288)


@pytest.mark.slow
def test_report_cli_writes_plots_and_json(tmp_path, vigor):
    a = write_run(tmp_path / "a", "grpo", 0, [0.2, 0.3, 0.6])
    b = write_run(tmp_path / "b", "vigor", 0, [0.2, 0.5, 0.5], tokens_per_rollout=150,
                  tail='{"step": 6, "eval/acc')  # a run still writing its last line
    rep_dir = tmp_path / "rep"
    code, out, err = vigor("report", str(a), str(b), "--out", str(rep_dir), "--baseline", "a")
    assert code == 0, err
    assert "partial last line" in err
    assert "rollouts to target" in out
    for name in ("accuracy_vs_rollouts.png", "accuracy_vs_tokens.png"):
        data = (rep_dir / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000
    rep = json.loads((rep_dir / "report.json").read_text())
    # default target: the lowest final accuracy (b ends at 0.5)
    assert rep["target"] == pytest.approx(0.5)
    b_row = next(r for r in rep["runs"] if r["name"] == "b")
    a_row = next(r for r in rep["runs"] if r["name"] == "a")
    assert b_row["rollouts_to_target"] == pytest.approx(128)
    assert a_row["rollouts_to_target"] == pytest.approx(128 + 128 * 2 / 3)
    assert b_row["rollouts_speedup"] == pytest.approx(a_row["rollouts_to_target"] / 128)
    # --json prints the same table on stdout
    code, out, err = vigor("report", str(a), str(b), "--out", str(rep_dir), "--json", "--target", "0.55")
    assert code == 0, err
    assert json.loads(out)["runs"][1]["rollouts_to_target"] is None  # b never reaches it


def test_bad_input_is_one_clear_line(tmp_path, vigor):
    a = write_run(tmp_path / "a", "grpo", 0, [0.2, 0.3])
    code, out, err = vigor("report", str(a), "--baseline", "nope", "--out", str(tmp_path / "r"))
    assert code == 2 and "--baseline nope" in err
    code, out, err = vigor("report", str(tmp_path / "missing"), "--out", str(tmp_path / "r"))
    assert code == 2 and "run directory not found" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.jsonl").write_text('{"step": 0}\nnot json\n{"step": 1}\n')
    with pytest.raises(UserError, match=r"metrics.jsonl:2: not valid JSON"):
        read_jsonl(bad / "metrics.jsonl")
    code, out, err = vigor("report", str(bad), "--out", str(tmp_path / "r"))
    assert code == 2 and "metrics.jsonl:2:" in err
    (bad / "metrics.jsonl").write_text('{"step": 0, "reward/mean": 0.1}\n')
    code, out, err = vigor("report", str(bad), "--out", str(tmp_path / "r"))
    assert code == 2 and "no evaluation line" in err


def test_exit_code_from_the_command_line(tmp_path):
    """The command line turns a bad run directory into an error message and exit code 2."""
    from cli_runner import run_vigor

    res = run_vigor("report", str(tmp_path / "nope"))
    assert res.returncode == 2
    assert "run directory not found" in res.stderr


@pytest.mark.slow
def test_two_runs_of_one_seed_are_not_averaged_as_seeds(tmp_path, vigor):
    """The issue's case: two grpo runs, both seed 0 (one longer), read as 'grpo (2 seeds)' and
    cut to the shorter run. Repeats of a seed stand alone, with a note naming them."""
    a = write_run(tmp_path / "a", "grpo", 0, [0.1, 0.2, 0.3])
    b = write_run(tmp_path / "b", "grpo", 0, [0.1, 0.25, 0.35, 0.5, 0.6])
    loaded = [load_run(a), load_run(b)]
    notes: list[str] = []
    groups = group_runs(loaded, [run_curve(r) for r in loaded], notes)
    assert [g.label for g in groups] == ["a", "b"] and all(len(g.runs) == 1 for g in groups)
    assert notes == ["a (seed 0), b (seed 0): one config, and seeds that do not all differ; repeats of a "
                     "seed are not seeds, so each run is shown alone"]
    code, out, err = vigor("report", str(a), str(b), "--out", str(tmp_path / "rep"), "--target", "0.3")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "2 seeds" not in flat and "seed groups" not in flat
    assert "note: a (seed 0), b (seed 0): one config" in flat
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["groups"] == [] and rep["grouped"] == [] and len(rep["notes"]) == 1
    # b drawn to its own end (its 5 evaluations), a to its 3
    from vigor_cli.report.plots import plot_lines

    lines = plot_lines([g.mean for g in groups], "rollouts")
    assert [(ln["label"], ln["x"][-1]) for ln in lines] == [("a", 256.0), ("b", 512.0)]


@pytest.mark.slow
def test_seed_groups_say_which_runs_and_draw_each_to_its_end(tmp_path, vigor):
    g0 = write_run(tmp_path / "g0", "grpo", 0, [0.1, 0.2, 0.3])
    g1 = write_run(tmp_path / "g1", "grpo", 1, [0.1, 0.15, 0.25, 0.4, 0.45])
    v0 = write_run(tmp_path / "v0", "vigor", 0, [0.1, 0.3, 0.4])
    loaded = [load_run(p) for p in (g0, g1, v0)]
    groups = group_runs(loaded, [run_curve(r) for r in loaded])
    assert [g.label for g in groups] == ["grpo (2 seeds)", "vigor"]
    assert groups[0].describe() == "grpo (2 seeds): g0 (seed 0), g1 (seed 1)"
    from vigor_cli.report.plots import plot_lines

    lines = plot_lines([g.mean for g in groups], "rollouts")
    ends = [(ln["label"], ln["member"], ln["x"][-1]) for ln in lines]
    # the mean and band over the rollouts both seeds reached (256), each seed to its own end
    assert ends == [("grpo (2 seeds)", False, 256.0), ("g0", True, 256.0), ("g1", True, 512.0),
                    ("vigor", False, 256.0)]
    code, out, err = vigor("report", str(g0), str(g1), str(v0), "--out", str(tmp_path / "rep"))
    assert code == 0, err
    assert "seed group grpo (2 seeds): g0 (seed 0), g1 (seed 1)" in " ".join(out.split())
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["groups"][0]["runs"] == ["g0", "g1"] and rep["groups"][0]["seeds"] == [0, 1]


@pytest.mark.slow
def test_a_target_met_at_the_start_is_said_to_say_nothing(tmp_path, vigor):
    """Two runs that learned nothing: the default target (the lowest final accuracy) is their
    starting accuracy, and the table said 'rollouts to target 0' for both, as if reached at
    once. A note says so and how to ask for a target that means something."""
    a = write_run(tmp_path / "a", "grpo", 0, [0.0, 0.0, 0.0])
    b = write_run(tmp_path / "b", "grpo", 1, [0.0, 0.0, 0.1])
    code, out, err = vigor("report", str(a), str(b), "--out", str(tmp_path / "rep"))
    assert code == 0, err
    notes = json.loads((tmp_path / "rep" / "report.json").read_text())["notes"]
    assert ("a, b: the first evaluation already meets the target 0.000, so 'rollouts to target' is 0 and says "
            "nothing; give --target above the start") in notes
    code, out, err = vigor("report", str(a), str(b), "--out", str(tmp_path / "rep2"), "--target", "0.05")
    assert code == 0, err
    assert not any("already meets" in n for n in json.loads((tmp_path / "rep2" / "report.json").read_text())["notes"])


def test_plot_files_are_named_after_their_metric():
    from vigor_cli.report.run_report import plot_stem

    assert plot_stem("eval/accuracy") == "accuracy"
    assert plot_stem("eval/pass_rate") == "pass_rate"
    assert plot_stem("eval/math500/accuracy") == "math500_accuracy"
    assert plot_stem("eval/tiny-math/reward/my fn/mean") == "tiny-math_reward_my-fn_mean"
