"""Rollouts spent without signal (``rollouts/zero_variance``, ``rollouts/zero_variance_share``):
counted by the shared rollout core for every strategy, on every metrics.jsonl line, in the
progress line, `vigor inspect-allocation`, `vigor report` and summary.json."""

from __future__ import annotations

import json

import pytest

from test_trainer import quiet, tiny_sets
from vigor_cli.allocation import STRATEGIES
from vigor_cli.errors import UserError
from vigor_cli.report.allocation import parse_step, summarize_step
from vigor_cli.report.allocation_view import no_signal_line
from vigor_cli.train.rollout_core import RolloutBatch, Sample, step_metrics, zero_variance_rollouts
from vigor_cli.run.logs import check_metrics_line
from vigor_cli.run.directory import RunDir
from vigor_cli.settings import build_config
from vigor_cli.train.trainer import Trainer


def _sample(uid: str, reward: float | None, in_update: bool = True) -> Sample:
    return Sample(uid, None, reward, "", 0, in_update=in_update, tokens=3, truncated=False)


def _batch(groups: dict[str, list[float | None]]) -> RolloutBatch:
    every = [_sample(uid, r) for uid, rewards in groups.items() for r in rewards]
    used = [s for s in every if s.reward is not None]
    return RolloutBatch(used, every, {})


def test_rollouts_in_all_equal_groups_are_counted_with_their_share():
    batch = _batch({
        "all-right": [1.0, 1.0, 1.0, 1.0],  # 4 without signal
        "mixed": [0.0, 1.0, 0.0],           # signal
        "all-wrong": [0.0, 0.0],            # 2 without signal
        "one-scored": [1.0, None],          # one reward is equal to itself: 2 without signal
        "none-scored": [None, None, None],  # nothing to learn from: 3
        "partial": [0.5, 0.5, None],        # equal fractional rewards and an unscored one: 3
        "near": [0.5, 0.5000001],           # not equal: signal
    })
    m = step_metrics(batch, rollouts_total=100, tokens_total=0)
    assert m["rollouts/zero_variance"] == 4 + 2 + 2 + 3 + 3 == zero_variance_rollouts(batch.generated)
    assert m["rollouts/step"] == 19
    assert m["rollouts/zero_variance_share"] == pytest.approx(14 / 19)
    check_metrics_line({"step": 1, **m}, "metrics.jsonl:1")  # the run log's rules accept it


def test_a_step_with_signal_everywhere_or_nowhere_and_an_empty_one():
    assert step_metrics(_batch({"a": [0.0, 1.0], "b": [1.0, 0.0]}), 4, 0)["rollouts/zero_variance_share"] == 0.0
    m = step_metrics(_batch({"a": [1.0, 1.0], "b": [0.0, 0.0]}), 4, 0)
    assert (m["rollouts/zero_variance"], m["rollouts/zero_variance_share"]) == (4, 1.0)
    m = step_metrics(_batch({}), 0, 0)
    assert (m["rollouts/zero_variance"], m["rollouts/zero_variance_share"]) == (0, 0.0)


def test_a_dropped_group_still_counts_as_spent():
    """DAPO drops all-equal groups from the update: their rollouts were still spent without signal."""
    every = [_sample("flat", 1.0, in_update=False), _sample("flat", 1.0, in_update=False),
             _sample("mixed", 0.0), _sample("mixed", 1.0)]
    m = step_metrics(RolloutBatch(every[2:], every, {}), 4, 0)
    assert m["rollouts/zero_variance"] == 2 and m["groups/zero_var_frac"] == 0.0


@pytest.mark.parametrize("key,value", [("rollouts/zero_variance_share", 1.5), ("rollouts/zero_variance", -1)])
def test_a_damaged_line_is_refused_naming_the_key(key, value):
    with pytest.raises(UserError, match=key):
        check_metrics_line({"step": 1, key: value}, "metrics.jsonl:3")


def _record(strategy: str, prompts: list[list[float]], decision: str | None = None) -> dict:
    rec = {"strategy": strategy, "rounds": [{"round": 1, "prompts": len(prompts), "rollouts": 0, "kept": 0}],
           "prompts": [{"uid": f"q{i}", "rounds": [{"round": 1, "added": len(r), "rewards": r, "var": 0, "kept": None}],
                        "rollouts": len(r), "used": len(r), "in_update": True} for i, r in enumerate(prompts)],
           "totals": {"rollouts": sum(map(len, prompts)), "budget": None}}
    if decision:
        rec["totals"]["auto"] = {"decision": decision, "reason": decision}
    return rec


