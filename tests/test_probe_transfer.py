"""Transfer between prompts in `vigor probe`'s simulation: the model (no transfer is the old
simulation exactly; transfer moves prompts a step did not sample), its fit to a real run's
held-out gain, the probe's flags, and the validation that reads the study's verdicts."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from vigor_cli.config import AllocationConfig
from vigor_cli.study import simulate as sim_mod
from vigor_cli.study.simulate import SimSettings, breadth, run_strategy, simulate
from vigor_cli.study.transfer import RunShape, fit_transfer, metric_curve, predict_verdicts

ROOT = Path(__file__).resolve().parents[1]


def _old_learn(p, own, index, group_size, s):
    """The learning step before transfer had a model (its code as it was): own signal only at
    transfer 0, the step's total signal spread over the pool otherwise."""
    total = sum(own.values())
    shared = s.transfer * total / group_size / len(p)
    gain = np.full(len(p), shared)
    for uid, sig in own.items():
        gain[index[uid]] += sig / group_size
    p += s.lr * gain * (1 - p)
    np.clip(p, 0.0, 1.0, out=p)


NEW_KEYS = ("final_held_out_pass_rate",)


def _strip(summary: dict) -> dict:
    summary = json.loads(json.dumps(summary))
    for key in ("held_out_start", "disruption"):
        summary.get("learning", {}).pop(key, None)
    for row in summary["strategies"].values():
        for key in NEW_KEYS:
            row.pop(key, None)
    return summary


def test_zero_transfer_reproduces_the_old_simulation_exactly(monkeypatch):
    settings = SimSettings(law="beta:0.6,0.9", strategies=("grpo", "vigor", "auto"), prompts=8, learn=True,
                           steps=6, seed=5, transfer=0.0)
    new = simulate(settings, AllocationConfig())
    monkeypatch.setattr(sim_mod, "_learn", lambda *a: _old_learn(*a) or 0.0)  # it returned nothing
    old = simulate(settings, AllocationConfig())
    assert _strip(new) == _strip(old)
    # and the held-out set, moved by the shared step alone, stays where it started
    for row in new["strategies"].values():
        assert row["final_held_out_pass_rate"] == new["learning"]["held_out_start"]


def test_breadth_is_the_square_root_of_how_many_prompts_share_the_signal():
    assert breadth([0.5] * 16) == pytest.approx(4.0)
    assert breadth([0.0, 0.0, 2.0]) == pytest.approx(1.0)
    assert breadth([]) == 0.0 and breadth([0.0, 0.0]) == 0.0
    assert 1.0 < breadth([3.0, 1.0, 1.0, 1.0]) < 2.0  # concentrated: fewer effective prompts than four


def _one_step(transfer: float):
    rates = np.full(200, 0.4)
    settings = SimSettings(law="beta:1,1", strategies=("grpo",), prompts=16, learn=True, steps=1, seed=3,
                           transfer=transfer, until_target=False, curves=True, held_out=0.3)
    out = run_strategy("grpo", AllocationConfig(strategy="grpo"), settings, rates, None)
    return rates, out


def test_positive_transfer_moves_prompts_the_step_did_not_sample():
    _, none = _one_step(0.0)
    _, some = _one_step(0.05)
    # a held-out set (never sampled) stays put without transfer and rises with it
    assert none.curve["held_out"] == [0.3, 0.3] and some.curve["held_out"][1] > 0.3
    assert some.curve["pool"][1] > none.curve["pool"][1]  # the pool's unsampled prompts moved too
    # every prompt of the pool moved by the same shared step beside its own
    settings = SimSettings(prompts=16, learn=True, steps=1, seed=3, transfer=0.05, until_target=False)
    p = np.full(200, 0.4)
    run_strategy_pool = p.copy()
    run_strategy("grpo", AllocationConfig(strategy="grpo"), settings, run_strategy_pool, None)  # a private copy
    assert (run_strategy_pool == 0.4).all()  # the caller's pool is not touched
    index = {f"q{i}": i for i in range(200)}
    own = {f"q{i}": 4.0 for i in range(16)}  # 16 sampled prompts, signal 4 each (8 rollouts x std 0.5)
    sim_mod._learn(p, own, index, 8, settings)
    shared = 0.05 * breadth(list(own.values()))
    assert p[100] == pytest.approx(0.4 + settings.lr * shared * 0.6)  # unsampled: the shared step only
    assert p[0] == pytest.approx(0.4 + settings.lr * (shared + 0.5) * 0.6)  # sampled: its own on top


