"""The math verifier against peers' labelled grader cases, and its command line."""

from __future__ import annotations
import json
import os
import signal
import threading
import time
from pathlib import Path
import pytest
from vigor_cli.verifiers.math import MathVerifier, asks_for_percent, grade, grade_any, grade_forked, grade_multi
from vigor_cli.verifiers.math_answers import KNOWN, load_benchmark
from vigor_cli.cli import main as cli_main



# ---------------------------------------------------------------- regression file from peers' grader suites

CASES = Path(__file__).resolve().parent / "fixtures" / "math_grading_cases.jsonl"


def _regression_cases() -> list[dict]:
    return [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]


def test_regression_file_is_well_formed():
    cases = _regression_cases()
    assert len(cases) >= 300
    sources = {c["source"].split(":")[0] for c in cases}
    assert {"huggingface/Math-Verify", "NVIDIA/NeMo-Skills", "hendrycks/math", "rllm-org/rllm", "volcengine/verl", "huggingface/lighteval"} <= sources
    for c in cases:
        assert c["expected"] in (0, 1) and c["pred_kind"] in ("answer", "completion") and c["gold"], c
        assert "::" in c["source"], c
    assert len({c["id"] for c in cases}) == len(cases)


def _raw_math_verify():
    """The benchmark's runner of raw Math-Verify on one labelled case (one copy of how the
    peers' tests call it)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "math_verifier.py"
    spec = importlib.util.spec_from_file_location("bench_math_verifier", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.raw_math_verify


@pytest.mark.slow
def test_regression_agreement_at_least_raw_math_verify_and_no_wrong_accepts():
    cases = [c for c in _regression_cases() if "dispute" not in c]
    raw_case = _raw_math_verify()
    ours, raw, wrong_accepts = 0, 0, []
    for c in cases:
        completion = c["pred"] if c["pred_kind"] == "completion" else "\\boxed{" + c["pred"] + "}"
        got = int(grade(c["gold"], completion, c.get("problem")).reward)
        ours += got == c["expected"]
        raw += raw_case(c) == c["expected"]
        if got and not c["expected"]:
            wrong_accepts.append(c["id"])
    print(f"{len(cases)} undisputed cases: vigor {ours}, raw Math-Verify {raw}; vigor's wrong accepts: {wrong_accepts}")
    assert wrong_accepts == []
    assert ours >= raw


# ---------------------------------------------------------------- CLI


def _cli(args, capsys):
    with pytest.raises(SystemExit) as done:
        cli_main(args)
        raise SystemExit(0)
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_cli_single_case_table(capsys):
    code, out, _ = _cli(["verify", "math", "--gold", r"\frac12", "--pred", "0.5"], capsys)
    assert code == 0 and "correct" in out and "1/2" in out


def test_cli_input_file_json(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        json.dumps({"gold": "5", "pred": r"\boxed{5\%}"}) + "\n"
        + json.dumps({"gold": ["69", "84"], "pred": r"\boxed{84, 69}"}) + "\n"
    )
    code, out, _ = _cli(["verify", "math", "--input", str(cases), "--json"], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["reward"] for r in rows] == [0.0, 1.0]
    assert rows[0]["reason"] == "wrong answer (percent guard)" and rows[0]["pred_parsed"]


@pytest.mark.parametrize(
    "args, content, message",
    [
        (["--gold", "1"], None, "give --gold and --pred"),
        (["--gold", "1", "--pred", "1", "--input", "x.jsonl"], None, "not both"),
        (["--input", "{path}"], '{"gold": "1"}\n', "cases.jsonl:1: missing field 'pred'"),
        (["--input", "{path}"], '{"gold": "1", "pred": "1"}\n{oops\n', "cases.jsonl:2: not valid JSON"),
        (["--input", "{path}"], '{"gold": {"a": 1}, "pred": "1"}\n', "cases.jsonl:1: field 'gold'"),
        (["--input", "missing.jsonl"], None, "missing.jsonl: no such file"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, args, content, message):
    path = tmp_path / "cases.jsonl"
    if content is not None:
        path.write_text(content)
    args = [a.replace("{path}", str(path)) for a in args]
    code, _, err = _cli(["verify", "math", *args], capsys)
    # The shared error console wraps at the terminal width (80 under pytest): unwrap first.
    assert code == 2 and err.startswith("error:") and message in " ".join(err.split())


def test_cli_problem_flag_and_field(tmp_path, capsys):
    problem = "What percent of the people of Mathopolis are children?"
    code, out, _ = _cli(["verify", "math", "--gold", "20", "--pred", r"\boxed{20\%}", "--problem", problem, "--json"], capsys)
    assert code == 0 and json.loads(out)["reward"] == 1.0
    code, out, _ = _cli(["verify", "math", "--gold", "20", "--pred", r"\boxed{20\%}", "--json"], capsys)
    assert code == 0 and json.loads(out)["reward"] == 0.0
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"gold": "20", "pred": r"\boxed{20\%}", "problem": problem}) + "\n")
    code, out, _ = _cli(["verify", "math", "--input", str(cases), "--json"], capsys)
    assert code == 0 and json.loads(out)["reward"] == 1.0


def test_cli_problem_decides_rounding_on_the_plain_number_path(capsys):
    """Plain numbers on both sides are graded without a child (the fast path): the problem
    text still reaches it, so a request to round lets another precision match."""
    for problem, reward in (("Round your answer to the nearest hundredth.", 1.0), (None, 0.0)):
        args = ["verify", "math", "--gold", "3.14", "--pred", r"\boxed{3.1416}", "--json"]
        code, out, _ = _cli(args + (["--problem", problem] if problem else []), capsys)
        assert code == 0 and json.loads(out)["reward"] == reward, problem
    code, out, _ = _cli(["verify", "math", "--gold", "0.333", "--pred", r"\boxed{1/3}", "--problem",
                         "Round your answer to the nearest thousandth.", "--json"], capsys)
    assert code == 0 and json.loads(out)["reward"] == 0.0  # a rounded gold is no fraction


def test_cli_problem_decides_a_decimal_for_an_exact_gold(capsys):
    """0.333 for gold 1/3 is a rounding: correct only when the problem asks for one, on the
    plain-number path (``1/3``) and through the full grader (``\\frac{1}{3}``, ``\\pi``) alike."""
    thousandth = "Round your answer to the nearest thousandth."
    for gold, pred in (("1/3", "0.333"), (r"\frac{1}{3}", "0.333"), (r"\pi", "3.142")):
        for problem, reward in ((thousandth, 1.0), (None, 0.0), ("What is the probability?", 0.0)):
            args = ["verify", "math", "--gold", gold, "--pred", r"\boxed{" + pred + "}", "--json"]
            code, out, _ = _cli(args + (["--problem", problem] if problem else []), capsys)
            assert code == 0 and json.loads(out)["reward"] == reward, (gold, problem)
    code, out, _ = _cli(["verify", "math", "--gold", r"\frac{1}{4}", "--pred", r"\boxed{0.25}", "--json"], capsys)
    assert code == 0 and json.loads(out)["reward"] == 1.0  # equal: no rounding needed


def test_cli_bad_problem_field_is_one_line_exit_2(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"gold": "20", "pred": "20", "problem": 5}) + "\n")
    code, _, err = _cli(["verify", "math", "--input", str(cases)], capsys)
    assert code == 2 and "cases.jsonl:1: field 'problem'" in " ".join(err.split())


def test_cli_few_cases_start_no_worker_pool(monkeypatch, capsys):
    """A single case is graded in a forked child: the pool (and its forkserver) never starts."""
    from vigor_cli.verifiers import math as vmath

    def no_pool(*a, **k):
        raise AssertionError("the worker pool was started for one case")

    monkeypatch.setattr(vmath.MathVerifier, "_spawn", no_pool)
    code, out, _ = _cli(["verify", "math", "--gold", r"\sqrt{2}", "--pred", r"\boxed{\sqrt2}", "--json"], capsys)
    assert code == 0 and json.loads(out)["reward"] == 1.0


def test_boxed_spans_locate_each_box():
    from vigor_cli.verifiers.math_answers import all_boxed, boxed_spans

    text = r"a \boxed{1} b \fbox{\frac{1}{2}} c \boxed 7. d \boxed{x"
    spans = boxed_spans(text)
    assert [content for _, _, content in spans] == all_boxed(text) == ["1", r"\frac{1}{2}", "7"]
    assert [text[start:end] for start, end, _ in spans] == [r"\boxed{1}", r"\fbox{\frac{1}{2}}", r"\boxed 7."]


def test_question_is_another_name_for_problem(capsys):
    problem = "What percent of the people of Mathopolis are children?"
    assert grade("20", r"\boxed{20\%}", question=problem).reward == 1.0
    assert grade_any(["20", "30"], r"\boxed{20\%, 30\%}", question=problem).reward == 1.0
    code, out, _ = _cli(["verify", "math", "--gold", "20", "--pred", r"\boxed{20\%}", "--question", problem, "--json"], capsys)
    assert code == 0 and json.loads(out)["reward"] == 1.0
