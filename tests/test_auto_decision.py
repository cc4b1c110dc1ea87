"""auto's wide/deep decision against its own noise: the deep/wide ratio's sd over resampled
censuses, the hysteresis in units of it (allocation.auto.hold), the record's words and
numbers, the state a resumed run keeps, and recorded censuses of the default run (the
decision must not alternate on a ratio within its noise of the margin)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vigor_cli.allocation.auto import AutoAllocator, replay
from vigor_cli.settings import build_config

FIXTURE = Path(__file__).parent / "fixtures" / "auto_censuses.json"


def _alloc(**kw) -> AutoAllocator:
    base = dict(budget=64, width=2.0, census=2, margin=1.25, max_rollouts=32, history=16)
    return AutoAllocator(8, 0, **{**base, **kw})


@pytest.mark.parametrize("hold, expected", [
    (0.0, ["deep", "wide", "deep", "wide", "wide", "wide", "deep"]),  # the plain margin flips on noise
    (1.0, ["deep", "deep", "deep", "wide", "wide", "wide", "wide"]),  # within 1 sd: the last plan stands
    (3.0, ["wide"] * 7),                                              # 1.37 is only 2.4 sd above: 1.37 - 3 x 0.05 < 1.25
])
def test_hysteresis_in_units_of_the_ratios_sd(hold, expected):
    """The default run's ratios at steps 18-24 (sd about 0.03): with hold 1, a switch needs
    the ratio past the margin by one sd on the far side."""
    alloc = _alloc(hold=hold)
    got = []
    for ratio in (1.37, 1.249, 1.268, 1.20, 1.24, 1.23, 1.26):
        choice, held, words = alloc._decide(ratio, 0.03 if ratio != 1.37 else 0.05)
        assert held == (choice != ("deep" if ratio >= 1.25 else "wide"))
        assert f"{ratio:.2f}x +- 0.0" in words and "sd" in words
        got.append(choice)
    assert got == expected


def test_the_record_says_which_way_and_by_how_much():
    alloc = _alloc(hold=1.0, resamples=16)
    census = {f"p{i}": [float(i % 2), float(i % 3 == 0)] for i in range(16)}
    rec = alloc.plan(census)["record"]
    sd, ratio = rec["signal"]["ratio_sd"], rec["signal"]["ratio"]
    assert sd > 0 and rec["signal"]["resamples"] == 16 and rec["hold"] == 1.0
    assert rec["margin_sds"] == pytest.approx((ratio - 1.25) / sd, rel=1e-2)
    assert rec["previous"] == "wide" and rec["held"] is False
    side = "above" if ratio >= 1.25 else "below"
    assert f"sd {side} margin 1.25" in rec["reason"] and "resampled censuses" in rec["reason"]
    json.dumps(rec, allow_nan=False)
    # no resamples: no sd, the plain margin, said so
    rec = _alloc(hold=1.0, resamples=0).plan(census)["record"]
    assert rec["signal"]["ratio_sd"] is None and rec["margin_sds"] is None and not rec["held"]
    assert ("margin 1.25" in rec["reason"]) and "sd" not in rec["reason"].split(";")[0]


def test_held_and_switched_are_said_in_words():
    alloc = _alloc(hold=1.0)
    alloc.resamples = 16
    alloc.last_decision = "deep"
    _, held, words = alloc._decide(1.24, 0.03)
    assert held and "within 1 sd, kept the last step's deep" in words
    _, held, words = alloc._decide(1.10, 0.03)
    assert not held and "past 1 sd, switched from deep" in words and "5.0 sd below" in words


def test_the_resampling_is_seeded_and_leaves_the_allocators_draws_alone():
    census = {f"p{i}": [float(i % 2), float(i % 5 == 0)] for i in range(16)}
    a, b = _alloc(resamples=16), _alloc(resamples=16)
    assert a.plan(census)["record"]["signal"] == b.plan(census)["record"]["signal"]
    plain = _alloc(resamples=0)
    plain_plan = plain.plan(census)
    c = _alloc(resamples=16)
    assert c.plan(census)["extra"] == plain_plan["extra"]  # the same plan with or without the sd
    assert c.rng.getstate() == plain.rng.getstate()
    other = AutoAllocator(8, 1, budget=64, width=2.0, census=2, margin=1.25, max_rollouts=32, history=16, resamples=16)
    assert other.plan(census)["record"]["signal"]["ratio_sd"] != _alloc(resamples=16).plan(census)["record"]["signal"]["ratio_sd"]


def test_state_dict_keeps_the_last_plan_and_the_seed():
    alloc = _alloc(hold=1.0, resamples=8)
    alloc.last_decision = "deep"
    state = json.loads(json.dumps(alloc.state_dict()))
    assert state["last_decision"] == "deep" and state["seed"] == 0
    resumed = AutoAllocator(8, 5, budget=64, width=2.0, census=2, margin=1.25, max_rollouts=32, history=16, hold=1.0, resamples=8)
    resumed.load_state_dict(state)
    assert resumed.last_decision == "deep" and resumed.seed == 0
    old = {k: v for k, v in state.items() if k not in ("last_decision", "seed")}  # a checkpoint from before
    resumed = AutoAllocator(8, 5, budget=64, width=2.0, census=2, margin=1.25, max_rollouts=32, history=16)
    resumed.load_state_dict(old)
    assert resumed.last_decision == "wide" and resumed.seed == 5


@pytest.mark.parametrize("key, value", [("hold", "-1"), ("hold", "abc"), ("resamples", "-2"), ("resamples", "1.5")])
def test_bad_values_name_the_key(key, value):
    with pytest.raises(Exception, match=f"allocation.auto.{key}"):
        build_config(sets=[f"allocation.auto.{key}={value}"])


def test_the_defaults_measure_the_noise_and_hold_one_sd():
    cfg = build_config(sets=[])
    from vigor_cli.allocation import make_allocator

    alloc = make_allocator(cfg.allocation, cfg.train.prompts_per_step, 0)
    assert (alloc.hold, alloc.resamples) == (1.0, 32)


def recorded() -> tuple[dict, list[dict]]:
    """The fixture's steps as allocation.jsonl records (uid, rewards per round)."""
    data = json.loads(FIXTURE.read_text())
    records = []
    for step in data["steps"]:
        prompts = []
        for item in step["prompts"].split():
            uid, rounds = item.rsplit(":", 1)
            prompts.append({"uid": data["uid_prefix"] + uid,
                            "rounds": [{"rewards": [int(c) for c in r]} for r in rounds.split("/")]})
        records.append({"step": step["step"], "prompts": prompts, "recorded": step["recorded"]})
    return data, records


