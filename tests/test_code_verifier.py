"""The LiveCodeBench code verifier: record decoding, comparison rules, grading, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import run_vigor
from vigor_cli.verifiers.code import (CodeVerifier, ProblemError, extract_code, load_problem,
                            outputs_match)
from vigor_cli.verifiers.lcb import NoGlobalsUnpickler, safe_unpickle

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lcb"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(FIXTURES))
import make_fixtures  # noqa: E402


def _load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture(scope="module")
def verifier():
    with CodeVerifier(workers=2, timeout_s=3.0) as v:
        yield v


@pytest.fixture(scope="module")
def stdin_problem():
    return load_problem(_load("stdin_problem.json"))


@pytest.fixture(scope="module")
def functional_problem():
    return load_problem(_load("functional_problem.json"))


# --------------------------------------------------------------------------- records
def test_fixtures_are_what_the_script_builds():
    """Compared after decoding (zlib's bytes may differ between library versions)."""
    for name, text in make_fixtures.build().items():
        committed, built = json.loads((FIXTURES / name).read_text()), json.loads(text)
        if name == "malicious.json":
            assert committed["question_id"] == built["question_id"] == "evil_1"
            import base64
            import zlib

            payload = zlib.decompress(base64.b64decode(committed["private_test_cases"]))
            assert b"system" in payload and b"touch" in payload
            continue
        assert load_problem(committed) == load_problem(built), f"{name} is stale: rerun the script"


def test_private_blob_is_upstream_format_and_decodes(stdin_problem):
    blob = _load("stdin_problem.json")["private_test_cases"]
    assert blob.startswith("eJ")  # base64 of a zlib stream, as in the real dataset
    assert len(stdin_problem.public_tests) == 2
    assert len(stdin_problem.private_tests) == 3
    assert stdin_problem.private_tests[2].output == "1000000000000000001\n"
    assert stdin_problem.func_name is None
    assert len(stdin_problem.tests("all")) == 5


def test_functional_record(functional_problem):
    assert functional_problem.func_name == "twoSum"
    assert functional_problem.platform == "leetcode"
    assert {t.testtype for t in functional_problem.tests("all")} == {"functional"}


def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    record = make_fixtures.malicious_record(str(marker))
    with pytest.raises(ProblemError, match=r"evil_1.*private_test_cases.*refused global"):
        load_problem(record)
    assert not marker.exists()
    with pytest.raises(ProblemError, match="evil_1"):
        load_problem(_load("malicious.json"))


def test_unpickler_refuses_every_global():
    import pickle

    from decimal import Decimal

    for payload in (pickle.dumps(os.getcwd), pickle.dumps({1}, protocol=2),
                    pickle.dumps(Decimal("1.5")), pickle.dumps(NoGlobalsUnpickler)):
        with pytest.raises(pickle.UnpicklingError, match="refused global"):
            safe_unpickle(payload)
    assert safe_unpickle(pickle.dumps({"a": [1, 2.5, "x", b"y", (3,)]})) == {
        "a": [1, 2.5, "x", b"y", (3,)]}


@pytest.mark.parametrize("field,value,pattern", [
    ("private_test_cases", "not base64 at all!!", "private_test_cases.*neither JSON"),
    ("private_test_cases", "eJwrSS0uAQAEXQHB", "private_test_cases"),  # zlib of 'test', no pickle
    ("public_test_cases", "[{\"input\": 1", "public_test_cases.*not valid JSON"),
    ("metadata", "{oops", "metadata"),
])
def test_undecodable_payloads_name_the_record_and_field(field, value, pattern):
    record = _load("stdin_problem.json")
    record[field] = value
    with pytest.raises(ProblemError, match=f"abc900_a.*{pattern}"):
        load_problem(record)


def test_zero_tests_is_an_error_not_a_pass(verifier):
    record = _load("stdin_problem.json")
    record["public_test_cases"] = "[]"
    record["private_test_cases"] = ""
    with pytest.raises(ProblemError, match="abc900_a.*no tests"):
        load_problem(record)
    only_private = _load("stdin_problem.json")
    only_private["public_test_cases"] = "[]"
    problem = load_problem(only_private)
    with pytest.raises(ProblemError, match="no public tests"):
        verifier.grade(problem, "print(1)", "public")


def test_functional_input_must_be_json_per_line():
    record = _load("functional_problem.json")
    record["public_test_cases"] = json.dumps([{"input": "[1,2]\nnot json", "output": "1",
                                               "testtype": "functional"}])
    with pytest.raises(ProblemError, match=r"3999.*public_test_cases\[0\]"):
        load_problem(record)


# --------------------------------------------------------------------------- extraction
def test_extract_code_prefers_last_python_block():
    text = "```python\na=1\n```\nthen\n```\nplain\n```\n```python\nb=2\n```\n```text\nno\n```"
    assert extract_code(text) == "b=2\n"
    assert extract_code("```\nonly plain\n```") == "only plain\n"
    assert extract_code("no code here") is None
    assert extract_code("```py\nx\n```") == "x\n"


# --------------------------------------------------------------------------- comparison
@pytest.mark.parametrize("actual,expected,match", [
    ("1.50\n", "1.5", True),
    ("  3 4  \n\n", "3 4\n", True),
    ("1e2", "100", True),
    ("3 4", "3 5", False),
    ("Yes", "yes", False),
    ("1\n2", "1 2", False),
    ("abc 1.0", "abc 1", False),  # a non-numeric token: only exact text matches
    ("1000000000000000001", "1000000000000000000", False),  # no float rounding
    ("a\r\nb\r\n", "a\nb", True),
])
def test_stdin_comparison_rules(actual, expected, match):
    assert outputs_match(actual, expected)[0] is match


# --------------------------------------------------------------------------- grading
SUM_PROGRAM = """
from decimal import Decimal
n = int(input())
total = sum(Decimal(x) for x in input().split())
print(total)
"""


def test_correct_program_passes_all_tests(verifier, stdin_problem):
    verdict = verifier.grade(stdin_problem, SUM_PROGRAM, "all")
    assert verdict.full == 1.0 and verdict.fraction == 1.0, verdict.reason
    assert [t.status for t in verdict.tests] == ["pass"] * 5


def test_partially_correct_program_gets_fraction(verifier, stdin_problem):
    floaty = "input(); print(sum(map(float, input().split())))"  # float loses 10**18 + 1
    verdict = verifier.grade(stdin_problem, floaty, "all")
    assert verdict.full == 0.0
    assert verdict.fraction == pytest.approx(4 / 5)
    assert verdict.tests[4].status == "wrong_answer"
    assert "test 5" in verdict.reason


def test_stop_at_first_failure_mode(stdin_problem):
    with CodeVerifier(workers=1, timeout_s=3.0, stop_at_first_failure=True) as v:
        verdict = v.grade(stdin_problem, "input(); x = input(); print(6)", "all")
    assert [t.status for t in verdict.tests] == ["pass", "wrong_answer", "skipped", "skipped",
                                                  "skipped"]
    assert verdict.fraction == pytest.approx(1 / 5)


def test_functional_solution_passes_with_tuple_and_typing_prelude(verifier, functional_problem):
    code = """
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return (seen[target - x], i)
            seen[x] = i
"""
    verdict = verifier.grade(functional_problem, code, "all")
    assert verdict.full == 1.0, verdict.reason


def test_functional_failures(verifier, functional_problem):
    wrong = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 0]\n"
    crash = "class Solution:\n    def twoSum(self, nums, target):\n        return 1 // 0\n"
    as_set = "class Solution:\n    def twoSum(self, nums, target):\n        return {0, 1}\n"
    no_method = "class Solution:\n    def other(self, nums, target):\n        return [0, 1]\n"
    results = verifier.grade_many([(functional_problem, c, "public")
                                   for c in (wrong, crash, as_set, no_method)])
    assert results[0].tests[0].status == "wrong_answer"
    assert results[1].tests[0].status == "runtime_error"
    assert "ZeroDivisionError" in results[1].tests[0].stderr_head
    assert results[2].tests[0].status == "wrong_answer" and "set" in results[2].tests[0].detail
    assert results[3].tests[0].status == "runtime_error"
    assert "twoSum" in results[3].tests[0].stderr_head
    assert all(r.full == 0.0 for r in results)


