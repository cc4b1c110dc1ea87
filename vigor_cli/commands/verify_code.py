"""`vigor verify code`: grade one program against a LiveCodeBench problem, per test."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from vigor_cli.commands import options as opt
from vigor_cli.console import console, print_json
from vigor_cli.errors import UserError

def _read_record(path: Path, question_id: str | None) -> dict:
    """One record from a .json file (an object) or a .jsonl file (one object per line)."""
    from vigor_cli.user.files import LINE_MAX_BYTES, parse_json, read_text

    records = []
    if path.suffix != ".jsonl":
        text = read_text(path, "cannot read problem file ", limit=LINE_MAX_BYTES)  # a FIFO or device: refused, not read
    if path.suffix != ".jsonl" and text.strip().startswith("{"):
        records = [parse_json(text, f"problem file {path}")]
    else:
        from vigor_cli.user.jsonl import iter_jsonl

        records = [r for _, r in iter_jsonl(path, "a problem record (a JSON object)")]
    records = [r for r in records if isinstance(r, dict)]
    if question_id is not None:
        records = [r for r in records if str(r.get("question_id")) == question_id]
        if not records:
            raise UserError(f"problem file {path} has no record with question_id {question_id!r}")
    if not records:
        raise UserError(f"problem file {path} holds no problem record")
    if len(records) > 1:
        ids = ", ".join(str(r.get("question_id")) for r in records[:5])
        raise UserError(f"problem file {path} holds {len(records)} records ({ids}, ...): "
                        "choose one with --question-id")
    return records[0]


def _read_program(path: Path) -> str:
    """A .py file is the program; any other file is a completion whose code block is taken."""
    from vigor_cli.verifiers.code import extract_code

    from vigor_cli.user.files import read_text

    text = read_text(path, "cannot read solution file ")  # bounded; a FIFO or device is refused, not waited on
    if path.suffix == ".py":
        return text
    code = extract_code(text)
    if code is None:
        raise UserError(f"solution file {path} has no ``` code block (name it .py if it is a program)")
    return code


def verify_code(
    problem: Annotated[Path, typer.Option("--problem", help="LiveCodeBench record: .json, or .jsonl (one record, or pick one with --question-id).")],
    solution: Annotated[Path, typer.Option("--solution", help="The program (.py), or a completion whose last ```python block is the program.")],
    tests: Annotated[str, opt.choice("--tests", choices=("public", "private", "all"), help="Which tests: public (the training reward), private (evaluation) or all.")] = "public",
    question_id: Annotated[Optional[str], typer.Option("--question-id", help="Record to use in a .jsonl.")] = None,
    timeout_s: Annotated[float, opt.timeout(help="Per-test wall-clock limit, seconds.")] = 6.0,
    memory_mb: Annotated[int, opt.memory_mb(help="Per-test memory headroom, MiB.")] = 512,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
    allow_weak_sandbox: Annotated[bool, typer.Option("--allow-weak-sandbox", help="Run the program even if the sandbox cannot give full isolation (no Landlock, not root, no namespaces); the verdict records the level.")] = False,
) -> None:
    """Run a program on a LiveCodeBench problem's tests in the sandbox; print each test and the reward."""
    from vigor_cli.report.verify_view import print_code_verdict
    from vigor_cli.sandbox import WeakSandboxError
    from vigor_cli.verifiers.code import CodeVerifier
    from vigor_cli.verifiers.lcb import ProblemError, load_problem

    record = _read_record(problem, question_id)
    try:
        parsed = load_problem(record)
    except ProblemError as exc:
        raise UserError(f"{problem}: {exc}") from None
    code = _read_program(solution)
    if not parsed.tests(tests):
        raise UserError(f"{problem}: problem {parsed.question_id} has no {tests} tests (try --tests all)")
    try:
        verifier = CodeVerifier(workers=0, timeout_s=timeout_s, memory_mb=memory_mb,
                                allow_weak_sandbox=allow_weak_sandbox)
    except WeakSandboxError as exc:
        raise UserError(str(exc)) from None
    with verifier:
        verdict = verifier.grade(parsed, code, tests)
    if as_json:
        print_json({"question_id": parsed.question_id, "tests_used": tests, **verdict.to_dict()})
        return
    print_code_verdict(console, parsed, tests, verdict)
