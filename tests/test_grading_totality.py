"""One completion never stops training (issue 24, part 1).

Each program here, written by a policy, stopped `vigor train` or crashed the grader before the
fix: ``sys.exit(125)`` read as "the child could not confine itself" (a sandbox error, so the
whole batch raised), a signalling NaN where a number was expected (``InvalidOperation`` inside
the pool's result callback, which cost the honest job beside it its verdict too), deeply nested
JSON on the status descriptor or as a functional answer (``RecursionError``), rich markup in a
program's stderr (``vigor verify code`` crashed). Now a program's exit code is only ever its
outcome, every comparison and every parse of what a program produced is bounded and total, a
failure while judging one completion scores that completion 0 with ``grading_error`` set, and a
run stops only on a systemic failure (the pool cannot start, or most of a batch fails to run).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from vigor_cli.errors import UserError
from vigor_cli.sandbox import Job, Limits, RunResult, SandboxPool
from vigor_cli.sandbox import pool as pool_module
from vigor_cli.tasks.base import Example
from vigor_cli.verifiers import code as code_module
from vigor_cli.verifiers.code import CodeVerdict, CodeVerifier, load_problem, outputs_match

LIMITS = Limits(timeout_s=6.0, memory_mb=256)


def _record(qid: str, tests: list[tuple[str, str]], func_name: str | None = None) -> dict:
    kind = "functional" if func_name else "stdin"
    cases = json.dumps([{"input": i, "output": o, "testtype": kind} for i, o in tests])
    return {"question_id": qid, "question_title": qid, "question_content": "Answer.",
            "platform": "leetcode" if func_name else "atcoder", "contest_id": "x",
            "contest_date": "2026-01-01T00:00:00", "difficulty": "easy", "starter_code": "",
            "metadata": json.dumps({"func_name": func_name} if func_name else {}),
            "public_test_cases": cases, "private_test_cases": "[]"}


DOUBLE = _record("double", [("4\n", "8\n"), ("10\n", "20\n")])
DOUBLE_SOLUTION = "print(2 * int(input()))\n"
NEST = _record("nest", [("2", "[[[]]]"), ("0", "[]")], func_name="nest")
NEST_SOLUTION = ("class Solution:\n    def nest(self, n):\n        v = []\n"
                 "        for _ in range(n):\n            v = [v]\n        return v\n")
DEEP_ANSWER = ("class Solution:\n    def nest(self, n):\n        v = []\n"
               "        for _ in range(1500):\n            v = [v]\n        return v\n")
DEEP_STATUS_PROGRAMS = {
    "arrays": "import os\nos.write(3, b'[' * 200000 + b'\\n')\nprint(1)\n",
    "objects": "import os\nos.write(3, b'{\"value\": ' * 100000 + b'\\n')\nprint(1)\n",
    "value_1500_deep": ("import os\nos.write(3, b'{\"value\": ' + b'[' * 1500 + b']' * 1500 + b'}\\n')"
                        "\nprint(1)\n"),
    "escaped_quotes": "import os\nos.write(3, b'\"' + b'\\\\\"' * 300000 + b'[' * 5000 + b'\\\\')\nprint(1)\n",
}


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


@pytest.fixture(scope="module")
def verifier():
    with CodeVerifier(workers=2, timeout_s=6.0, memory_mb=256) as v:
        yield v


# --------------------------------------------------------------------------- exit 125
@pytest.mark.parametrize("program", ["import sys\nprint('partial')\nsys.exit(125)",
                                     "import os\nos._exit(125)", "raise SystemExit(125)"])
def test_exit_code_125_is_the_programs_own_outcome(pool, program):
    run = pool.run_one(Job(program, b"", LIMITS))
    assert run.outcome == "exit" and run.exit_code == 125, (run.outcome, run.detail)


def test_a_child_that_cannot_confine_itself_is_still_a_sandbox_error(pool):
    """Three open files: the child cannot even open its program, so it never reports that it
    confined itself and ran it."""
    run = pool.run_one(Job("print('ran')", b"", replace(LIMITS, open_files=3)))
    assert run.outcome == "sandbox_error" and run.stdout == b"", (run.outcome, run.detail)
    again = pool.run_one(Job("print('ran')", b"", LIMITS))
    assert again.outcome == "ok" and again.stdout == b"ran\n"


def test_a_program_too_large_for_its_job_directory_is_its_own_outcome(pool):
    """Writing the program is the sandbox's work, but its size is the program's: a compile
    error, never a sandbox error (which would count against the batch)."""
    run = pool.run_one(Job("#" + "x" * (3 << 20), b"", replace(LIMITS, disk_mb=2)))
    assert run.outcome == "compile_error" and "does not fit" in run.detail, run
    again = pool.run_one(Job("print('ran')", b"", LIMITS))
    assert again.outcome == "ok" and again.stdout == b"ran\n"


# --------------------------------------------------------------------------- comparisons
ODD_TOKENS = ["sNaN", "-sNaN", "sNaN12", "NaN", "nan", "-Infinity", "inf", "1e999999999999999999",
              "1e9999999999999999999999999", "0x1F", "1_000", "\u0661\u0662", "--1", "1e", ".",
              "-", "+0", "-0", "0E-1000000", "9" * 5000]


@pytest.mark.parametrize("token", ODD_TOKENS)
def test_stdin_comparison_is_total(token):
    for expected in ("1", "0", "sNaN", "nan", "Infinity", token, f"1 {token}", "12"):
        for actual in (token, f"1 {token}", f"{token}\n{token}"):
            match, why = outputs_match(actual, expected)
            assert isinstance(match, bool) and isinstance(why, str)
    assert outputs_match(token, token) == (True, "")
    assert outputs_match("1.50", "1.5") == (True, "")
    assert not outputs_match("sNaN", "NaN")[0]


def test_a_signalling_nan_is_a_wrong_answer_and_the_job_beside_it_keeps_its_verdict(verifier):
    problem = load_problem(DOUBLE)
    snan, honest = verifier.grade_many([(problem, "input()\nprint('sNaN')", "public"),
                                        (problem, DOUBLE_SOLUTION, "public")])
    assert [t.status for t in snan.tests] == ["wrong_answer"] * 2
    assert honest.full == 1.0, honest.reason


# --------------------------------------------------------------------------- parsing
def test_parse_json_is_bounded_and_total():
    from vigor_cli.sandbox.values import MAX_DEPTH, parse_json

    rng = random.Random(24)
    alphabet = '[]{}",:\\0123456789.eE-+ tfrueals'
    texts = ["[" * 200000, "{\"a\":" * 100000, "[" * MAX_DEPTH + "]" * MAX_DEPTH,
             "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "1" * 5000, "NaN", "-Infinity",
             "\"\\ud800\"", "\"" + "\\\"" * 100000, "[\"]\"," * 1000, "", "   ", "\x00", "1e400"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))) for _ in range(2000)]
    for text in texts:
        value, why = parse_json(text)
        assert why is None or isinstance(why, str)
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH)[1] is None
    assert "deeper" in parse_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))[1]
    assert parse_json(b'{"value": [1, "x]"]}') == ({"value": [1, "x]"]}, None)


@pytest.mark.slow
def test_equality_of_returned_values_is_total_and_matches_python():
    from vigor_cli.sandbox.values import json_equal

    deep_a, deep_b = [], []
    for _ in range(100000):
        deep_a, deep_b = [deep_a], [deep_b]
    assert json_equal(deep_a, deep_b)
    for a, b in [([1, 2], [1, 2.0]), ({"a": [1]}, {"a": [1]}), ([True], [1]), ([1], [1, 2]),
                 ({"a": 1}, {"b": 1}), ([[1]], [1]), ("1", 1), (None, None), ([], {}),
                 (float("nan"), float("nan")), ({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]})]:
        assert json_equal(a, b) == (a == b), (a, b)


@pytest.mark.parametrize("name", sorted(DEEP_STATUS_PROGRAMS))
def test_deep_json_on_the_status_descriptor_is_read_safely(pool, name):
    run = pool.run_one(Job(DEEP_STATUS_PROGRAMS[name], b"", LIMITS))
    assert run.outcome == "ok" and run.stdout == b"1\n", (run.outcome, run.detail)
    assert not run.has_value


def test_a_functional_answer_nested_1500_deep_is_a_wrong_answer(verifier):
    problem = load_problem(NEST)
    deep, honest, writer = verifier.grade_many([
        (problem, DEEP_ANSWER, "public"), (problem, NEST_SOLUTION, "public"),
        (problem, NEST_SOLUTION.replace("return v", "import os; os.write(3, b'[' * 9999 + b'\\n')"
                                        "; return v"), "public")])
    assert [t.status for t in deep.tests] == ["wrong_answer"] * 2, deep.reason
    assert "deeper" in deep.tests[0].detail
    assert honest.full == 1.0, honest.reason
    assert writer.full == 0.0 and writer.tests[0].status in ("wrong_answer", "runtime_error")


# --------------------------------------------------------------------------- scoring
@pytest.fixture(scope="module")
def task():
    from vigor_cli.tasks.tiny_code import TinyCodeTask

    task = TinyCodeTask(workers=2)
    yield task
    task.close()


def _fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def _numeric_examples(task, count: int) -> list:
    return [ex for ex in task.train if "int(" in ex.meta["solution"]][:count]


@pytest.mark.slow
def test_a_mixed_batch_of_batch_stoppers_and_honest_programs_completes(task):
    """Every program that stopped training before, mixed with honest solutions in one batch:
    the batch completes, the hostile completions score 0 with a reason, the honest ones 1."""
    examples = _numeric_examples(task, 12)
    functional = Example(uid="mixed/nest", question="Nest.", answer=NEST, meta={"tests": "public"})
    hostile = [
        "import sys\nsys.exit(125)",
        "import os\nos._exit(125)",
        "input()\nprint('sNaN')",
        "input()\nprint('-sNaN 1')",
        DEEP_STATUS_PROGRAMS["arrays"].replace("print(1)", "print('x')"),
        DEEP_STATUS_PROGRAMS["objects"].replace("print(1)", "print('x')"),
        DEEP_STATUS_PROGRAMS["escaped_quotes"].replace("print(1)", "print('x')"),
        "import sys\nsys.stderr.write('[/] [bold]x[/bold] [red]\\n')\nsys.exit(1)",
    ]
    batch = [(ex, _fenced(code)) for ex, code in zip(examples, hostile)]
    batch.append((functional, _fenced(DEEP_ANSWER)))
    honest = [(ex, _fenced(ex.meta["solution"])) for ex in examples[len(hostile):]]
    honest.append((functional, _fenced(NEST_SOLUTION)))
    order = list(range(len(batch) + len(honest)))
    random.Random(3).shuffle(order)
    items = [(batch + honest)[i] for i in order]
    scores = task.score([ex for ex, _ in items], [text for _, text in items])
    for position, index in enumerate(order):
        score = scores[position]
        assert score.grading_error is None, score.grading_error
        if index < len(batch):
            assert score.reward == 0.0 and score.reason, (index, score)
        else:
            assert score.reward == 1.0, (index, score.reason)


def test_a_failure_while_judging_one_completion_scores_it_zero(task, monkeypatch):
    real = code_module._compare

    def flaky(actual: str, expected: str, show=None):
        if "boom" in actual:
            raise RuntimeError("a comparison bug")
        return real(actual, expected, show)

    monkeypatch.setattr(code_module, "_compare", flaky)
    examples = _numeric_examples(task, 3)
    texts = [_fenced("input()\nprint('boom')")] + [_fenced(ex.meta["solution"]) for ex in examples[1:]]
    scores = task.score(examples, texts)
    assert scores[0].reward == 0.0 and "RuntimeError" in scores[0].grading_error
    assert "grading failed" in scores[0].reason
    assert [s.reward for s in scores[1:]] == [1.0, 1.0]
    assert all(s.grading_error is None for s in scores[1:])


def _inject_sandbox_errors(monkeypatch, task, marker: str) -> None:
    pool = task._verifier.pool
    original = pool.run

    def run(jobs, skip=None, on_result=None):
        replaced: dict[int, RunResult] = {}

        def substitute(index, result):
            if marker in jobs[index].source:
                result = RunResult("sandbox_error", detail="injected: the worker was lost")
                replaced[index] = result
            if on_result is not None:
                on_result(index, result)

        results = original(jobs, skip, substitute)
        return [replaced.get(i, r) for i, r in enumerate(results)]

    monkeypatch.setattr(pool, "run", run)


def test_a_sandbox_error_on_a_few_completions_scores_them_zero(task, monkeypatch):
    examples = _numeric_examples(task, 4)
    task.score(examples[:1], [_fenced(examples[0].meta["solution"])])  # the verifier exists
    _inject_sandbox_errors(monkeypatch, task, "LOST")
    texts = [_fenced(ex.meta["solution"] + "  # LOST" * (i == 0)) for i, ex in enumerate(examples)]
    scores = task.score(examples, texts)
    assert scores[0].reward == 0.0 and "injected" in scores[0].grading_error
    assert [s.reward for s in scores[1:]] == [1.0] * 3


def test_most_of_a_batch_failing_to_run_stops_with_one_line(task, monkeypatch):
    examples = _numeric_examples(task, 4)
    task.score(examples[:1], [_fenced(examples[0].meta["solution"])])
    _inject_sandbox_errors(monkeypatch, task, "LOST")
    texts = [_fenced(ex.meta["solution"] + "  # LOST" * (i < 3)) for i, ex in enumerate(examples)]
    with pytest.raises(UserError) as raised:
        task.score(examples, texts)
    message = str(raised.value)
    assert "3 of 4" in message and "injected" in message and "\n" not in message


def test_a_pool_that_cannot_start_stops_with_one_line(monkeypatch):
    from vigor_cli.tasks.tiny_code import TinyCodeTask

    monkeypatch.setattr(pool_module, "_WORKER_BOOT", "import sys; sys.exit(3)")
    task = TinyCodeTask(workers=1)
    example = task.train[0]
    with pytest.raises(UserError, match="tiny-code: the sandbox cannot start") as raised:
        task.score([example], [_fenced(example.meta["solution"])])
    assert "\n" not in str(raised.value)
    task.close()


# --------------------------------------------------------------------------- vigor verify code
def test_the_verdict_view_prints_every_status_and_program_text_literally():
    from rich.console import Console

    from vigor_cli.report.verify_view import print_code_verdict

    problem = load_problem(DOUBLE)
    TestVerdict = code_module.TestVerdict  # noqa: N806 - not collected as a test class
    markup = "[/] [bold]x[/bold] [red]"
    verdict = CodeVerdict(0.0, 0.0, [
        TestVerdict("sandbox_error", detail=f"worker died {markup}"),
        TestVerdict("runtime_error", stderr_head=f"Traceback\nValueError: {markup}", detail="exit 1"),
        TestVerdict("grading_error", detail="RuntimeError: bug"),
        TestVerdict("some_future_status"),
    ], reason=f"passed 0/4; test 1: sandbox_error ({markup})", isolation="full")
    console = Console(record=True, width=200)
    print_code_verdict(console, problem, "public", verdict)
    text = console.export_text()
    for shown in ("sandbox_error", "grading_error", "some_future_status", f"ValueError: {markup}",
                  f"worker died {markup}", f"({markup})"):
        assert shown in text, shown


@pytest.mark.slow
def test_verify_code_prints_a_programs_markup_literally(vigor, tmp_path):
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps(DOUBLE))
    solution = tmp_path / "s.py"
    solution.write_text("import sys\nsys.stderr.write('[/] [bold]x[/bold]\\n')\nsys.exit(1)\n")
    code, out, err = vigor("verify", "code", "--problem", str(problem), "--solution", str(solution))
    assert code == 0, err
    assert "[/] [bold]x[/bold]" in out and "runtime_error" in out
