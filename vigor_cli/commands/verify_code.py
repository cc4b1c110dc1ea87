"""`vigor verify code`: grade one program against a LiveCodeBench problem, per test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from vigor_cli.console import console
from vigor_cli.errors import UserError

_STATUS_STYLE = {"pass": "green", "wrong_answer": "red", "time_limit": "yellow",
                 "runtime_error": "magenta", "memory_limit": "yellow", "compile_error": "red",
                 "skipped": "dim"}


def _read_record(path: Path, question_id: str | None) -> dict:
    """One record from a .json file (an object) or a .jsonl file (one object per line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read problem file {path}: {exc}") from None
    records = []
    stripped = text.strip()
    if stripped.startswith("{") and path.suffix != ".jsonl":
        try:
            records = [json.loads(stripped)]
        except ValueError as exc:
            raise UserError(f"problem file {path} is not valid JSON: {exc}") from None
    else:
        from vigor_cli.jsonl import iter_jsonl

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

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read solution file {path}: {exc}") from None
    if path.suffix == ".py":
        return text
    code = extract_code(text)
    if code is None:
        raise UserError(f"solution file {path} has no ``` code block (name it .py if it is a program)")
    return code


def verify_code(
    problem: Path = typer.Option(..., "--problem", help="LiveCodeBench record: .json, or .jsonl "
                                 "(one record, or pick one with --question-id)."),
    solution: Path = typer.Option(..., "--solution", help="The program (.py), or a completion "
                                  "whose last ```python block is the program."),
    tests: str = typer.Option("public", "--tests", help="Which tests: public (the training "
                              "reward), private (evaluation) or all."),
    question_id: Optional[str] = typer.Option(None, "--question-id", help="Record to use in a .jsonl."),
    timeout_s: float = typer.Option(6.0, "--timeout", help="Per-test wall-clock limit, seconds."),
    memory_mb: int = typer.Option(512, "--memory-mb", help="Per-test memory headroom, MiB."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    allow_weak_sandbox: bool = typer.Option(
        False, "--allow-weak-sandbox", help="Run the program even if the sandbox cannot give "
        "full isolation (no Landlock, not root, no namespaces); the verdict records the level."),
) -> None:
    """Run a program on a LiveCodeBench problem's tests in the sandbox; print each test and the reward."""
    from vigor_cli.sandbox import WeakSandboxError
    from vigor_cli.verifiers.code import CodeVerifier
    from vigor_cli.verifiers.lcb import ProblemError, load_problem

    if tests not in ("public", "private", "all"):
        raise UserError(f"--tests must be 'public', 'private' or 'all', not {tests!r}")
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
        console.print_json(json.dumps({"question_id": parsed.question_id, "tests_used": tests,
                                       **verdict.to_dict()}))
        return
    from rich.table import Table

    about = ", ".join(x for x in (parsed.platform, parsed.difficulty) if x)
    table = Table(title=" ".join(x for x in (parsed.question_id, parsed.title,
                                             f"({about})" if about else "") if x)
                  + f" - {tests} tests")
    for column in ("#", "type", "verdict", "wall s", "cpu s", "detail / stderr"):
        table.add_column(column, overflow="fold")
    for number, test in enumerate(verdict.tests, start=1):
        style = _STATUS_STYLE.get(test.status, "")
        note = test.detail
        if test.stderr_head and test.status != "pass":
            tail = [line for line in test.stderr_head.splitlines()[-3:] if line.strip() not in note]
            note = "\n".join([note, *tail] if note else tail)
        table.add_row(str(number), test.testtype, f"[{style}]{test.status}[/]",
                      f"{test.wall_s:.3f}", f"{test.cpu_s:.3f}", note)
    console.print(table)
    if verdict.flag:
        console.print(f"[yellow]flagged by LiveCodeBench's ERRATA: {verdict.flag}[/]")
    console.print(f"reward: full = [bold]{verdict.full:g}[/], fraction = [bold]"
                  f"{verdict.fraction:.3f}[/] ({verdict.reason})", highlight=False)
    style = "green" if verdict.isolation == "full" else "bold red"
    console.print(f"isolation: [{style}]{verdict.isolation}[/]", highlight=False)
