"""auto's depth weight by how recently the census prompts recurred (allocation.auto.recency):
a prompt drawn the step before counts in full, each step between halves it at 0.5; at 1 any
prompt seen before counts in full (the rule before). Replayed on the default run's recorded
censuses, the rule before goes deep once prompts recur an epoch later, the default does not."""

from __future__ import annotations

import json

import pytest

from test_auto_decision import recorded

from vigor_cli.allocation import make_allocator
from vigor_cli.allocation.auto import AutoAllocator, replay
from vigor_cli.settings import build_config


def _alloc(**kw) -> AutoAllocator:
    base = dict(budget=64, width=2.0, census=2, margin=1.25, max_rollouts=32, history=16)
    return AutoAllocator(8, 0, **{**base, **kw})


def _seen(alloc: AutoAllocator, gaps: dict[str, int | None]) -> list[str]:
    """Give each uid a history drawn ``gap`` censuses before the next one (None: never seen)."""
    alloc.censuses = 10
    for uid, gap in gaps.items():
        if gap is not None:
            alloc.history[uid] = [1.0, 0.0]
            alloc.seen_at[uid] = alloc.censuses + 1 - gap
    alloc.censuses += 1  # as plan() counts the census it decides on
    return list(gaps)


def test_recent_prompts_count_in_full_and_each_step_between_halves():
    alloc = _alloc(recency=0.5)
    uids = _seen(alloc, {"a": 1, "b": 2, "c": 3, "d": None})
    assert alloc._recurring(uids) == pytest.approx((1 + 0.5 + 0.25 + 0) / 4)
    assert alloc._recurring(["c"]) == pytest.approx(0.25)


def test_recency_one_is_the_share_seen_before_and_zero_counts_only_the_step_before():
    before = _alloc(recency=1.0)
    uids = _seen(before, {"a": 1, "b": 17, "c": None, "d": 40})
    assert before._recurring(uids) == pytest.approx(3 / 4)
    strict = _alloc(recency=0.0)
    uids = _seen(strict, {"a": 1, "b": 2, "c": None})
    assert strict._recurring(uids) == pytest.approx(1 / 3)


def test_an_older_checkpoint_without_census_numbers_counts_its_history_as_recent():
    alloc = _alloc(recency=0.5)
    alloc.history = {"a": [1.0], "b": [0.0]}
    alloc.censuses = 5
    assert alloc._recurring(["a", "b", "c"]) == pytest.approx(2 / 3)


def test_the_record_and_reason_give_the_weight_and_the_share_seen_before():
    alloc = _alloc(recency=0.5, resamples=0)
    census = {f"p{i}": [float(i % 2), float(i % 3 == 0)] for i in range(16)}
    alloc.plan(census)
    alloc._uids, alloc._rewards = list(census), census
    alloc._end_step({})
    assert set(alloc.seen_at.values()) == {1}
    rec = alloc.plan(census)["record"]  # the same prompts the next step
    assert rec["census"]["seen_before"] == 1.0 and rec["census"]["recurring"] == 1.0 and rec["depth_weight"] == 1.0
    assert "recurring weight 1.00" in rec["reason"]
    json.dumps(rec, allow_nan=False)


def test_state_dict_keeps_when_each_prompt_was_drawn():
    alloc = _alloc(recency=0.5)
    alloc.history, alloc.seen_at, alloc.censuses = {"a": [1.0]}, {"a": 3}, 7
    state = json.loads(json.dumps(alloc.state_dict()))
    resumed = _alloc(recency=0.5)
    resumed.load_state_dict(state)
    assert resumed.seen_at == {"a": 3} and resumed.censuses == 7
    old = {k: v for k, v in state.items() if k != "seen_at"}
    resumed = _alloc(recency=0.5)
    resumed.load_state_dict(old)
    assert resumed.seen_at == {}


def test_the_default_is_half_per_step_and_bad_values_name_the_key():
    cfg = build_config(sets=[])
    assert cfg.allocation.auto.recency == 0.5
    assert make_allocator(cfg.allocation, cfg.train.prompts_per_step, 0).recency == 0.5
    assert make_allocator(build_config(sets=["allocation.auto.recency=1"]).allocation, 64, 0).recency == 1.0
    for bad in ("1.5", "-0.1", "abc"):
        with pytest.raises(Exception, match="allocation.auto.recency"):
            build_config(sets=[f"allocation.auto.recency={bad}"])


@pytest.mark.slow
def test_replayed_default_run_goes_deep_an_epoch_later_only_under_the_rule_before():
    """Steps 1-28 of the default run (seed 0): the census prompts recur from step 18, one
    epoch (about 17 steps) after they were drawn. Counting every prompt seen before in full,
    the recorded decisions come back (deep from step 18); at the default 0.5 the depth weight
    stays near 0 and every step goes wide; a step with no prompt seen before decides the same
    under both."""
    data, records = recorded()
    before = replay(AutoAllocator(**data["allocator"], hold=0.0, resamples=0, recency=1.0), records)
    assert [d["decision"] for d in before] == [r["recorded"]["decision"] for r in records]
    now = replay(AutoAllocator(**data["allocator"], hold=0.0, resamples=0, recency=0.5), records)
    assert [d["decision"] for d in now] == ["wide"] * len(records)
    fresh = [i for i, d in enumerate(before) if d["census"]["seen_before"] == 0]
    assert len(fresh) >= 12 and [now[i]["signal"]["ratio"] for i in fresh] == [before[i]["signal"]["ratio"] for i in fresh]
    assert sum(d["decision"] == "deep" for d in before[17:]) >= 5
    assert all(d["depth_weight"] < 0.2 for d in now[17:]) and all(d["depth_weight"] > 0.9 for d in before[17:])
    assert all(d["census"]["seen_before"] == b["census"]["seen_before"] for d, b in zip(now, before))
