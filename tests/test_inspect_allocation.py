"""`vigor inspect-allocation` on records written by the real allocators (driven with
Bernoulli rewards, as the trainer drives them with verifier rewards).
tests/test_report_run.py covers a real training run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from vigor_cli.allocation import make_allocator
from vigor_cli.config import AllocationConfig
from vigor_cli.errors import UserError
from vigor_cli.report.allocation import load_allocation, summarize_step


def write_allocation_run(path: Path, strategy: str, steps: int = 4, prompts: int = 16,
                         partial_tail: bool = False) -> Path:
    """allocation.jsonl as the trainer writes it: the allocator's record plus step and text."""
    path.mkdir(parents=True)
    cfg = AllocationConfig(strategy=strategy)
    alloc = make_allocator(cfg, prompts, seed=0)
    rng = random.Random(1)
    pass_rate: dict[str, float] = {}
    lines = []
    for step in range(1, steps + 1):
        def draw(n: int) -> list[str]:
            uids = [f"s{step}p{len(pass_rate) + i}" for i in range(n)]
            for u in uids:  # a mix of unsolvable, solved and in-between prompts
                pass_rate[u] = rng.choice([0.0, 1.0, 0.5, rng.random()])
            return uids
        alloc.start_step(step, draw)
        while requests := alloc.ask():
            alloc.tell({r.uid: [float(rng.random() < pass_rate[r.uid]) for _ in range(r.n)]
                        for r in requests})
        record = {"step": step, **alloc.finish().record}
        for p in record["prompts"]:
            p["text"] = f"Question {p['uid']}: what is 3 + 4?"
        lines.append(json.dumps(record))
    text = "\n".join(lines) + "\n"
    if partial_tail:
        text += lines[0][:40]  # the next record, half written
    (path / "allocation.jsonl").write_text(text)
    (path / "config.yaml").write_text(yaml.safe_dump(
        {"allocation": cfg.model_dump(), "train": {"prompts_per_step": prompts}}))
    return path


def test_vigor_step_summary_matches_the_record(tmp_path):
    run = write_allocation_run(tmp_path / "run", "vigor")
    steps, notes = load_allocation(run, yaml.safe_load((run / "config.yaml").read_text()))
    assert [s.step for s in steps] == [1, 2, 3, 4] and notes == []
    for s in steps:
        summary = summarize_step(s)
        raw = json.loads((run / "allocation.jsonl").read_text().splitlines()[s.step - 1])
        assert summary["rollouts"] == raw["totals"]["rollouts"] == 128  # 8 x 16, exactly
        assert summary["budget"] == 128
        assert summary["grpo_per_prompt"] == 8.0
        assert summary["max_per_prompt"] == 30 and summary["min_per_prompt"] == 2
        # the top 2 of 16 prompts (10 %, rounded up) got the full 30 each
        assert summary["top10_share"] == pytest.approx(60 / 128)
        zero = sum(1 for p in raw["prompts"] if len(set(p["rounds"][0]["rewards"] +
                   [x for r in p["rounds"][1:] for x in r["rewards"]])) == 1)
        assert summary["zero_var_frac"] == pytest.approx(zero / 16)
        # VIGOR keeps the highest pool variance: prompts given more never have less on average
        if summary["mean_var_none"] is not None:
            assert summary["mean_var_more"] >= summary["mean_var_none"]
        statuses = [p.status for p in s.prompts]
        assert statuses.count("kept") == 2
        assert sum(st.startswith("dropped@1") for st in statuses) == 8