def test_inspect_allocation_summary_and_overview_line():
    deep = summarize_step(parse_step({"step": 1, **_record("auto", [[1, 1, 1, 1, 1, 1], [0, 1]], "deep")}, "x"))
    wide = summarize_step(parse_step({"step": 2, **_record("auto", [[0, 0], [0, 1], [1, 1], [0, 1]], "wide")}, "x"))
    assert (deep["zero_var_rollouts"], deep["zero_var_rollouts_share"]) == (6, 0.75)
    assert (wide["zero_var_rollouts"], wide["zero_var_rollouts_share"]) == (4, 0.5)
    line = no_signal_line([deep, wide])
    assert "10 of 16 (62.5%)" in line and "75.0% in the 1 deep steps" in line and "50.0% in the 1 wide steps" in line
    grpo = summarize_step(parse_step({"step": 1, **_record("grpo", [[0, 0, 0, 0]])}, "x"))
    assert no_signal_line([grpo]).endswith("4 of 4 (100.0%)")


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.slow
def test_every_strategy_counts_it_from_what_it_generated(tmp_path, strategy):
    cfg = build_config(sets=tiny_sets(tmp_path, strategy, f"allocation.strategy={strategy}", "sampling.temperature=1.5"))
    tr = Trainer(cfg, RunDir(tmp_path / strategy), None, quiet())
    try:
        log = tr.train_step(1)
    finally:
        tr.close()
    m = log.metrics
    flat = sum(p["rollouts"] for p in log.record["prompts"]
               if p["rollouts"] and len({r for rd in p["rounds"] for r in rd["rewards"]}) <= 1)
    assert m["rollouts/zero_variance"] == flat
    assert m["rollouts/zero_variance_share"] == pytest.approx(flat / m["rollouts/step"])


@pytest.mark.slow
def test_three_steps_every_line_and_every_view(tmp_path, vigor, capsys):
    """`vigor train` for three steps: every step line has both keys, matching its allocation
    record; the progress line, summary.json, inspect-allocation and report show them."""
    sets = tiny_sets(tmp_path, "three", "train.steps=3", "sampling.temperature=1.5", "train.log_completions_every=0")
    code, out, err = vigor("train", *(x for s in sets for x in ("--set", s)))
    assert code == 0, err
    run = tmp_path / "three"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if "rollouts/step" in m]
    records = [json.loads(x) for x in (run / "allocation.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps] == [1, 2, 3]
    for m, rec in zip(steps, records):
        flat = sum(p["rollouts"] for p in rec["prompts"]
                   if p["rollouts"] and len({r for rd in p["rounds"] for r in rd["rewards"]}) <= 1)
        assert m["rollouts/zero_variance"] == flat
        assert m["rollouts/zero_variance_share"] == pytest.approx(flat / m["rollouts/step"])
        assert f"no-signal {flat} (" in " ".join(out.split())
    # every line says them, evaluations too: their step's values (none before training)
    assert all("rollouts/zero_variance" in m and "rollouts/zero_variance_share" in m for m in lines)
    by_step = {m["step"]: m for m in steps}
    for m in (m for m in lines if "eval/accuracy" in m):
        own = by_step.get(m["step"], {"rollouts/zero_variance": 0, "rollouts/zero_variance_share": 0.0})
        assert (m["rollouts/zero_variance"], m["rollouts/zero_variance_share"]) == (
            own["rollouts/zero_variance"], own["rollouts/zero_variance_share"])
    summary = json.loads((run / "summary.json").read_text())
    total = sum(m["rollouts/zero_variance"] for m in steps)
    assert summary["rollouts_zero_variance"] == total
    assert summary["rollouts_zero_variance_share"] == pytest.approx(total / summary["rollouts"])
    code, out, err = vigor("inspect-allocation", str(run))
    assert code == 0, err
    assert f"{total} of {summary['rollouts']}" in " ".join(out.split())
    code, out, err = vigor("report", str(run), "--out", str(tmp_path / "report"), "--json")
    assert code == 0, err
    row = json.loads(out)["runs"][0]
    assert row["rollouts_zero_variance"] == total
    code, out, err = vigor("report", str(run), "--out", str(tmp_path / "report"))
    assert code == 0, err
    assert "no signal" in out and f"{total:,} (" in out


def test_the_progress_line_shows_it(tmp_path):
    import io

    from rich.console import Console

    from vigor_cli.rollout.weight_check import WeightCheck
    from vigor_cli.train.log import StepLog, TrainLog

    (tmp_path / "run").mkdir()
    buffer = io.StringIO()
    log = TrainLog(build_config(), RunDir(tmp_path / "run"), Console(file=buffer, width=80), {})
    metrics = {"step": 1, "reward/mean": 0.5, "groups/zero_var_frac": 0.5, "rollouts/step": 512,
               "rollouts/cumulative": 512, "rollouts/zero_variance": 218, "rollouts/zero_variance_share": 218 / 512,
               "completions/mean_length": 4.8, "losses/loss": 0.001, "losses/clipfrac_low": 0.0,
               "losses/clipfrac_high": 0.0, "time/generate": 0.4, "time/reward": 0.0, "time/update": 0.6}
    log.step(StepLog(metrics=metrics), WeightCheck("unchecked", 0, 0.0, 0.0, 0.0, 0.0))
    [line] = buffer.getvalue().splitlines()
    assert "zero-var 0.50  no-signal 218 (43%)  rollouts 512" in line