def test_functional_bare_function_is_called_like_upstream(verifier, functional_problem):
    code = """
def twoSum(nums, target):
    for i in range(len(nums)):
        for j in range(i + 1, len(nums)):
            if nums[i] + nums[j] == target:
                return [i, j]
"""
    assert verifier.grade(functional_problem, code, "all").full == 1.0


def test_compile_error_marks_every_test(verifier, stdin_problem):
    verdict = verifier.grade(stdin_problem, "def f(:\n  pass", "all")
    assert [t.status for t in verdict.tests] == ["compile_error"] * 5
    assert "SyntaxError" in verdict.tests[0].stderr_head
    assert verifier.grade(stdin_problem, None).tests[0].status == "compile_error"


def test_each_verdict_kind(verifier, stdin_problem):
    programs = {
        "time_limit": "while True: pass",
        "memory_limit": "x = bytearray(8 * 1024 ** 3)",
        "runtime_error": "raise ValueError('boom')",
        "wrong_answer": "print('nope')",
    }
    results = verifier.grade_many([(stdin_problem, code, "public") for code in programs.values()])
    for (status, _), verdict in zip(programs.items(), results):
        assert verdict.tests[0].status == status, verdict.reason
    assert "boom" in results[2].tests[0].stderr_head


# Correct programs that LiveCodeBench's in-process harness grades wrong: here they pass.
UPSTREAM_FAULTS = {
    "global_in_helper": """
total = 0
def add(values):
    global total
    for v in values:
        total += int(v)
input()
add(input().split())
print(total)
""",
    "quit": "input()\nprint(sum(int(x) for x in input().split()))\nquit()\nprint('never')\n",
    "main_block_not_last": """
def main():
    input()
    print(sum(int(x) for x in input().split()))
if __name__ == "__main__":
    main()
x = 1
""",
    "os_write_fd1": """
import os
input()
os.write(1, (str(sum(int(x) for x in input().split())) + "\\n").encode())
""",
    "open_fd0": "data = open(0).read().split()\nprint(sum(int(x) for x in data[1:]))\n",
    "stdin_buffer": """
import sys
data = sys.stdin.buffer.read().split()
sys.stdout.buffer.write(str(sum(int(x) for x in data[1:])).encode() + b"\\n")
""",
    "sys_exit_after_output": "import sys\ninput()\nprint(sum(map(int, input().split())))\nsys.exit(0)\n",
}


