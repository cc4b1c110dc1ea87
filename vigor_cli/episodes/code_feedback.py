"""``--env code-feedback``: on a code task, each attempt runs on the problem's public tests in
the sandbox and the first failure comes back as the next message.

Details: docs/modules.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from vigor_cli.episodes.base import ENV_ERROR, MAX_TURNS, Environment, Episode, Reply, Start

PASSED = "passed"
"""An attempt passed every public test."""
PART_CHARS = 120
"""Characters shown of a test's input, its expected output, and what the program gave."""
FEEDBACK_CHARS = 400
"""Characters of a whole feedback message."""
NO_PROGRAM = "No program found: put your code in a ```python block."
STATUS_TEXT = {
    "wrong_answer": "wrong answer", "time_limit": "time limit exceeded", "memory_limit": "memory limit exceeded",
    "runtime_error": "runtime error", "compile_error": "does not compile",
}


def final_tests(example: Any, task: Any) -> str:
    """The tests that grade an episode's final program (the one place the code task's
    train/evaluation protocol is read; see the module docstring)."""
    tests = example.meta.get("tests", "public")
    if tests == "public" and getattr(task, "disjoint_split", False):
        return "all"
    return tests


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked."""
    text = text.rstrip("\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _part(label: str, text: str) -> str:
    text = clip(text, PART_CHARS)
    return f"{label}:\n{text}" if "\n" in text else f"{label}: {text}"


def feedback(failure: Any) -> str:
    """The message for a program's first failing test (verifiers/code.TestFailure)."""
    status = failure.verdict.status
    lines = [f"test {failure.index + 1}: {STATUS_TEXT.get(status, status.replace('_', ' '))}"]
    if status != "compile_error":
        lines.append(_part("input", failure.case.input))
    if status == "wrong_answer":
        lines += [_part("expected", failure.case.output), _part("got", failure.got)]
    else:
        lines.append(_part("error", failure.got or failure.verdict.detail or status))
    return clip("\n".join(lines), FEEDBACK_CHARS)


class CodeFeedback(Environment):
    """The built-in code-feedback environment (module docstring) over a code task's verifier."""

    name = "code-feedback"
    attempts = True

    def __init__(self, task: Any):
        self.task = task

    def start(self, examples: Sequence[Any]) -> list[Start]:
        return [Start() for _ in examples]

    def answer(self, episodes: Sequence[Episode], examples: Sequence[Any], last: bool) -> list[Reply]:
        from vigor_cli.verifiers.code import extract_code

        if last:
            return [Reply(done=True, ended=MAX_TURNS) for _ in episodes]
        replies: list[Reply | None] = [None] * len(episodes)
        jobs, where = [], []
        for i, (ep, example) in enumerate(zip(episodes, examples)):
            code = extract_code(ep.text)
            if not code or not code.strip():
                replies[i] = Reply(messages=[{"role": "user", "content": NO_PROGRAM}])
                continue
            jobs.append((self.task.problem(example), code, "public"))
            where.append(i)
        failures = self.task.verifier().first_failures(jobs) if jobs else []
        for i, failure in zip(where, failures):
            if failure is None:
                replies[i] = Reply(done=True, ended=PASSED)
            elif failure.verdict.status in ("sandbox_error", "grading_error"):
                replies[i] = Reply(error=f"the sandbox could not run test {failure.index + 1}: "
                                   f"{failure.verdict.detail or failure.verdict.status}", ended=ENV_ERROR)
            else:
                replies[i] = Reply(messages=[{"role": "user", "content": feedback(failure)}])
        return replies  # type: ignore[return-value]

    def scoring_example(self, example: Any) -> Any:
        return replace(example, meta={**example.meta, "tests": final_tests(example, self.task)})
