"""LiveCodeBench code verifier: run a completion's program on a problem's tests.

Rewards: ``full`` is 1.0 iff every selected test passes (the paper's full pass
rate); ``fraction`` is the share of tests that pass (the average test pass
rate). Which tests: 'public', 'private' or 'all', as the caller's protocol says
(vigor_cli/tasks/code_split.py: by default training problems are rewarded on all
their tests and held-out problems evaluated on all theirs).

Details: docs/modules.md.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Iterable

from vigor_cli.sandbox import Job, Limits, RunResult, SandboxPool, WeakSandboxError
from vigor_cli.sandbox.values import json_equal
from vigor_cli.verifiers.lcb import Problem, ProblemError, TestCase, load_problem

__all__ = [
    "CodeVerdict", "CodeVerifier", "Problem", "ProblemError", "TestCase", "TestFailure", "TestVerdict",
    "extract_code", "load_problem", "outputs_match",
]

OUTPUT_CAP_FLOOR = 1 << 20
"""The smallest stdout cap a test gets, whatever its expected output's size."""

_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str | None:
    """The program in a completion: the last ```python block, else the last plain ```
    block, else None. Blocks tagged with another language (```text) are ignored."""
    python_blocks, plain_blocks = [], []
    for match in _FENCE.finditer(completion):
        tag = match.group(1).strip().lower()
        if tag in ("python", "python3", "py"):
            python_blocks.append(match.group(2))
        elif tag == "":
            plain_blocks.append(match.group(2))
    if python_blocks:
        return python_blocks[-1]
    if plain_blocks:
        return plain_blocks[-1]
    return None


# --------------------------------------------------------------------------- comparison
def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    """The line's tokens as decimal numbers, or None if any is not one. NaN (quiet or
    signalling) is no number here: a signalling NaN raises when compared, and no NaN
    equals anything."""
    try:
        numbers = [Decimal(token) for token in line.split()]
    except (ArithmeticError, ValueError):
        return None
    return None if any(n.is_nan() for n in numbers) else numbers


def _same_numbers(a: list[Decimal], b: list[Decimal]) -> bool:
    return a == b  # no NaN gets here (_decimals drops them), so equality cannot raise


def outputs_match(actual: str, expected: str) -> tuple[bool, str]:
    """LiveCodeBench's stdin comparison; returns (match, why not). Never raises."""
    return _compare(actual, expected)