@pytest.mark.parametrize("name", sorted(UPSTREAM_FAULTS))
def test_programs_upstream_misgrades_pass_here(verifier, name):
    record = _load("stdin_problem.json")
    record["public_test_cases"] = json.dumps([
        {"input": "3\n1 2 3\n", "output": "6\n", "testtype": "stdin"},
        {"input": "1\n-7\n", "output": "-7\n", "testtype": "stdin"}])
    problem = load_problem(record)
    verdict = verifier.grade(problem, UPSTREAM_FAULTS[name], "public")
    assert verdict.full == 1.0, (name, verdict.reason, verdict.tests[0].stderr_head)


@pytest.mark.slow
def test_large_parent_does_not_starve_the_child(stdin_problem):
    """The memory limit is headroom over the child's own size (upstream's absolute limit
    failed every allocation in a fork of a large process). A wall limit of its own: zeroing
    300 MB on a loaded machine can take longer than the module verifier's 3 s."""
    code = "x = bytearray(300 * 1024 * 1024)\n" + SUM_PROGRAM
    with CodeVerifier(workers=1, timeout_s=30.0) as verifier:
        verdict = verifier.grade(stdin_problem, code, "public")
    assert verdict.full == 1.0, verdict.reason


# --------------------------------------------------------------------------- CLI
def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_vigor("verify", "code", *args)  # in this process (tests/cli_runner.py)


@pytest.mark.slow
def test_cli_table_and_json(tmp_path):
    solution = tmp_path / "sol.py"
    solution.write_text(SUM_PROGRAM)
    shown = _cli("--problem", str(FIXTURES / "stdin_problem.json"), "--solution", str(solution),
                 "--tests", "all")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count(" pass ") == 5 and "full = 1" in shown.stdout
    assert "passed 5/5" in shown.stdout
    as_json = _cli("--problem", str(FIXTURES / "stdin_problem.json"), "--solution",
                   str(solution), "--json")
    payload = json.loads(as_json.stdout)
    assert payload["full"] == 1.0 and len(payload["tests"]) == 2


@pytest.mark.slow
def test_cli_jsonl_with_question_id_and_completion_file(tmp_path):
    problems = tmp_path / "lcb.jsonl"
    problems.write_text("\n".join(json.dumps(_load(n)) for n in
                                  ("stdin_problem.json", "functional_problem.json")) + "\n")
    completion = tmp_path / "completion.md"
    completion.write_text("Here:\n```python\nclass Solution:\n    def twoSum(self, n, t):\n"
                          "        return [0, 1]\n```\n")
    shown = _cli("--problem", str(problems), "--solution", str(completion), "--question-id",
                 "3999", "--json")
    assert shown.returncode == 0, shown.stderr
    payload = json.loads(shown.stdout)
    assert [t["status"] for t in payload["tests"]] == ["pass", "wrong_answer"]


@pytest.mark.parametrize("problem_text,message", [
    (None, "cannot read problem file"),
    ("{not json", "not valid JSON"),
    (json.dumps(make_fixtures.malicious_record()), "evil_1"),
], ids=["missing", "bad-json", "malicious-pickle"])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, problem_text, message):
    problem = tmp_path / "p.json"
    if problem_text is not None:
        problem.write_text(problem_text)
    solution = tmp_path / "s.py"
    solution.write_text("print(1)")
    shown = _cli("--problem", str(problem), "--solution", str(solution))
    assert shown.returncode == 2
    assert message in " ".join(shown.stderr.split())  # rich wraps long lines at the terminal width
    assert shown.stderr.count("error:") == 1
    assert "Traceback" not in shown.stderr


def test_errata_problems_are_flagged(verifier):
    record = _load("stdin_problem.json")
    record["question_id"] = "abc337_e"
    problem = load_problem(record)
    assert problem.errata and "interactive" in problem.errata
    verdict = verifier.grade(problem, SUM_PROGRAM)
    assert verdict.flag == problem.errata
    leetcode = load_problem({**_load("functional_problem.json"), "question_title": "find-the-peaks"})
    assert "multiple answers" in leetcode.errata
    assert load_problem(_load("stdin_problem.json")).errata is None


@pytest.mark.slow
def test_functional_numpy_return_values_compare_as_plain_values(verifier, functional_problem):
    """Upstream compares with ==, where np.int64(1) == 1; the JSON hand-off must agree."""
    code = """
import numpy as np
class Solution:
    def twoSum(self, nums, target):
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return np.array([seen[target - x], i])
            seen[x] = np.int64(i)
"""
    verdict = verifier.grade(functional_problem, code, "all")
    assert verdict.full == 1.0, verdict.reason
