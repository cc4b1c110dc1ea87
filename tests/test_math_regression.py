"""The regression file of issue-tracker, other-grader and constructed cases
(``tests/fixtures/math_regression_cases.jsonl``): its shape, and the grader's agreement with it."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

CASES = Path(__file__).resolve().parent / "fixtures" / "math_regression_cases.jsonl"
CLASSES = ("units", "near-miss", "prefix", "false-reject", "percent", "precision", "rounded-gold", "unit-asked",
           "exact-gold")


def _cases() -> list[dict]:
    return [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]


def _bench():
    path = Path(__file__).resolve().parents[1] / "bench" / "math_verifier.py"
    spec = importlib.util.spec_from_file_location("bench_math_verifier", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_case_is_labelled_with_its_source_and_reason():
    cases = _cases()
    assert len(cases) >= 200 and len({c["id"] for c in cases}) == len(cases)
    for c in cases:
        assert c["expected"] in (0, 1) and c["pred_kind"] in ("answer", "completion") and c["gold"] and c["pred"], c
        assert re.fullmatch(r"[\w.-]+/[\w.-]+(#\d+|:.+)|constructed:[\w-]+", c["source"]), c
        assert len(c["reason"]) > 10, c
    sources = {c["source"] for c in cases}
    assert {f"constructed:{k}" for k in CLASSES} <= sources
    assert sum(s.startswith("huggingface/Math-Verify#") for s in sources) >= 8  # the tracker's issues
    assert any(s.startswith("QwenLM/Qwen2.5-Math:") for s in sources)


def test_every_class_is_tested_in_both_directions():
    for kind in CLASSES:
        labels = {c["expected"] for c in _cases() if c["source"] == f"constructed:{kind}"}
        assert labels == {0, 1}, kind


def test_no_case_repeats_the_peers_file():
    peers = Path(__file__).resolve().parent / "fixtures" / "math_grading_cases.jsonl"
    seen = {(c["gold"], c["pred"]) for c in map(json.loads, peers.read_text().splitlines()) if c}
    assert not [c["id"] for c in _cases() if (c["gold"], c["pred"]) in seen]


@pytest.mark.slow
def test_grader_agrees_with_every_case_and_beats_raw_math_verify():
    result = _bench().agreement(CASES)
    total = result["undisputed"]
    print(f"{total['cases']} cases: vigor {total['vigor']}, raw Math-Verify {total['raw']}; "
          f"vigor's misses: {result['vigor_misses']}")
    assert total["vigor_wrong_accepts"] == 0
    assert total["vigor"] == total["cases"]
    assert total["raw"] < total["vigor"]