def test_cli_tables_json_and_partial_line(tmp_path, vigor):
    run = write_allocation_run(tmp_path / "run", "vigor", partial_tail=True)
    code, out, err = vigor("inspect-allocation", str(run))
    assert code == 0, err
    assert "partial last line 5" in err
    assert "step 4 (vigor)" in out and "step 3 (vigor)" not in out
    assert "128 of 128 rollouts" in out and "overview: 4 steps" in out
    assert "Question s4p" in out  # the prompt text column

    code, out, err = vigor("inspect-allocation", str(run), "--last", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [s["summary"]["step"] for s in data["steps"]] == [3, 4]
    assert len(data["overview"]) == 4 and data["notes"]
    first = data["steps"][0]["prompts"][0]
    assert {"uid", "text", "total", "status", "rounds"} <= set(first)

    code, out, err = vigor("inspect-allocation", str(run), "--step", "2", "--json")
    assert [s["summary"]["step"] for s in json.loads(out)["steps"]] == [2]


@pytest.mark.parametrize("strategy", ["grpo", "dapo", "greso", "pods", "knapsack", "reinforce-ada", "auto"])
def test_other_strategies(tmp_path, strategy, vigor):
    run = write_allocation_run(tmp_path / "run", strategy, steps=2)
    steps, _ = load_allocation(run, yaml.safe_load((run / "config.yaml").read_text()))
    summary = summarize_step(steps[-1])
    if strategy == "grpo":
        assert summary["top10_share"] == pytest.approx(2 / 16)
        assert summary["rollouts"] == summary["budget"] == 128
    if strategy == "pods":
        assert summary["used"] == 16 * 8 and summary["rollouts"] == 16 * 16
        assert all(p.status == "used 8/16" for p in steps[-1].prompts)
    if strategy in ("dapo", "greso"):
        assert summary["used"] == 16 * 8  # the train batch, filled with non-zero-variance groups
        assert summary["rollouts"] >= summary["used"]
        # no prompt is ever given more rollouts; the filter shows as in update vs left out
        assert summary["given_more"] == 0 and summary["mean_var_more"] is None
        assert summary["left_out"] > 0 and summary["mean_var_in_update"] > 0
    if strategy in ("grpo", "pods"):
        assert summary["given_more"] == 0 and summary["left_out"] == 0
    if strategy in ("knapsack", "auto", "reinforce-ada"):
        assert summary["rollouts"] <= summary["budget"] == 128 and summary["budget_is_cap"]
    if strategy == "reinforce-ada":
        # resolved early (4 of them used), or out of rounds or budget: 4 of its rollouts used
        assert all(p.status.startswith(("resolved@", "used 4/")) for p in steps[-1].prompts)
        assert any(p.status.startswith("resolved@") for p in steps[-1].prompts)
    code, out, err = vigor("inspect-allocation", str(run))
    assert code == 0, err
    if strategy == "auto":
        assert summary["decision"] in ("wide", "deep")
        flat = " ".join(out.split())
        assert summary["decision_reason"][:30] in flat and "plan" in flat
        code, out, err = vigor("inspect-allocation", str(run), "--json")
        payload = json.loads(out)
        assert payload["steps"][0]["summary"]["decision"] == summary["decision"]
        assert payload["overview"][-1]["decision_reason"] == summary["decision_reason"]
    else:
        assert summary["decision"] is None


def test_bad_input(tmp_path, vigor):
    run = write_allocation_run(tmp_path / "run", "vigor", steps=2)
    code, out, err = vigor("inspect-allocation", str(run), "--step", "9")
    assert code == 2 and "--step 9" in err
    code, out, err = vigor("inspect-allocation", str(run), "--step", "1", "--last", "2")
    assert code == 2
    (run / "allocation.jsonl").write_text('{"step": 1, "prompts": [{"uid": "a"}]}\n{"step": 2}\n')
    with pytest.raises(UserError, match="line 1: not an allocation record"):
        load_allocation(run, {})
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    code, out, err = vigor("inspect-allocation", str(empty))
    assert code == 2 and "no allocation.jsonl yet" in err


def test_the_configured_budget_is_vigors_own_key():
    """A record without a budget falls back to the config's: allocation.budget, else
    rollouts_per_prompt x prompts_per_step (GRPO's group_size only for a config from before
    that key), the rule the allocators use (allocation.registry.default_budget)."""
    from vigor_cli.report.allocation import config_budget

    both = {"allocation": {"rollouts_per_prompt": 8, "group_size": 4}, "train": {"prompts_per_step": 16}}
    assert config_budget(both, prompts=99) == 128
    assert config_budget({"allocation": {"group_size": 4}, "train": {"prompts_per_step": 16}}, prompts=99) == 64
    assert config_budget({"allocation": {"budget": 300, "rollouts_per_prompt": 8}}, prompts=16) == 300
    assert config_budget({"allocation": {}}, prompts=16) is None


def test_more_vs_none_is_read_from_the_rounds_for_every_strategy(tmp_path):
    """'given more' means a later round added rollouts to the prompt, 'none' that none did,
    whatever the strategy's own kept flags say (DAPO's mean 'in the batch', Reinforce-Ada's
    dropped ones are resolved prompts)."""
    from vigor_cli.allocation import registry

    for strategy in registry.names():
        run = write_allocation_run(tmp_path / strategy, strategy, steps=2)
        steps, _ = load_allocation(run, {})
        for s in steps:
            more, none = [], []
            by_round: dict[int, list] = {}
            for p in s.prompts:
                for i, r in enumerate(p.rounds):
                    by_round.setdefault(r.round, []).append((r.pool_variance, sum(x.added for x in p.rounds[i + 1:]) > 0))
            for entries in by_round.values():
                if any(later for _, later in entries):
                    more += [v for v, later in entries if later]
                    none += [v for v, later in entries if not later]
            summary = summarize_step(s)
            assert (summary["given_more"], summary["given_none"]) == (len(more), len(none)), strategy
            assert summary["mean_var_more"] == (pytest.approx(sum(more) / len(more)) if more else None), strategy
            assert summary["mean_var_none"] == (pytest.approx(sum(none) / len(none)) if none else None), strategy
            assert summary["rule"] == registry.get(strategy).summary


def write_revisiting_auto_run(path: Path, steps: int = 4) -> Path:
    """An `auto` run whose census covers the same 64 prompts every step (32 per step, census
    width 2): prompts have history, the depth weight is 1 and auto goes deep."""
    path.mkdir(parents=True)
    cfg = AllocationConfig(strategy="auto")
    alloc = make_allocator(cfg, 32, seed=0)
    rng = random.Random(0)
    pool = [f"p{i}" for i in range(64)]
    pass_rate = {u: rng.choice([0.0, 0.0, 1.0, 0.5, 0.3]) for u in pool}
    lines = []
    for step in range(1, steps + 1):
        order = iter(rng.sample(pool, len(pool)))
        alloc.start_step(step, lambda n: [next(order) for _ in range(n)])
        while requests := alloc.ask():
            alloc.tell({r.uid: [float(rng.random() < pass_rate[r.uid]) for _ in range(r.n)] for r in requests})
        lines.append(json.dumps({"step": step, **alloc.finish().record}))
    (path / "allocation.jsonl").write_text("\n".join(lines) + "\n")
    (path / "config.yaml").write_text(yaml.safe_dump({"allocation": cfg.model_dump(), "train": {"prompts_per_step": 32}}))
    return path


def test_auto_says_what_it_decided_in_its_own_terms(tmp_path, vigor):
    """The issue's case: auto's deep plan gave its extras to prompts whose census rewards were
    all equal (pool variance 0) and none to mixed ones; 'kept 0.000 vs dropped 0.050' read as
    if it kept the wrong prompts. The readout now says who got more, by what rule, and what
    auto measured and decided."""
    run = write_revisiting_auto_run(tmp_path / "run")
    steps, _ = load_allocation(run, {})
    last = steps[-1]
    summary = summarize_step(last)
    assert summary["decision"] == "deep"
    record = json.loads((run / "allocation.jsonl").read_text().splitlines()[-1])["totals"]["auto"]
    assert summary["decision_reason"] == record["reason"]
    assert summary["decision_record"] == {k: v for k, v in record.items() if k not in ("decision", "reason")}
    # given more: the prompts with a round 2; their census variance, as recorded
    census = {p["uid"]: p["rounds"][0]["var"] for p in record_prompts(run, -1)}
    extra = {p["uid"] for p in record_prompts(run, -1) if len(p["rounds"]) > 1}
    assert summary["given_more"] == len(extra) and summary["given_none"] == len(census) - len(extra)
    assert summary["mean_var_more"] == pytest.approx(sum(census[u] for u in extra) / len(extra))
    assert summary["mean_var_more"] < summary["mean_var_none"]  # the case that read as a bug

    code, out, err = vigor("inspect-allocation", str(run))
    assert code == 0, err
    flat = " ".join(out.split())
    assert "kept vs" not in flat
    assert (f"mean pool variance {summary['mean_var_more']:.3f} of the {summary['given_more']} prompts given more "
            f"rollouts vs {summary['mean_var_none']:.3f} of the {summary['given_none']} given none") in flat
    assert "rule auto: a census round, then a wide or a deep plan chosen by expected signal" in flat
    assert f"decided {record['reason']}" in flat
    census_fields = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record["census"].items())
    assert f"census: {census_fields}" in flat  # its census and its depth weight (seen_before), as recorded
    assert "p_hat" in flat  # the posterior pass rate each prompt was planned on
    assert "auto's decision per step:" in flat and "deep" in flat


def record_prompts(run: Path, index: int) -> list[dict]:
    return json.loads((run / "allocation.jsonl").read_text().splitlines()[index])["prompts"]
