"""pilot-commit: hand-worked steps, the budget, eviction, state round trip and resume."""

from __future__ import annotations

import json
import random

import pytest

from test_allocation import Counter, run_step
from test_allocation_peers import cfg, fixed_draw, scripted
from vigor_cli.allocation import make_allocator
from vigor_cli.config import ConfigError
from vigor_cli.settings import build_config
from vigor_cli.errors import UserError


def pc(**options) -> dict:
    return {"pilot-commit": options}


def test_a_step_by_hand():
    """B = 2, budget 16, pilot 2 on 4 prompts (8 rollouts). Pilot pass rates: a 1/2 and d 1/2
    pass ([0.125, 0.75]); b 0/2 is deferred, c 2/2 skipped. The 8 left go to a and d, 4 each;
    the update holds a and d with their 6 rollouts each, not b or c."""
    alloc = make_allocator(cfg("pilot-commit", budget=16), 2, seed=0)
    table = {"a": [1, 0, 1, 1, 0, 0], "b": [0, 0], "c": [1, 1], "d": [0, 1, 1, 1, 1, 1]}
    result, asks = run_step(alloc, 0, fixed_draw(["a", "b", "c", "d"]), scripted(table))
    assert asks == [{"a": 2, "b": 2, "c": 2, "d": 2}, {"a": 4, "d": 4}]
    assert result.groups == {"a": list(range(6)), "d": list(range(6))}
    rec = result.record
    assert {p["uid"]: p["pilot"] for p in rec["prompts"]} == {"a": "pass", "b": "deferred", "c": "skipped", "d": "pass"}
    assert {p["uid"]: p["rounds"][0]["kept"] for p in rec["prompts"]} == {"a": True, "b": False, "c": False, "d": True}
    totals = rec["totals"]
    assert totals["rollouts"] == totals["budget"] == 16 and totals["in_update"] == 2
    assert totals["pilot_commit"] == {"piloted": 4, "passed": 2, "deferred": 1, "skipped": 1, "evicted_now": 0,
                                      "committed": 2, "commit_rollouts": 8, "unspent": 0, "evicted_total": 0,
                                      "mean_pilot_reward": 0.5}
    json.dumps(rec, allow_nan=False)


def test_unscored_rollouts_still_count_as_spent_and_the_pilot_mean_is_over_scored_ones():
    """b's pilot comes back unscored (a reward function's None): deferred, but its 2 rollouts
    were generated, so the budget is spent in full (unspent 0, not 2); the pilot's mean reward is
    over the 6 scored pilot rewards (4/6), not over 8 with the unscored read as 0."""
    alloc = make_allocator(cfg("pilot-commit", budget=16), 2, seed=0)
    table = {"a": [1, 0, 1, 1, 0, 0], "b": [None, None], "c": [1, 1], "d": [0, 1, 1, 1, 1, 1]}
    alloc.start_step(0, fixed_draw(["a", "b", "c", "d"]))
    asks, seen = [], {}
    while requests := alloc.ask():  # as the trainer tells: an unscored rollout is not told
        asks.append({r.uid: r.n for r in requests})
        told = {}
        for r in requests:
            got = table[r.uid][seen.get(r.uid, 0): seen.get(r.uid, 0) + r.n]
            seen[r.uid] = seen.get(r.uid, 0) + r.n
            told[r.uid] = [x for x in got if x is not None]
        alloc.tell(told)
    result = alloc.finish()
    assert asks == [{"a": 2, "b": 2, "c": 2, "d": 2}, {"a": 4, "d": 4}]
    assert result.record["totals"]["rollouts"] == 16
    totals = result.record["totals"]["pilot_commit"]
    assert totals["unspent"] == 0 and totals["commit_rollouts"] == 8 and totals["deferred"] == 1
    assert totals["mean_pilot_reward"] == pytest.approx(4 / 6, abs=1e-6)


