"""knapsack, reinforce-ada and auto: hand-worked steps, their estimators, budgets, state."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from test_allocation import Counter, bernoulli, run_step
from vigor_cli.allocation import make_allocator
from vigor_cli.allocation.ada import balanced_subset
from vigor_cli.allocation.auto import AutoAllocator
from vigor_cli.allocation.estimate import (
    beta_binomial_pmf,
    beta_zero_variance,
    expected_signal,
    fit_beta_prior,
    hill_tail_index,
    knapsack_value,
    pair_disagreement,
    pareto_eta,
)
from vigor_cli.allocation.knapsack import greedy_knapsack
from vigor_cli.config import AllocationConfig
from vigor_cli.errors import UserError


def cfg(strategy: str, **kw) -> AllocationConfig:
    return AllocationConfig(strategy=strategy, **kw)


def scripted(table: dict[str, list[float]]):
    """reward_of(uid, i) reading a per-prompt list of rewards in generation order."""
    return lambda uid, i: table[uid][i]


def fixed_draw(uids: list[str]):
    return lambda n: uids[:n]


# --------------------------------------------------------------------------- estimators
def test_knapsack_value_is_the_papers_formula():
    # V(n, p) = (1 - p^n - (1-p)^n) * p (1-p)^2
    assert knapsack_value(0.5, 2) == pytest.approx(0.5 * 0.125)
    assert knapsack_value(0.25, 3) == pytest.approx((1 - 0.25**3 - 0.75**3) * 0.25 * 0.75**2)
    assert knapsack_value(0.0, 8) == 0.0 and knapsack_value(1.0, 8) == 0.0
    assert knapsack_value(0.3, 1) == 0.0  # one rollout is never a mixed group


def test_beta_binomial_and_expected_signal_by_hand():
    # Beta(2, 2): P(K=0..2 of 2) = 0.3, 0.4, 0.3 (B(2,4)/B(2,2) = (1/20)/(1/6))
    assert beta_binomial_pmf(2, 2.0, 2.0) == pytest.approx([0.3, 0.4, 0.3])
    assert sum(beta_binomial_pmf(9, 0.3, 1.7)) == pytest.approx(1.0)
    # seen 1 of 2 correct, 2 more under Beta(2, 2): sqrt(3), 2, sqrt(3) with those weights
    assert expected_signal(1, 2, 2, (2.0, 2.0)) == pytest.approx(0.6 * math.sqrt(3) + 0.8)
    assert expected_signal(1, 2, 0, (2.0, 2.0)) == pytest.approx(1.0)  # sqrt(1 * 1)
    assert expected_signal(0, 2, 0, (1.0, 3.0)) == 0.0


def test_fit_beta_prior_recovers_the_moments():
    # Beta(2, 6): mean 1/4, E[p(1-p)] = ab / ((a+b)(a+b+1)) = 12 / 72 = 1/6
    a, b = fit_beta_prior(0.25, 2 * (1 / 6), 2)
    assert (a, b) == pytest.approx((2.0, 6.0))
    flat = fit_beta_prior(0.5, 0.5, 2)  # disagreement at its binomial maximum: no spread
    assert sum(flat) == pytest.approx(1000.0)
    u = fit_beta_prior(0.5, 0.0, 2)  # never mixed: all mass at 0 and 1
    assert sum(u) == pytest.approx(0.05)
    assert fit_beta_prior(0.0, 0.0, 2) == (1.0, 1.0)
    assert pair_disagreement([1, 0]) == 1.0 and pair_disagreement([1, 1, 0, 0]) == pytest.approx(8 / 12)


def test_hill_tail_index_on_pareto_quantiles():
    for k in (1.2, 2.0, 4.0):
        values = [(1 - (i + 0.5) / 4000) ** (-1 / k) for i in range(4000)]  # Pareto(k, 1) quantiles
        assert hill_tail_index(values, tail=0.1) == pytest.approx(k, rel=0.05)
    assert hill_tail_index([0.25] * 10) == math.inf
    assert hill_tail_index([0.1, 0.0]) is None
    assert pareto_eta(1.5, 4, 0.5, 2.0) == pytest.approx(2.28, abs=0.01)


# --------------------------------------------------------------------------- knapsack
@pytest.mark.parametrize("trial", range(12))
def test_greedy_knapsack_matches_exhaustive_search(trial):
    rng = random.Random(trial)
    items = [f"u{i}" for i in range(rng.randint(1, 4))]
    p = {u: rng.choice([0.05, 0.2, 1 / 3, 0.5, 0.8, 0.97]) for u in items}
    start = {u: 2 for u in items}
    cap, budget = rng.randint(3, 7), rng.randint(0, 10)
    extra = greedy_knapsack(lambda u, n: knapsack_value(p[u], n + 1) - knapsack_value(p[u], n),
                            items, start, cap, budget, {u: rng.random() for u in items})
    assert sum(extra.values()) == min(budget, len(items) * (cap - 2))
    best = max(
        sum(knapsack_value(p[u], 2 + k) for u, k in zip(items, ks))
        for ks in itertools.product(range(cap - 1), repeat=len(items))
        if sum(ks) == min(budget, len(items) * (cap - 2))
    )
    assert sum(knapsack_value(p[u], 2 + extra[u]) for u in items) == pytest.approx(best, abs=1e-12)


def test_knapsack_step_by_hand():
    # Round 1: a gets 1,0 -> Beta(1+1, 1+1): p = 1/2; b gets 0,0 -> Beta(1, 3): p = 1/4.
    # Marginal values V(n+1,p) - V(n,p), V = (1 - p^n - (1-p)^n) p (1-p)^2:
    #   a: 2->3 0.03125, 3->4 0.015625;  b: 2->3 0.02637, 3->4 0.01648, 4->5 0.01154.
    # 4 rollouts left: a, b, b, a -> 2 more each.
    alloc = make_allocator(cfg("knapsack", budget=8), 2, seed=0)
    table = {"a": [1, 0, 1, 1], "b": [0, 0, 0, 1]}
    result, asks = run_step(alloc, 0, fixed_draw(["a", "b"]), scripted(table))
    assert asks == [{"a": 2, "b": 2}, {"a": 2, "b": 2}]
    rec = result.record
    notes = {p["uid"]: (p["p_hat"], p["planned"]) for p in rec["prompts"]}
    assert notes == {"a": (0.5, 4), "b": (0.25, 4)}
    assert rec["totals"]["rollouts"] == rec["totals"]["budget"] == 8
    assert result.groups == {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3]}
    # Step 2: the history (a: 1,0,1,1; b: 0,0,0,1) joins the prior. a answers 1,1 and b 0,0:
    # a: Beta(1 + 3 + 2, 1 + 1) -> 6/8; b: Beta(1 + 1, 1 + 3 + 2) -> 2/8.
    alloc.start_step(1, fixed_draw(["a", "b"]))
    alloc.ask()
    alloc.tell({"a": [1, 1], "b": [0, 0]})
    assert [alloc._notes[u]["p_hat"] for u in ("a", "b")] == [0.75, 0.25]
    # p = 1/4 has the larger value at every n than p = 3/4 (InfoGain 0.14 vs 0.047): b first
    second = {r.uid: r.n for r in alloc.ask()}
    assert second["b"] > second.get("a", 0)


def test_knapsack_bounds_and_errors():
    alloc = make_allocator(cfg("knapsack", budget=100, knapsack={"max": 5}), 4, seed=0)
    result, asks = run_step(alloc, 0, Counter().draw, bernoulli)
    assert all(len(g) == 5 for g in result.groups.values())  # every prompt at its cap: 20 of 100
    assert result.record["totals"]["rollouts"] == 20
    with pytest.raises(UserError, match=r"knapsack\.min"):
        make_allocator(cfg("knapsack", budget=7), 4, seed=0)
    with pytest.raises(UserError, match=r"knapsack\.max"):
        make_allocator(cfg("knapsack", knapsack={"max": 1}), 4, seed=0)
    from vigor_cli.config import ConfigError
    from vigor_cli.settings import build_config
    with pytest.raises(ConfigError, match=r"knapsack\.max"):
        build_config(sets=["allocation.strategy=knapsack", "allocation.knapsack.max=1"])


# --------------------------------------------------------------------------- reinforce-ada
@pytest.mark.parametrize(
    "positive, keep, variant, resolved, expected",
    [
        ([1, 0, 1, 1, 0, 0], 4, "balanced", True, [0, 1, 2, 4]),  # earliest 2 of each class
        ([1, 1, 1, 0], 4, "balanced", False, [0, 1, 2, 3]),  # one negative: filled by positives
        ([0, 0, 0, 0, 0], 4, "balanced", False, [0, 1, 2, 3]),  # all negative: earliest 4
        ([1, 0], 4, "balanced", False, [0, 1]),  # fewer than keep: all
        ([0, 1, 0, 0, 0, 1, 0, 0], 4, "positive", False, [0, 1, 2, 3]),  # 1 pos + 3 neg (ratio 1/4)
        ([1, 1, 1, 1, 1, 1, 0, 1], 4, "positive", False, [0, 1, 2, 6]),  # ceil(7/8*4)=4 -> 3 pos + 1 neg
        ([0, 0, 1, 1, 1], 3, "balanced", True, [0, 1, 2]),  # n = 3: 1 positive, 2 negatives
    ],
)
def test_reinforce_ada_update_subset(positive, keep, variant, resolved, expected):
    assert balanced_subset([bool(p) for p in positive], keep, variant, resolved) == expected


def test_reinforce_ada_step_by_hand():
    # a always right, b alternates, c always wrong; M = 4, n = 4, budget 40, 4 rounds.
    table = {"a": [1] * 16, "b": [1, 0] * 8, "c": [0] * 16}
    alloc = make_allocator(cfg("reinforce-ada", budget=40), 3, seed=0)
    result, asks = run_step(alloc, 0, fixed_draw(["a", "b", "c"]), scripted(table))
    # b holds 2 positives and 2 negatives after round 1 and stops; a and c never do
    assert asks == [{"a": 4, "b": 4, "c": 4}, {"a": 4, "c": 4}, {"a": 4, "c": 4}, {"a": 4, "c": 4}]
    rec = result.record
    assert rec["totals"]["rollouts"] == 36 and rec["totals"]["used"] == 12
    assert rec["totals"]["resolved"] == 1 and rec["totals"]["cut"] is None
    assert result.groups == {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3], "c": [0, 1, 2, 3]}
    b = next(p for p in rec["prompts"] if p["uid"] == "b")
    assert b["rounds"][0]["kept"] is False and b["rounds"][0]["reason"] == "resolved"
    a = next(p for p in rec["prompts"] if p["uid"] == "a")
    assert a["rollouts"] == 16 and a["used"] == 4 and a["used_idx"] == [0, 1, 2, 3]
    # the same step under a budget of 30: round 4 would cost 8 with 2 left -> 1 each, the cap holds
    alloc = make_allocator(cfg("reinforce-ada", budget=30), 3, seed=0)
    result, asks = run_step(alloc, 0, fixed_draw(["a", "b", "c"]), scripted(table))
    assert asks[-1] == {"a": 1, "c": 1}
    assert result.record["totals"]["rollouts"] == 30
    assert result.record["totals"]["cut"] == {"round": 4, "planned": 8, "spent": 2}


def test_reinforce_ada_balanced_group_and_positive_exit():
    # d: 0,0,0,1 then 1,1,0,0 -> after round 2 it holds 3 positives, 5 negatives: resolved;
    # the update takes the earliest 2 of each: positives 3, 4; negatives 0, 1.
    table = {"d": [0, 0, 0, 1, 1, 1, 0, 0]}
    result, asks = run_step(make_allocator(cfg("reinforce-ada"), 1, 0), 0, fixed_draw(["d"]), scripted(table))
    assert [sum(a.values()) for a in asks] == [4, 4]
    assert result.groups == {"d": [0, 1, 3, 4]}
    # the 'positive' exit stops at the first positive (round 1 here)
    alloc = make_allocator(cfg("reinforce-ada", **{"reinforce-ada": {"exit": "positive"}}), 1, 0)
    result, asks = run_step(alloc, 0, fixed_draw(["d"]), scripted(table))
    assert len(asks) == 1 and result.groups == {"d": [0, 1, 2, 3]}


# --------------------------------------------------------------------------- auto
def census_rewards(kind: str, uid: str, i: int) -> float:
    """'flat': every prompt near 1/2 (1,0 then alternating); 'heavy': 7 of 8 prompts
    all-wrong or all-right, one in eight mixed."""
    k = int(uid[1:])
    if kind == "flat":
        return float((i + k) % 2)
    if k % 8 == 0:
        return float(i % 2)
    return float(k % 2)


@pytest.mark.parametrize("kind, expected", [("flat", "wide"), ("heavy", "deep")])
def test_auto_goes_wide_when_flat_and_deep_when_heavy(kind, expected):
    alloc = make_allocator(cfg("auto"), 16, seed=0)  # census 32 prompts x 2, budget 128
    sampler = Counter(pool=32)  # the same 32 prompts every step: each comes back
    reward = lambda u, i: census_rewards(kind, u, i)  # noqa: E731
    first, _ = run_step(alloc, 0, sampler.draw, reward)
    # step 1: no prompt has come back yet, so depth cannot pay back: breadth either way
    assert first.record["totals"]["auto"]["decision"] == "wide"
    assert first.record["totals"]["auto"]["census"]["seen_before"] == 0.0
    result, asks = run_step(alloc, 1, sampler.draw, reward)
    auto = result.record["totals"]["auto"]
    assert auto["census"]["seen_before"] == 1.0
    assert auto["decision"] == expected
    assert auto["reason"].startswith(expected)
    assert result.record["totals"]["rollouts"] == 128
    assert asks[0] == {f"p{i}": 2 for i in range(32)}
    extra = asks[1]
    if expected == "wide":
        assert set(extra.values()) == {2} and len(extra) == 32  # 2 more for every prompt
        assert auto["census"]["zero_var_share"] == 0.0
    else:
        assert set(extra) <= {f"p{i}" for i in range(0, 32, 8)}  # only the mixed prompts
        assert sum(extra.values()) == 64 and max(extra.values()) <= 30  # auto.max_rollouts 32
        assert auto["census"]["zero_var_share"] == pytest.approx(28 / 32)
        assert auto["signal"]["deep"] >= auto["margin"] * auto["signal"]["wide"]
    json.dumps(result.record, allow_nan=False)  # strict JSON: no inf/nan in the record


def test_beta_zero_variance_by_hand():
    """E[p^n + (1 - p)^n] under Beta(a, b): the share of all-equal groups of n."""
    assert beta_zero_variance((1.0, 1.0), 4) == pytest.approx(2 / 5)  # uniform: 2 / (n + 1)
    # Beta(2, 3), n = 2: E[p^2] = 2*3/(5*6) = 0.2, E[(1-p)^2] = 3*4/(5*6) = 0.4
    assert beta_zero_variance((2.0, 3.0), 2) == pytest.approx(0.6)
    assert beta_zero_variance((1e5, 1e5), 3) == pytest.approx(0.25, rel=1e-3)  # every p = 1/2: 2 / 2^3
    assert beta_zero_variance((0.01, 0.01), 4) > 0.95  # pass rates at 0 or 1
    assert beta_zero_variance((0.3, 0.7), 1) == 1.0


def test_auto_goes_deep_on_a_saturated_law_even_when_no_prompt_comes_back():
    """Fresh prompts every step, 28 of 32 census prompts all-wrong or all-right: the old rule
    (depth counts only for prompts that recur) stays wide; past the warm-up the law is
    saturated (the wide plan's groups of 4 would be nearly all all-equal), so depth counts
    and the deep plan puts the rest of the budget on the mixed prompts."""
    alloc = make_allocator(cfg("auto", auto={"warmup": 2, "saturated": 0.7}), 16, seed=0)
    sampler = Counter()  # never repeats a prompt
    decisions = []
    for step in range(4):
        result, asks = run_step(alloc, step, sampler.draw, lambda u, i: census_rewards("heavy", u, i))
        auto = result.record["totals"]["auto"]
        decisions.append(auto["decision"])
        assert auto["census"]["seen_before"] == 0.0
        assert auto["census"]["histogram"] == [12, 4, 16]  # successes 0, 1, 2 of the census's 2
        assert auto["law"]["wide_rollouts"] == 4 and auto["law"]["warm"] == (step >= 2)
    assert decisions == ["wide", "wide", "deep", "deep"]
    # the census law (EMA of its moments) fitted as Beta(0.19, 0.15): 77 % of groups of 4 all-equal
    assert auto["law"]["saturated"] and auto["law"]["zero_var_at_wide"] == pytest.approx(0.7719, abs=1e-4)
    assert auto["depth_weight"] == 1.0
    assert "law saturated" in auto["reason"]
    mixed = {u for u in asks[0] if int(u[1:]) % 8 == 0}
    assert set(asks[1]) <= mixed and sum(asks[1].values()) == 64
    # the same law with the saturation rule off (saturated: 1, the default) stays wide: nothing recurs
    alloc = make_allocator(cfg("auto", auto={"warmup": 2, "saturated": 1.0}), 16, seed=0)
    sampler = Counter()
    for step in range(4):
        result, _ = run_step(alloc, step, sampler.draw, lambda u, i: census_rewards("heavy", u, i))
        assert result.record["totals"]["auto"]["decision"] == "wide"
        assert "saturation rule off" in result.record["totals"]["auto"]["reason"]


def test_auto_stays_wide_on_a_flat_law():
    alloc = make_allocator(cfg("auto", auto={"warmup": 1, "saturated": 0.8}), 16, seed=0)
    sampler = Counter()
    for step in range(3):
        result, asks = run_step(alloc, step, sampler.draw, lambda u, i: census_rewards("flat", u, i))
        auto = result.record["totals"]["auto"]
        assert auto["decision"] == "wide" and not auto["law"]["saturated"]
        assert auto["law"]["zero_var_at_wide"] < 0.5 and set(asks[1].values()) == {2}


def test_auto_plan_by_hand():
    """Two census prompts (mixed x: 1,0; all-wrong y: 0,0), 4 rollouts left, max 32.
    Prior: mean 1/4, disagreement (1 + 0) / 2 = 1/2: Var(p) = 3/16 - 1/4 < 0 -> no spread,
    a + b = 1000: Beta(250, 750). Posteriors: x Beta(251, 751), y Beta(250, 752).
    No prompt has history (r = 0), so a prompt with 2 + k rollouts scores
    n_bar x E[(2+k) x std] / (2+k), n_bar = (2 x 2 + 4) / 2 = 4. wide gives 2 + 2; deep the
    split of the 4 with the best score. With history for both (r = 1) the score is E[n x std]."""
    post = {"x": (251.0, 751.0), "y": (250.0, 752.0)}
    succ = {"x": 1, "y": 0}

    def score(u, k, r):
        d = expected_signal(succ[u], 2, k, post[u])
        return r * d + (1 - r) * 4 * d / (2 + k)

    for r, history in ((0, {}), (1, {"x": [1.0, 0.0], "y": [0.0, 0.0]})):
        alloc = AutoAllocator(1, 0, budget=8, width=2, census=2, margin=1.25, max_rollouts=32, history=16)
        alloc.history = history
        if history:  # the posteriors above are for no history: rebuild them with it
            post = {"x": (250.0 + 2, 750.0 + 2), "y": (250.0, 750.0 + 4)}
        plan = alloc.plan({"x": [1.0, 0.0], "y": [0.0, 0.0]})
        rec = plan["record"]
        assert rec["prior"] == [250.0, 750.0] and rec["census"]["seen_before"] == r
        wide = score("x", 2, r) + score("y", 2, r)
        assert rec["signal"]["wide"] == pytest.approx(wide, abs=1e-4)
        best = max(score("x", k, r) + score("y", 4 - k, r) for k in range(5))
        assert rec["signal"]["deep"] == pytest.approx(best, abs=1e-4)
        assert sum(plan["extra"].values()) == 4
        assert rec["decision"] == ("deep" if best >= 1.25 * wide else "wide")


@pytest.mark.parametrize("strategy", ["knapsack", "reinforce-ada", "auto"])
def test_budget_is_never_exceeded_over_random_settings(strategy):
    for trial in range(60):
        rng = random.Random(trial)
        B = rng.randint(1, 12)
        extra = {}
        if strategy == "knapsack":
            extra = dict(min=rng.randint(1, 3), max=rng.randint(3, 40))
            floor = extra["min"] * B
        elif strategy == "reinforce-ada":
            extra = dict(round_size=rng.randint(1, 8), rounds=rng.randint(1, 6), keep=rng.randint(1, 6))
            floor = 1
        else:
            extra = dict(width=rng.choice([1.0, 1.5, 2.0, 3.0]), census=rng.randint(1, 3),
                         max_rollouts=rng.randint(4, 40), margin=rng.choice([0.5, 1.25, 3.0]))
            floor = extra["census"] * math.ceil(extra["width"] * B - 1e-9)
        budget = rng.randint(floor, floor + 12 * B)
        alloc = make_allocator(cfg(strategy, budget=budget, **{strategy: extra}), B, seed=trial)
        rates = {}

        def reward(uid, i):
            rate = rates.setdefault(uid, rng.choice([0.0, 1.0, 0.5, rng.random()]))
            return float(rng.random() < rate)

        sampler = Counter(pool=5 * B)
        for step in range(3):
            result, asks = run_step(alloc, step, sampler.draw, reward)
            spent = sum(sum(a.values()) for a in asks)
            assert spent == result.record["totals"]["rollouts"] <= budget
            for uid, idx in result.groups.items():
                pool = sum(a.get(uid, 0) for a in asks)
                assert idx == sorted(set(idx)) and all(0 <= i < pool for i in idx)
            if strategy == "knapsack":
                per = {u: sum(a.get(u, 0) for a in asks) for u in asks[0]}
                assert all(extra["min"] <= n <= max(extra["max"], extra["min"]) for n in per.values())
                if max(per.values()) < extra["max"]:
                    assert spent == budget  # exactly the budget unless every prompt is capped
            if strategy == "auto":
                assert max(sum(a.get(u, 0) for a in asks) for u in asks[0]) <= extra["max_rollouts"]


def test_auto_errors():
    with pytest.raises(UserError, match="auto's census"):
        make_allocator(cfg("auto", budget=10), 4, seed=0)  # census 8 x 2 = 16
    from vigor_cli.config import ConfigError
    from vigor_cli.settings import build_config
    with pytest.raises(ConfigError, match=r"auto\.max_rollouts"):
        build_config(sets=["allocation.strategy=auto", "allocation.auto.max_rollouts=1"])


def test_every_strategy_is_registered_everywhere():
    from vigor_cli.allocation import STRATEGIES
    from vigor_cli.config import AllocationConfig as A

    assert len(STRATEGIES) == 11
    for name in STRATEGIES:  # the config accepts every registered name; the registry builds it
        assert make_allocator(A(strategy=name), 4, seed=0).name == name
    with pytest.raises(ValueError, match="known: vigor, random, difficulty, grpo"):
        make_allocator(A(strategy="nosuch"), 4, seed=0)  # the registry refuses the name
    from vigor_cli.settings import build_config

    with pytest.raises(ValueError, match="known: vigor, random, difficulty, grpo"):
        build_config(sets=["allocation.strategy=nosuch"])  # and so does every built config
