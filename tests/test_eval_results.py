"""The results file behind `vigor eval --output/--rescore` and the trainer's eval/step-N.json:
metrics recomputed from per-sample verdicts, and clear errors for broken files."""

from __future__ import annotations

import json

import pytest

from vigor_cli.errors import UserError
from vigor_cli.report.eval_results import read_results, recompute, write_results
from vigor_cli.report.metrics import pass_at_k


def sample(uid: str, i: int, reward: float, **extra) -> dict:
    return {"uid": uid, "sample": i, "completion": f"answer {reward}", "reward": reward,
            "reason": "correct" if reward == 1 else "wrong answer", "truncated": False,
            "tokens": 5} | extra


def test_recompute_from_samples_in_the_trainer_schema(tmp_path):
    # samples arrive in any order; metrics group them by uid
    results = {"step": 3, "accuracy": 0.0, "sets": {
        "math500": {"set": "math500", "n": 4, "samples": [
            sample("a", 0, 1), sample("b", 0, 0), sample("a", 1, 0), sample("b", 1, 0),
            sample("a", 2, 1), sample("b", 2, 0), sample("a", 3, 0), sample("b", 3, 1)]},
        "lcb-v6": {"set": "lcb-v6", "n": 2, "kind": "code", "samples": [
            sample("p", 0, 1, test_fraction=1.0), sample("p", 1, 0, test_fraction=0.25)]},
    }}
    path = write_results(results, tmp_path / "r.json")
    out = recompute(read_results(path))
    m = out["sets"]["math500"]["metrics"]
    assert m["problems"] == 2 and m["n"] == 4 and m["avg@n"] == pytest.approx(3 / 8)
    assert m["pass@k"]["2"] == pytest.approx((pass_at_k(4, 2, 2) + pass_at_k(4, 1, 2)) / 2)
    assert out["sets"]["math500"]["per_example"] == {"a": 0.5, "b": 0.25}
    code = out["sets"]["lcb-v6"]["metrics"]
    assert code["avg@n"] == pytest.approx(0.5)  # full pass rate
    assert code["test_pass_rate"] == pytest.approx(0.625)
    assert out["accuracy"] == pytest.approx((3 / 8 + 0.5) / 2)
    assert out["overall"]["mean_avg@n"] == pytest.approx(out["accuracy"])
    assert "math6_avg@n" not in out["overall"]


def test_broken_files_name_the_problem(tmp_path):
    p = tmp_path / "r.json"
    with pytest.raises(UserError, match="not found"):
        read_results(p)
    p.write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        read_results(p)
    p.write_text(json.dumps({"benchmarks": {}}))
    with pytest.raises(UserError, match="no 'sets'"):
        read_results(p)
    p.write_text(json.dumps({"sets": {"math500": {"samples": [{"uid": "a", "reward": 1}]}}}))
    with pytest.raises(UserError, match="set 'math500' sample 0"):
        read_results(p)