def test_commits_the_most_varied_and_keeps_the_rest_of_the_passing_pilots():
    """Pilot of 4 on 4 prompts (B = 2): pass rates 2/4 (a, var 0.25), 1/4 (b, 0.1875),
    3/4 (c, 0.1875), 2/4 (d, 0.25). a and d are committed (largest variance); b and c pass
    but exceed the batch: the update uses their pilot rollouts; 32 - 16 = 16 left, 8 each."""
    alloc = make_allocator(cfg("pilot-commit", budget=32, **pc(pilot=4)), 2, seed=3)
    table = {"a": [1, 0, 1, 0] + [1] * 8, "b": [1, 0, 0, 0], "c": [1, 1, 1, 0], "d": [0, 0, 1, 1] + [0] * 8}
    result, asks = run_step(alloc, 0, fixed_draw(["a", "b", "c", "d"]), scripted(table))
    assert asks[1] == {"a": 8, "d": 8}
    assert result.groups == {"a": list(range(12)), "b": [0, 1, 2, 3], "c": [0, 1, 2, 3], "d": list(range(12))}


def test_a_commit_is_capped_and_an_empty_pilot_spends_nothing_more():
    # one passing prompt of 4: it may have at most max_rollouts = 6 in all -> 4 more; 4 unspent
    alloc = make_allocator(cfg("pilot-commit", budget=16, **pc(max_rollouts=6)), 2, seed=0)
    table = {"a": [1, 0, 1, 1, 1, 1], "b": [0, 0], "c": [1, 1], "d": [0, 0]}
    result, asks = run_step(alloc, 0, fixed_draw(["a", "b", "c", "d"]), scripted(table))
    assert asks[1] == {"a": 4} and result.record["totals"]["pilot_commit"]["unspent"] == 4
    # nothing passes: no commit; the update has every pilot (all zero-variance, no gradient)
    alloc = make_allocator(cfg("pilot-commit", budget=16), 2, seed=0)
    result, asks = run_step(alloc, 0, fixed_draw(["a", "b", "c", "d"]), lambda u, i: 0.0)
    assert len(asks) == 1 and set(result.groups) == {"a", "b", "c", "d"}
    assert result.record["totals"]["rollouts"] == 8 and result.record["totals"]["pilot_commit"]["unspent"] == 8


def test_solved_prompts_are_evicted_and_skipped_later():
    """evict_after 4 with a pilot of 2: a prompt all-correct in two visits is evicted; drawn
    again it gets no rollouts and its pilot share goes to the commit."""
    alloc = make_allocator(cfg("pilot-commit", budget=16, **pc(evict_after=4)), 2, seed=0)
    table = {"a": [1] * 40, "b": [1, 0] * 20, "c": [0, 1] * 20, "d": [1, 0] * 20}
    draw = fixed_draw(["a", "b", "c", "d"])
    first, _ = run_step(alloc, 0, draw, scripted(table))
    assert first.record["totals"]["pilot_commit"]["evicted_total"] == 0 and alloc.streak["a"] == 2
    second, _ = run_step(alloc, 1, draw, scripted(table))
    assert second.record["totals"]["pilot_commit"]["evicted_now"] == 1 and alloc.evicted == {"a"}
    third, asks = run_step(alloc, 2, draw, scripted(table))
    assert asks[0] == {"b": 2, "c": 2, "d": 2}  # a is skipped
    entry = next(p for p in third.record["prompts"] if p["uid"] == "a")
    assert entry["evicted"] is True and entry["rollouts"] == 0 and not entry["in_update"]
    # b, c, d pass; two are committed (B = 2) with the 10 left: 5 each
    assert sum(asks[1].values()) == 10 and len(asks[1]) == 2
    assert third.record["totals"]["rollouts"] == 16
    # a mixed pilot resets the streak
    assert alloc.streak["b"] == 0


