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


def test_config_takes_a_bundled_name_as_train_does(vigor):
    code, out, err = vigor("probe", "--config", "tiny-math", "--prompts", "8", "--samples", "2")
    assert code == 0, err
    assert "variance law: tiny on tiny-math, 8 prompts x 2 rollouts" in " ".join(out.split())


@pytest.mark.parametrize("args, needle", [
    (["--samples", "1"], "'--samples': 1 is out of range: must be >= 2"),
    (["--prompts", "0"], "'--prompts': 0 is out of range: must be >= 1"),
    (["--task", "nope"], "unknown task 'nope'"),
    (["--config", "no/such.yaml"], "--config no/such.yaml: no such file, and no bundled config of that name"),
    (["--set", "sampling.temperature=hot"], "sampling.temperature"),
])
def test_bad_input_is_one_line_exit_2(vigor, args, needle):
    code, out, err = vigor("probe", *args)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def _cfg():
    return build_config(None, overrides={}, sets=["train.prompts_per_step=16"])


HEAVY = [0] * 100 + [8] * 90 + [2, 4, 6, 3, 5] * 13
FLAT = [3, 4, 5] * 80
MIDDLE = [0] * 40 + [8] * 30 + [1, 2, 3, 4, 5, 6, 7] * 25


def test_recommendation_follows_the_printed_simulation():
    """The recommendation is the fastest simulated strategy other than vigor; a departure (vigor
    faster, a tie) is said in the reason. The issue's case: the simulation had auto slowest and
    the probe still recommended auto."""
    cfg = _cfg()
    sims = {}
    for name, counts in (("heavy", HEAVY), ("flat", FLAT), ("middle", MIDDLE)):
        law = census(counts, 8)
        sim = sims[name] = probe_cmd.simulate_on(counts, 8, cfg)
        cost = {n: r["rollouts_to_target"] for n, r in sim["strategies"].items() if r["rollouts_to_target"]}
        strategy, why = probe_cmd.recommend(law, sim)
        fastest = min((n for n in cost if n != "vigor"), key=cost.get)
        tie = fastest == "grpo" and cost.get("auto", 10**9) <= cost["grpo"] * 1.05
        assert strategy == ("auto" if tie else fastest), (name, cost, why)
        assert why.startswith("simulated rollouts to target: ")
        for n, c in cost.items():
            assert f"{n} {c:,}" in why  # the numbers it printed
        if "vigor" in cost and cost["vigor"] * 1.05 < cost[strategy]:
            assert "vigor is faster in this simulation" in why and "not recommended" in why
    # the flat law: grpo fastest, auto slowest -> grpo, with auto's cost named
    strategy, why = probe_cmd.recommend(census(FLAT, 8), sims["flat"])
    assert strategy == "grpo" and "grpo beats auto (auto needs" in why
    # heavy: grpo never reaches the target; auto does, with the law's reading
    strategy, why = probe_cmd.recommend(census(HEAVY, 8), sims["heavy"])
    assert strategy == "auto" and "auto reaches it, grpo does not" in why and "tail is heavy" in why
    # without auto the study's evidence leaves grpo; with no strategy reaching it, the study decides
    assert probe_cmd.recommend(census(HEAVY, 8), {"strategies": {}})[0] == "grpo"
    none = {"strategies": {n: {"rollouts_to_target": None} for n in ("grpo", "vigor", "auto")}}
    strategy, why = probe_cmd.recommend(census(FLAT, 8), none)
    assert strategy == "auto" and "numbers decide nothing" in why


def test_a_probe_whose_simulation_favours_grpo_recommends_grpo(monkeypatch, capsys):
    """The probe's readout (tables and recommendation) on probed pass counts where grpo is the
    fastest in the simulation: the recommendation is grpo and matches the printed table."""
    from vigor_cli.console import console
    from vigor_cli.report.probe_view import print_result

    monkeypatch.setattr(console, "width", 250)
    info = {"model": "tiny", "task": "tiny-math", "temperature": 1.0, "binary_rewards": True}
    result = probe_cmd.analyse(FLAT, 8, _cfg(), info)
    sim = result["simulated"]["strategies"]
    assert sim["auto"]["speedup_vs_grpo"] < 1 and sim["grpo"]["speedup_vs_grpo"] == 1.0
    assert result["recommended"] == "grpo"
    print_result(result)
    out = " ".join(capsys.readouterr().out.split())
    assert f"{sim['auto']['speedup_vs_grpo']:.2f}x" in out
    assert "recommended strategy: grpo (simulated rollouts to target: grpo 4,608" in out


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


def test_probe_on_your_own_task_with_a_reward_that_returns_none(vigor, tmp_path):
    """Your own task (task.* keys through --set) with a reward that cannot score some
    completions (None, TRL's convention): those count as not passed and are reported. The
    probe stopped with a TypeError (float(None))."""
    import json as _json

    data = tmp_path / "d.jsonl"
    data.write_text("".join(_json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                            for a in range(5) for b in range(5)))
    reward = tmp_path / "r.py"
    reward.write_text("def right(prompts, completions, answer, **kw):\n"
                      "    return [None if i % 2 else float(a in c) for i, (c, a) in enumerate(zip(completions, answer))]\n")
    code, out, err = vigor("probe", "--set", "task.name=custom", "--set", f"task.data={data}",
                           "--set", f"task.rewards=[{reward}:right]", "--prompts", "8", "--samples", "4", "--json")
    assert code == 0, err
    result = _json.loads(out)
    assert result["unscored"] == 8 * 2 and result["task"] == "custom"
