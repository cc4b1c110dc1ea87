"""`vigor probe`: the real tiny model and verifier on a few prompts, the variance law it
fits, the simulation on the probed pass rates, the recommendation rule, and bad input."""

from __future__ import annotations

import json

import pytest

from vigor_cli.commands import probe as probe_cmd
from vigor_cli.settings import build_config
from vigor_cli.variance_law import census


def test_probe_on_the_tiny_model_prints_the_law_and_a_recommendation(vigor):
    code, out, err = vigor("probe", "--prompts", "12", "--samples", "4", "--json", "--seed", "3")
    assert code == 0, err
    result = json.loads(out)
    assert result["model"] == "tiny" and result["task"] == "tiny-math"
    assert result["prompts"] == 12 and result["samples"] == 4
    counts = result["pass_counts"]
    assert len(counts) == 12 and all(0 <= c <= 4 for c in counts)
    law = result["variance_law"]
    assert sum(law["histogram"].values()) == 12
    assert law["mean_pass_rate"] == pytest.approx(sum(counts) / 48)
    assert not law["zero_variance_exact"]  # 4 samples < a group of 8: plug-in, flagged
    # the law is exactly the census of the probed counts
    again = census(counts, 4).to_dict()
    assert law["eta"] == pytest.approx(again["eta"]) and law["histogram"] == again["histogram"]
    sim = result["simulated"]["strategies"]
    assert set(sim) == {"grpo", "vigor", "auto"}
    assert sim["grpo"]["speedup_vs_grpo"] in (1.0, None)
    assert result["recommended"] in ("grpo", "vigor", "auto") and result["why"]
    # the same seed samples the same rollouts (the engine's seeded generate)
    code, out2, _ = vigor("probe", "--prompts", "12", "--samples", "4", "--json", "--seed", "3")
    assert json.loads(out2)["pass_counts"] == counts


def test_probe_table_output_on_another_task(vigor):
    code, out, err = vigor("probe", "--task", "tiny-facts", "--prompts", "8", "--samples", "2")
    assert code == 0, err
    text = " ".join(out.split())  # tables wrap
    assert "variance law: tiny on tiny-facts, 8 prompts x 2 rollouts" in text
    assert "closed-form eta" in text and "recommended strategy:" in text


@pytest.mark.parametrize("args, needle", [
    (["--samples", "1"], "'--samples': 1 is out of range: must be >= 2"),
    (["--prompts", "0"], "'--prompts': 0 is out of range: must be >= 1"),
    (["--task", "nope"], "unknown task 'nope'"),
    (["--config", "no/such.yaml"], "--config no/such.yaml: file not found"),
    (["--set", "sampling.temperature=hot"], "sampling.temperature"),
])
def test_bad_input_is_one_line_exit_2(vigor, args, needle):
    code, out, err = vigor("probe", *args)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def _cfg():
    return build_config(None, overrides={}, sets=["train.prompts_per_step=16"])


def test_recommendation_follows_the_law():
    cfg = _cfg()
    heavy = [0] * 100 + [8] * 90 + [2, 4, 6, 3, 5] * 13
    flat = [3, 4, 5] * 80
    middle = [0] * 40 + [8] * 30 + [1, 2, 3, 4, 5, 6, 7] * 25
    reasons = {}
    for name, counts in (("heavy", heavy), ("flat", flat), ("middle", middle)):
        law = census(counts, 8)
        sim = probe_cmd.simulate_on(counts, 8, cfg)
        strategy, why = probe_cmd.recommend(law, sim)
        assert strategy == "auto", (name, law.summary(), why)
        reasons[name] = why
    assert "tail is heavy" in reasons["heavy"] and "concentrates" in reasons["heavy"]
    assert "little to reallocate" in reasons["flat"]
    assert "moderate" in reasons["middle"] and "goes wide" in reasons["middle"]
    # without auto the study's evidence leaves grpo
    assert probe_cmd.recommend(census(heavy, 8), {"strategies": {}})[0] == "grpo"


def test_simulation_on_probed_rates_reports_speedups():
    cfg = _cfg()
    counts = [0] * 60 + [8] * 40 + [4] * 30
    sim = probe_cmd.simulate_on(counts, 8, cfg)
    assert sim["law"] == "file:<probed pass rates>"
    assert sim["pool"] == len(counts)
    rows = sim["strategies"]
    assert rows["grpo"]["speedup_vs_grpo"] == 1.0
    for name in ("vigor", "auto"):
        r = rows[name]
        if r["rollouts_to_target"]:
            assert r["speedup_vs_grpo"] == pytest.approx(rows["grpo"]["rollouts_to_target"] / r["rollouts_to_target"], abs=1e-3)