def test_concentrated_steps_transfer_less_than_spread_ones():
    """At the same transfer, VIGOR's deep schedule moves held-out prompts less than grpo's
    even spread (its signal sits on fewer prompts): the breadth the study rewarded."""
    shape = RunShape(prompts=16, steps=6, pool=400, eval_steps=[0, 3, 6], eval_se=0.02, held_out_start=0.4)
    rates = list(np.random.default_rng(0).beta(0.5, 0.7, 256))
    alloc = AllocationConfig()
    grpo = metric_curve("grpo", alloc.model_copy(update={"strategy": "grpo"}), shape, rates, 0.03, seed=1)
    vigor = metric_curve("vigor", alloc.model_copy(update={"strategy": "vigor"}), shape, rates, 0.03, seed=1)
    assert grpo[-1] > vigor[-1] > 0.4


def _synthetic_gain(alloc, shape, rates, transfer, disruption, width, steps, seed):
    """What a real grpo run at ``width`` rollouts per prompt gains on held-out prompts when the
    world is the model with this transfer and disruption (the fit's own pool draws)."""
    from vigor_cli.study.transfer import FIT_REPEATS, run_curves, width_config

    gains = []
    for r in range(FIT_REPEATS):
        c = run_curves("grpo", width_config(alloc, "grpo", width), shape, rates, transfer, seed * 1000 + r,
                       steps=max(steps), disruption=disruption, prompts=shape.prompts * 8 // width)
        gains.append(sum(c["metric"][s] - c["metric"][0] for s in steps) / len(steps))
    return sum(gains) / len(gains)


def test_the_fit_recovers_a_known_transfer_from_synthetic_runs():
    shape = RunShape(prompts=8, steps=2, pool=100, eval_steps=[0, 2], eval_se=0.02, held_out_start=0.35)
    rates = list(np.random.default_rng(1).beta(0.8, 1.2, 100))
    alloc = AllocationConfig(strategy="grpo")
    true = 0.025
    gain = _synthetic_gain(alloc, shape, rates, true, 0.0, 8, [2], seed=9)
    fit = fit_transfer(alloc, shape, rates, [2], {8: [gain]}, "synthetic", seed=9)
    assert fit.value == pytest.approx(true, rel=0.03) and fit.low == fit.high == fit.value and fit.disruption == 0
    # noisy runs of several seeds: the interval holds the truth, and widens with the noise
    noisy = [gain + e for e in (-0.004, 0.003, 0.001, -0.002, 0.002)]
    se = float(np.std(noisy, ddof=1) / math.sqrt(len(noisy)))
    fit = fit_transfer(alloc, shape, rates, [2], {8: noisy}, "synthetic", seed=9)
    assert fit.observed[8]["se"] == pytest.approx(se) and fit.low < true < fit.high
    wide = fit_transfer(alloc, shape, rates, [2], {8: noisy}, "synthetic", seed=9, se={8: 3 * se})
    assert wide.low <= fit.low and wide.high >= fit.high
    # a run that gained nothing on prompts it did not train on: no transfer, said so
    flat = fit_transfer(alloc, shape, rates, [2], {8: [-0.01]}, "synthetic", seed=9)
    assert flat.value == 0.0 and "no transfer" in flat.notes[0]


def test_two_widths_recover_transfer_and_disruption():
    shape = RunShape(prompts=8, steps=2, pool=100, eval_steps=[0, 2], eval_se=0.02, held_out_start=0.35)
    rates = list(np.random.default_rng(1).beta(0.8, 1.2, 100))
    alloc = AllocationConfig(strategy="grpo")
    gains = {w: [_synthetic_gain(alloc, shape, rates, 0.03, 0.02, w, [2], seed=9)] for w in (8, 4)}
    assert gains[4][0] > gains[8][0]  # the wider run's signal spans more prompts: it transfers more
    fit = fit_transfer(alloc, shape, rates, [2], gains, "synthetic", seed=9)
    assert fit.value == pytest.approx(0.03, rel=0.1) and fit.disruption == pytest.approx(0.02, rel=0.15)


def test_predicted_verdicts_read_their_interval():
    shape = RunShape(prompts=16, steps=6, pool=400, eval_steps=[0, 2, 4, 6], eval_se=0.005, held_out_start=0.4)
    rates = list(np.random.default_rng(2).beta(0.5, 0.7, 256))
    out = predict_verdicts(AllocationConfig(), shape, rates, 0.05, repeats=3, seed=4, strategies=("grpo", "vigor"))
    assert out["grpo"]["repeats"] == 3 and "verdict" not in out["grpo"]
    v = out["vigor"]
    lo, hi = v["interval"]
    assert lo <= v["delta"] <= hi
    assert v["verdict"] == ("ahead" if lo > 0 else "behind" if hi < 0 else "tie")
    assert v["verdict"] == "behind"  # concentrated at a transfer this large, with little evaluation noise
    # the evaluation's noise widens the interval: a noisy held-out set cannot tell them apart
    noisy = predict_verdicts(AllocationConfig(), RunShape(**{**shape.__dict__, "eval_se": 0.2}), rates, 0.05,
                             repeats=3, seed=4, strategies=("grpo", "vigor"))
    assert noisy["vigor"]["delta"] == v["delta"] and noisy["vigor"]["verdict"] == "tie"


@pytest.mark.parametrize("args, needle", [
    (["--transfer", "-0.1"], "'--transfer': -0.1 is out of range"),
    (["--transfer", "2"], "'--transfer': 2 is out of range: must be >= 0 and <= 1"),
    (["--transfer", "nan"], "--transfer"),
    (["--transfer", "lots"], "--transfer"),
    (["--fit-steps", "-1"], "'--fit-steps': -1 is out of range: must be >= 0"),
    (["--fit-steps", "two"], "--fit-steps"),
])
def test_the_probe_s_new_flags_refuse_bad_values_in_one_line(vigor, args, needle):
    code, out, err = vigor("probe", *args)
    assert code == 2, (out, err)
    assert needle in err and len(err.strip().splitlines()) == 1


def _bench():
    sys.path.insert(0, str(ROOT))
    import bench.probe_verdicts as pv

    return pv


def test_the_verdict_table_reads_the_study_s_results():
    pv = _bench()
    results = json.loads((ROOT / "bench" / "efficiency_results.json").read_text())
    cells = pv.regime_cells(results)
    assert len(cells) == 9 and "default-150" not in cells and "tiny-math-compute" not in cells
    for name, cell in cells.items():
        for arm in pv.ARMS:
            real = pv.real_verdict(cell, arm)
            assert real["verdict"] == {"win": "ahead", "loss": "behind", "tie": "tie"}[
                cell["arms"][arm]["vs_grpo"]["accuracy_verdict"]]
        x = pv.regime_inputs(name, cell)
        assert x["task"] in ("tiny-math", "tiny-facts", "tiny-ladder", "tiny-code")
        assert len(x["rates"]) == len(cell["start_distribution"]["pass_counts"]) and x["early"][0] > 0
        assert len(x["gains"][8]) == sum(r.get("kept", True) for r in cell["runs"]["grpo"])
    # a verdict changed in the results (more seeds settled it) is read as it now stands
    cell = json.loads(json.dumps(cells["tiny-math-flat"]))
    cell["arms"]["auto"]["vs_grpo"]["accuracy_verdict"] = "win"
    assert pv.real_verdict(cell, "auto")["verdict"] == "ahead"


def test_the_validation_simulates_the_auto_each_cell_measured():
    """A cell whose auto runs ran another rule (auto_recency: 1, every prompt seen before in
    full) is predicted with that rule; a cell without the key with the current default."""
    pv = _bench()
    assert pv.auto_rule({"auto_recency": 1.0}) == ["allocation.auto.recency=1.0"]
    assert pv.auto_rule({}) == []
    _, _, before = pv.task_facts("tiny-math", tuple(pv.auto_rule({"auto_recency": 1.0})))
    _, _, now = pv.task_facts("tiny-math")
    assert before.section("auto").recency == 1.0 and now.section("auto").recency == 0.5
    from bench.efficiency_study.results import CELL_FACTS

    assert "auto_recency" in CELL_FACTS  # --restat keeps it


def test_the_committed_validation_states_its_agreement():
    out = json.loads((ROOT / "bench" / "probe_verdicts_results.json").read_text())
    assert out["regime_count"] == len(out["regimes"]) == 9
    for arm in ("auto", "vigor"):
        assert out["agreement"][arm] == sum(r["arms"][arm]["predicted"] == r["arms"][arm]["real"]
                                            for r in out["regimes"].values())
    for r in out["regimes"].values():
        lo, hi = r["fit"]["interval"]
        assert lo <= r["fit"]["transfer"] <= hi and r["fit"]["source"]
    # the rule: a real short run where the start is the bundled model, the recorded fit elsewhere
    measured = out["real_short_runs"]["regimes"]
    assert set(measured) == {"tiny-math-default", "tiny-math-peaked", "tiny-math-flat", "tiny-code-default"}
    for arm in ("auto", "vigor"):
        assert out["agreement_probe_rule"][arm] == sum(
            measured[n][arm]["agree"] if n in measured else r["arms"][arm]["agree"] for n, r in out["regimes"].items())
    for n, r in measured.items():
        assert r["fit"]["source"].startswith("real short run: 4 grpo steps") and r["measured"]["short_run"]["steps"] == 4


@pytest.mark.slow
def test_a_real_short_run_fits_the_transfer_on_the_tiny_model(vigor):
    code, out, err = vigor("probe", "--prompts", "24", "--samples", "4", "--fit-steps", "2", "--simulations", "2",
                           "--json", "--set", "train.prompts_per_step=16")
    assert code == 0, err
    result = json.loads(out)
    fit = result["transfer"]
    assert fit["source"].startswith("short real run: 2 grpo steps") and fit["steps"] == 2
    assert fit["interval"][0] <= fit["transfer"] <= fit["interval"][1]
    assert fit["se"] == pytest.approx((fit["interval"][1] - fit["interval"][0]) / 3.92, abs=1e-5)
    observed = fit["observed"]["8"]  # grpo's width: the config's group of 8
    assert observed["se"] is not None and observed["se"] > 0 and fit["disruption"] == 0
    if fit["transfer"] > 0:
        v = result["verdicts"]["strategies"]
        assert set(v) == {"grpo", "vigor", "auto"}
        for name in ("vigor", "auto"):
            assert v[name]["verdict"] in ("ahead", "tie", "behind")
            assert v[name]["interval"][0] <= v[name]["delta"] <= v[name]["interval"][1]
    # given instead of fitted: no short run
    code, out, err = vigor("probe", "--prompts", "24", "--samples", "4", "--transfer", "0.02", "--simulations", "2",
                           "--json", "--set", "train.prompts_per_step=16")
    assert code == 0, err
    result = json.loads(out)
    assert result["transfer"]["transfer"] == 0.02 and result["transfer"]["source"] == "given (--transfer)"
    assert "short_run" not in result and result["verdicts"]["strategies"]["auto"]["verdict"] in ("ahead", "tie", "behind")


@pytest.mark.slow
def test_the_validation_runs_on_one_regime(tmp_path):
    pv = _bench()
    out_path = tmp_path / "v.json"
    assert pv.main(["--cells", "tiny-math-peaked", "--out", str(out_path), "--real"]) == 0
    out = json.loads(out_path.read_text())
    assert list(out["regimes"]) == ["tiny-math-peaked"] and out["regime_count"] == 1
    row = out["regimes"]["tiny-math-peaked"]
    assert row["fit"]["source"].startswith("recorded early evaluations of the grpo arm")
    assert out["two_widths"]["regimes"]["tiny-math-peaked"]["fit"]["source"].startswith(
        "recorded early evaluations of the grpo and grpo-wide arms")
    assert set(row["arms"]) == {"auto", "vigor"}
    measured = out["real_short_runs"]["regimes"]["tiny-math-peaked"]
    assert measured["measured"]["key"]["temperature"] == 0.5 and measured["fit"]["source"].startswith("real short run")
    # a second run reuses the measured short run (its settings match): the same fit
    assert pv.main(["--cells", "tiny-math-peaked", "--out", str(out_path), "--real"]) == 0
    again = json.loads(out_path.read_text())["real_short_runs"]["regimes"]["tiny-math-peaked"]
    assert again["measured"] == measured["measured"] and again["fit"] == measured["fit"]


def _verdicts(auto: str, vigor: str) -> dict:
    row = lambda v, d: {"verdict": v, "delta": d, "interval": [d - 0.01, d + 0.01], "repeats": 8}  # noqa: E731
    return {"grpo": {"repeats": 8, "mean_over_run": 0.5}, "vigor": row(vigor, -0.03), "auto": row(auto, 0.02)}


def test_with_transfer_the_predicted_verdicts_decide_the_recommendation():
    from vigor_cli.commands import probe as probe_cmd

    shape = RunShape(prompts=64, steps=30, pool=2000, eval_steps=[0, 10, 20, 30], eval_se=0.03, held_out_start=0.4)
    choice, why = probe_cmd.recommend_by_verdicts(_verdicts("ahead", "behind"), shape)
    assert choice == "auto" and why == ("predicted over 30 steps with transfer: vigor behind grpo (-3.0 points "
                                        "[-4.0, -2.0]), auto ahead grpo (+2.0 points [+1.0, +3.0])")
    assert probe_cmd.recommend_by_verdicts(_verdicts("behind", "behind"), shape)[0] == "grpo"
    choice, why = probe_cmd.recommend_by_verdicts(_verdicts("tie", "ahead"), shape)
    assert choice == "tie" and "run auto" in why and "vigor is ahead in this prediction" in why


def test_the_probe_prints_the_transfer_and_each_verdict(monkeypatch, capsys):
    from vigor_cli.console import console
    from vigor_cli.report.probe_view import print_verdicts

    monkeypatch.setattr(console, "width", 250)
    fit = {"transfer": 0.0218, "interval": [0.0104, 0.0332], "source": "short real run: 4 grpo steps", "notes": []}
    result = {"transfer": fit, "verdicts": {"steps": 30, "prompts_per_step": 64, "eval_se": 0.03,
                                            "metric": "mean held-out pass rate over the run's evaluations",
                                            "strategies": _verdicts("ahead", "behind")}}
    print_verdicts(result)
    out = " ".join(capsys.readouterr().out.split())
    assert "transfer between prompts 0.0218 [95 %: 0.0104, 0.0332] (short real run: 4 grpo steps)" in out
    assert "auto │ ahead │ +2.0 [+1.0, +3.0]" in out and "vigor │ behind │ -3.0 [-4.0, -2.0]" in out
    print_verdicts({"transfer": {**fit, "transfer": 0.0, "interval": [0.0, 0.0]}, "verdicts": None})
    assert "no predicted verdicts" in " ".join(capsys.readouterr().out.split())