@pytest.mark.parametrize("trial", range(40))
def test_budget_is_never_exceeded(trial):
    rng = random.Random(trial)
    B = rng.randint(1, 10)
    lower = rng.choice([0.0, 0.125, 0.3])
    options = dict(pilot=rng.randint(1, 4), width=rng.choice([1.0, 1.5, 2.0, 3.0]), lower=lower,
                   upper=rng.choice([0.0, 0.25, min(0.5, 1 - lower)]), max_rollouts=rng.randint(4, 40),
                   evict_after=rng.choice([0, 2, 4]))
    floor = options["pilot"] * max(1, -(-int(options["width"] * B * 1000) // 1000))
    budget = rng.randint(floor, floor + 12 * B)
    alloc = make_allocator(cfg("pilot-commit", budget=budget, **pc(**options)), B, seed=trial)
    rates: dict[str, float] = {}

    def reward(uid, i):
        rate = rates.setdefault(uid, rng.choice([0.0, 1.0, 0.5, rng.random()]))
        return float(rng.random() < rate)

    sampler = Counter(pool=4 * B)
    for step in range(4):
        result, asks = run_step(alloc, step, sampler.draw, reward)
        spent = sum(sum(a.values()) for a in asks)
        assert spent == result.record["totals"]["rollouts"] <= budget
        per = {u: sum(a.get(u, 0) for a in asks) for a in asks for u in a}
        assert max(per.values()) <= max(options["max_rollouts"], options["pilot"])
        assert len(asks) <= 2 and (len(asks) < 2 or len(asks[1]) <= B)
        for uid, idx in result.groups.items():
            assert idx == list(range(per[uid]))


def test_state_round_trip_and_resume():
    """state_dict between steps (RNG, streaks, evicted prompts) -> a fresh allocator continues
    exactly as the original: the same asks and records."""
    options = pc(evict_after=2)
    rates = {f"p{i}": [1.0, 0.0, 0.5, 0.3, 0.8, 1.0][i % 6] for i in range(12)}

    def reward(uid, i):
        return float(random.Random(f"{uid}-{i}").random() < rates[uid])

    original = make_allocator(cfg("pilot-commit", budget=24, **options), 3, seed=5)
    sampler = Counter(pool=12)
    for step in range(3):
        run_step(original, step, sampler.draw, reward)
    state = json.loads(json.dumps(original.state_dict()))  # what allocator.json holds
    assert state["strategy"] == "pilot-commit" and state["evicted"]
    resumed = make_allocator(cfg("pilot-commit", budget=24, **options), 3, seed=999)
    resumed.load_state_dict(state)
    twin = Counter(pool=12)
    twin.next = sampler.next
    for step in range(3, 6):
        a, a_asks = run_step(original, step, sampler.draw, reward)
        b, b_asks = run_step(resumed, step, twin.draw, reward)
        assert a_asks == b_asks and a.record == b.record and a.groups == b.groups
    with pytest.raises(UserError, match="allocator state is for strategy 'pilot-commit'"):
        make_allocator(cfg("auto"), 3, seed=0).load_state_dict(state)


@pytest.mark.parametrize("sets, needle", [
    (["allocation.pilot-commit={lower: 0.6, upper: 0.5}"], "allocation.pilot-commit.lower (0.6) must be <= 1 - allocation.pilot-commit.upper"),
    (["allocation.pilot-commit.max_rollouts=1"], "allocation.pilot-commit.max_rollouts (1) must be >= allocation.pilot-commit.pilot (2)"),
    (["allocation.rollouts_per_prompt=3"], "allocation.budget (192) is below pilot-commit's pilot, the first round"),
    (["allocation.pilot-commit.pilot=0"], "'allocation.pilot-commit.pilot': Input should be greater than or equal to 1"),
])
def test_bad_settings_name_the_keys(sets, needle):
    with pytest.raises(ConfigError) as e:
        build_config(sets=["allocation.strategy=pilot-commit", *sets])
    assert needle in str(e.value)