@pytest.mark.slow
def test_recorded_censuses_within_noise_of_the_margin_do_not_alternate():
    """Steps 1-28 of the default run (seed 0): prompts recur from step 18; the plain margin went
    deep, wide, deep, wide ... on ratios within a few hundredths of 1.25. Replayed with the
    plain margin the run's decisions and ratios come back exactly; with hold 1, a plan changes
    only on a ratio at least one sd past the margin, and the alternation stops."""
    data, records = recorded()
    plain = replay(AutoAllocator(**data["allocator"], hold=0.0, resamples=32), records)
    assert [d["decision"] for d in plain] == [r["recorded"]["decision"] for r in records]
    assert [d["signal"]["ratio"] for d in plain] == [r["recorded"]["ratio"] for r in records]
    held = replay(AutoAllocator(**data["allocator"], hold=1.0, resamples=32), records)
    assert [d["signal"]["ratio"] for d in held] == [d["signal"]["ratio"] for d in plain]  # same censuses, same state
    for before, now in zip([{"decision": "wide"}] + held[:-1], held):
        if now["decision"] != before["decision"]:  # a switch: the ratio was past one sd on the far side
            assert abs(now["margin_sds"]) >= 1.0
            assert (now["margin_sds"] > 0) == (now["decision"] == "deep")
        elif now["margin_sds"] is not None and abs(now["margin_sds"]) < 1.0:
            assert now["decision"] == before["decision"]

    def switches(ds):
        plans = [d["decision"] for d in ds]
        return sum(a != b for a, b in zip(plans, plans[1:]))

    def alternations(ds):  # A B A within three steps
        plans = [d["decision"] for d in ds]
        return sum(1 for i in range(len(plans) - 2) if plans[i] != plans[i + 1] and plans[i] == plans[i + 2])

    assert alternations(plain) >= 2 and switches(plain) >= 5  # the flips, measured
    assert alternations(held) == 0 and switches(held) < switches(plain)
    near = [d for d in held if d["margin_sds"] is not None and abs(d["margin_sds"]) < 1.0]
    assert near and all(d["held"] or d["decision"] == d["previous"] for d in near)
    assert all(0.0 < d["signal"]["ratio_sd"] < 0.1 for d in held)