def _compare(actual: str, expected: str, show=None) -> tuple[bool, str]:
    """:func:`outputs_match`, quoting a line of ``actual`` (the program's) in the reason as
    ``show`` gives it (:meth:`RunResult.clean`: without the grader's paths)."""
    got, want = _stripped_lines(actual), _stripped_lines(expected)
    if len(got) != len(want):
        return False, f"{len(got)} output lines, expected {len(want)}"
    for number, (a, b) in enumerate(zip(got, want), start=1):
        if a == b:
            continue
        da, db = _decimals(a), _decimals(b)
        if da is None or db is None or not _same_numbers(da, db):
            shown = show(a) if show is not None else a
            return False, f"line {number}: {_short(shown)!r} != expected {_short(b)!r}"
    return True, ""


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "..." + text[-limit // 2:]


def _describe(value: object, show=str) -> str:
    """A returned value, short (its nesting is bounded by the parse that produced it), as
    ``show`` quotes a program's text."""
    try:
        return _short(show(json.dumps(value)))
    except (ValueError, TypeError, RecursionError):
        return f"a {type(value).__name__}"


# --------------------------------------------------------------------------- verdicts
@dataclass
class TestVerdict:
    status: str
    """pass | wrong_answer | time_limit | runtime_error | memory_limit | compile_error | skipped
    | sandbox_error (the sandbox failed: no verdict on the program) | grading_error (judging
    the run raised: no verdict on the program)"""
    stderr_head: str = ""
    detail: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    max_rss_kb: int = 0
    testtype: str = "stdin"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class CodeVerdict:
    full: float
    """1.0 iff every test passed."""
    fraction: float
    """Share of tests passed."""
    tests: list[TestVerdict] = field(default_factory=list)
    reason: str = ""
    """'passed N/N', or the first failing test's status and detail, or why nothing ran."""
    flag: str | None = None
    """Set for problems in LiveCodeBench's ERRATA (several answers accepted, interactive,
    broken tests), or whose reference solution fails: the score is unreliable and
    evaluation should report or drop it."""
    isolation: str = ""
    """The sandbox's isolation level the tests ran under ('full', or 'weak (no ...)')."""

    @property
    def passed(self) -> int:
        return sum(t.status == "pass" for t in self.tests)

    @property
    def grading_errors(self) -> list[TestVerdict]:
        """Tests that were not judged: the sandbox failed, or judging raised."""
        return [t for t in self.tests if t.status in ("sandbox_error", "grading_error")]

    def to_dict(self) -> dict:
        return {"full": self.full, "fraction": self.fraction, "reason": self.reason,
                "flag": self.flag, "isolation": self.isolation,
                "tests": [t.to_dict() for t in self.tests]}


_OUTCOME_STATUS = {
    "timeout": "time_limit",
    "memory": "memory_limit",
    "compile_error": "compile_error",
    "exit": "runtime_error",
    "signal": "runtime_error",
    "output_limit": "wrong_answer",
    "sandbox_error": "sandbox_error",
    "skipped": "skipped",
}


def judge(test: TestCase, run: RunResult) -> TestVerdict:
    """The verdict for one test from its run. Never raises: a failure of the judging itself
    is a ``grading_error`` verdict (see :func:`_judge`)."""
    try:
        return _judge(test, run)
    except Exception as exc:  # noqa: BLE001 - a grader bug must cost one test, not a batch
        return TestVerdict("grading_error", detail=f"{type(exc).__name__}: {_short(str(exc))}",
                           wall_s=run.wall_s, cpu_s=run.cpu_s, max_rss_kb=run.max_rss_kb,
                           testtype=test.testtype)


def _judge(test: TestCase, run: RunResult) -> TestVerdict:
    verdict = TestVerdict(status="pass", stderr_head=run.stderr_head, wall_s=run.wall_s,
                          cpu_s=run.cpu_s, max_rss_kb=run.max_rss_kb, testtype=test.testtype)
    if run.outcome != "ok":
        verdict.status = _OUTCOME_STATUS.get(run.outcome, "sandbox_error")
        verdict.detail = run.detail
        return verdict
    if test.testtype == "functional":
        if run.unserialisable:
            verdict.status, verdict.detail = "wrong_answer", f"returned a {run.clean(run.unserialisable)}"
        elif not run.has_value and run.status_error:
            verdict.status = "wrong_answer"
            verdict.detail = f"returned a value that cannot be read ({run.status_error})"
        elif not run.has_value:
            verdict.status, verdict.detail = "runtime_error", "the method returned nothing"
        else:
            [expected] = test.expected  # parsed and checked when the problem was loaded
            if not json_equal(run.value, expected):
                verdict.status = "wrong_answer"
                verdict.detail = f"returned {_describe(run.value, run.clean)}, expected {_short(test.output)}"
        return verdict
    text = run.stdout.decode("utf-8", "replace")
    ok, why = _compare(text, test.output, run.clean)
    if not ok:
        verdict.status, verdict.detail = "wrong_answer", why
    return verdict


def _summarise(verdicts: list[TestVerdict]) -> CodeVerdict:
    passed = sum(v.status == "pass" for v in verdicts)
    total = len(verdicts)
    first_failure = next((v for v in verdicts if v.status != "pass"), None)
    if first_failure is None:
        reason = f"passed {passed}/{total}"
    else:
        index = verdicts.index(first_failure) + 1
        reason = f"passed {passed}/{total}; test {index}: {first_failure.status}"
        if first_failure.detail:
            reason += f" ({first_failure.detail})"
    return CodeVerdict(full=float(passed == total), fraction=passed / total, tests=verdicts,
                       reason=reason)


@dataclass
class TestFailure:
    """A program's first failing test (:meth:`CodeVerifier.first_failures`)."""

    index: int
    case: TestCase | None
    verdict: TestVerdict | None
    got: str = ""
    """What the program printed (stdin tests) or returned (functional), cleaned of the
    grader's paths; its standard error's last line when it printed nothing."""


_NO_FAILURE = TestFailure(sys.maxsize, None, None)


def _produced(case: TestCase, run: RunResult) -> str:
    if case.testtype == "functional" and run.has_value:
        return _describe(run.value, run.clean)
    text = run.clean(run.stdout.decode("utf-8", "replace"))
    if text.strip():
        return text
    lines = [line for line in run.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return run.clean(lines[-1]) if lines else ""


# --------------------------------------------------------------------------- verifier
class CodeVerifier:
    """Grades programs against LiveCodeBench problems on a long-lived sandbox pool.

    ``workers``: sandbox fork servers (0: one per core). ``timeout_s`` and
    ``memory_mb``: per-test wall-clock limit and address-space headroom.
    ``allow_weak_sandbox``: run programs even when the pool's isolation is not
    full (otherwise :class:`WeakSandboxError`). Call from one thread (the pool
    serialises concurrent calls).
    """

    def __init__(self, workers: int = 0, timeout_s: float = 6.0, memory_mb: int = 512,
                 stop_at_first_failure: bool = False, pool: SandboxPool | None = None,
                 allow_weak_sandbox: bool = False):
        self.limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
        self.stop_at_first_failure = stop_at_first_failure
        self._own_pool = pool is None
        self.pool = pool if pool is not None else SandboxPool(workers)
        self.isolation = self.pool.isolation
        if not self.pool.isolated and not allow_weak_sandbox:
            self.close()
            raise WeakSandboxError(
                f"the sandbox's isolation is {self.isolation}: refusing to run untrusted "
                "programs (they could read datasets or the expected outputs); fix the cause "
                f"({'; '.join(self.pool.capabilities.get('detail', [])) or 'see the warning above'}) "
                "or opt in to the weaker sandbox (--allow-weak-sandbox, task.allow_weak_sandbox)")
        self._references: dict[str, str | None] = {}
        """question_id -> None (its reference solution passes) or why it fails."""

    def grade(self, problem: Problem, solution_code: str | None, tests: str = "public") -> CodeVerdict:
        """Run ``solution_code`` on the problem's ``tests`` ('public', 'private' or 'all')."""
        return self.grade_many([(problem, solution_code, tests)])[0]

    def grade_many(self, items: Iterable[tuple[Problem, str | None, str]]) -> list[CodeVerdict]:
        """Grade many (problem, code, tests) triples in parallel on the pool, in order."""
        items = list(items)
        self._check_references([problem for problem, _, _ in items])
        verdicts: list[CodeVerdict | None] = [None] * len(items)
        jobs: list[Job] = []
        owners: list[tuple[int, int]] = []  # job -> (item, test index)
        selected: list[list[TestCase]] = []
        for item_index, (problem, code, which) in enumerate(items):
            cases = problem.tests(which)
            selected.append(cases)
            if not cases:
                raise ProblemError(f"problem {problem.question_id}: no {which} tests to grade")
            broken = self._references.get(problem.question_id)
            if broken is not None:
                verdicts[item_index] = CodeVerdict(
                    0.0, 0.0, [TestVerdict("skipped", detail=broken, testtype=c.testtype)
                               for c in cases], reason=f"not run: {broken}")
                continue
            if code is None or not code.strip():
                verdicts[item_index] = CodeVerdict(
                    0.0, 0.0, [TestVerdict("compile_error", detail="no program", testtype=c.testtype)
                               for c in cases], reason="no program found in the completion")
                continue
            for test_index, case in enumerate(cases):
                owners.append((item_index, test_index))
                jobs.append(self._job(problem, code, case))

        failed_at: dict[int, int] = {}  # item -> lowest failing test index seen
        compile_failed: set[int] = set()
        judged: dict[int, TestVerdict] = {}

        def on_result(job_index: int, run: RunResult) -> None:
            item_index, test_index = owners[job_index]
            verdict = judge(selected[item_index][test_index], run)
            judged[job_index] = verdict
            run.stdout = run.stderr = b""  # judged: the grader keeps no program output
            if run.outcome == "compile_error":
                compile_failed.add(item_index)
            if verdict.status != "pass":
                failed_at[item_index] = min(failed_at.get(item_index, test_index), test_index)

        def skip(job_index: int) -> bool:
            item_index, test_index = owners[job_index]
            if item_index in compile_failed:
                return True
            return self.stop_at_first_failure and failed_at.get(item_index, test_index) < test_index

        runs = self.pool.run(jobs, skip=skip, on_result=on_result) if jobs else []

        per_item: dict[int, list[TestVerdict]] = {}
        for job_index, run in enumerate(runs):
            item_index, test_index = owners[job_index]
            verdict = judged.get(job_index) or judge(selected[item_index][test_index], run)
            if item_index in compile_failed and verdict.status == "skipped":
                verdict.status, verdict.detail = "compile_error", "the program does not compile"
            if self.stop_at_first_failure and failed_at.get(item_index, test_index) < test_index:
                verdict = TestVerdict("skipped", detail="after the first failure",
                                      testtype=verdict.testtype)
            per_item.setdefault(item_index, []).append(verdict)
        for item_index, tests in per_item.items():
            verdicts[item_index] = _summarise(tests)
        for item_index, (problem, _, _) in enumerate(items):
            verdicts[item_index].flag = problem.errata or (
                f"reference solution fails: {self._references[problem.question_id]}"
                if self._references.get(problem.question_id) else None)
            verdicts[item_index].isolation = self.isolation
        return verdicts  # type: ignore[return-value]

    def first_failures(self, items: Iterable[tuple[Problem, str, str]]) -> list[TestFailure | None]:
        """For each (problem, code, tests), its first test that does not pass, in test order,
        with what the program printed or returned (None: every test passed). The tests run in
        parallel on the pool; a submission's tests after a failure are skipped."""
        items = list(items)
        jobs, owners = [], []
        for item_index, (problem, code, which) in enumerate(items):
            for test_index, case in enumerate(problem.tests(which)):
                owners.append((item_index, test_index, case))
                jobs.append(self._job(problem, code, case))
        found: dict[int, TestFailure] = {}

        def on_result(job_index: int, run: RunResult) -> None:
            item_index, test_index, case = owners[job_index]
            verdict = judge(case, run)
            if verdict.status != "pass" and test_index < found.get(item_index, _NO_FAILURE).index:
                found[item_index] = TestFailure(test_index, case, verdict, _produced(case, run))
            run.stdout = run.stderr = b""

        def skip(job_index: int) -> bool:
            item_index, test_index, _ = owners[job_index]
            return found.get(item_index, _NO_FAILURE).index < test_index

        if jobs:
            self.pool.run(jobs, skip=skip, on_result=on_result)
        return [found.get(i) for i in range(len(items))]

    def _check_references(self, problems: list[Problem]) -> None:
        """Grade, once per problem, the reference solution its record carries (if any)."""
        fresh: dict[str, Problem] = {}
        for problem in problems:
            reference = problem.metadata.get("reference_solution")
            if (isinstance(reference, str) and reference.strip()
                    and problem.question_id not in self._references):
                fresh.setdefault(problem.question_id, problem)
        if not fresh:
            return
        jobs, owners = [], []
        for qid, problem in fresh.items():
            self._references[qid] = None
            for index, case in enumerate(problem.tests("all")):
                jobs.append(self._job(problem, problem.metadata["reference_solution"], case))
                owners.append((qid, index, case))
        runs = self.pool.run(jobs)
        for (qid, index, case), run in zip(owners, runs):
            status = judge(case, run).status
            if status in ("sandbox_error", "grading_error"):
                self._references.pop(qid, None)  # not the reference's fault: ask again later
            elif status != "pass" and self._references.get(qid) is None:
                self._references[qid] = f"its reference solution gets {status} on test {index + 1}"
                sys.stderr.write(f"vigor: problem {qid}: {self._references[qid]} "
                                 f"({run.detail or 'wrong output'}); its submissions score 0 "
                                 "without running\n")

    def _job(self, problem: Problem, code: str, case: TestCase) -> Job:
        expected = len(case.output.encode("utf-8", "surrogatepass"))
        cap = min(self.limits.stdout_cap, max(OUTPUT_CAP_FLOOR, 4 * expected + 65536))
        limits = replace(self.limits, stdout_cap=cap)
        if case.testtype == "functional":
            return Job(code, b"", limits, func_name=problem.func_name, args_json=case.input)
        return Job(code, case.input.encode("utf-8"), limits)

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> "CodeVerifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
