"""What `vigor verify code` and `vigor verify math` print: a row per test or per case."""

from __future__ import annotations

from typing import Any

_STATUS_STYLE = {"pass": "green", "wrong_answer": "red", "time_limit": "yellow",
                 "runtime_error": "magenta", "memory_limit": "yellow", "compile_error": "red",
                 "skipped": "dim", "sandbox_error": "bold red", "grading_error": "bold red"}
"""Style of each test status; any other status prints unstyled."""


def print_code_verdict(console: Any, parsed: Any, tests: str, verdict: Any) -> None:
    """A row per test (verdict, times, detail or the tail of stderr), then the reward.
    Everything that comes from a program or a record (details, stderr, the reason, titles)
    is printed literally (vigor_cli/console.py): never read as rich markup, and its control
    characters (a terminal's escape sequences) shown, not sent to the terminal."""
    from rich.table import Table
    from rich.text import Text

    from vigor_cli.console import literal, visible

    about = ", ".join(x for x in (parsed.platform, parsed.difficulty) if x)
    title = " ".join(x for x in (parsed.question_id, parsed.title,
                                 f"({about})" if about else "") if x) + f" - {tests} tests"
    table = Table(title=literal(title))
    for column in ("#", "type", "verdict", "wall s", "cpu s", "detail / stderr"):
        table.add_column(column, overflow="fold")
    for number, test in enumerate(verdict.tests, start=1):
        note = test.detail
        if test.stderr_head and test.status != "pass":
            tail = [line for line in test.stderr_head.splitlines()[-3:] if line.strip() not in note]
            note = "\n".join([note, *tail] if note else tail)
        table.add_row(str(number), literal(test.testtype),
                      literal(test.status, style=_STATUS_STYLE.get(test.status, "")),
                      f"{test.wall_s:.3f}", f"{test.cpu_s:.3f}", literal(note))
    console.print(table)
    if verdict.flag:
        console.print(literal(f"flagged by LiveCodeBench's ERRATA: {verdict.flag}", style="yellow"))
    console.print(Text.assemble("reward: full = ", (f"{verdict.full:g}", "bold"), ", fraction = ",
                                (f"{verdict.fraction:.3f}", "bold"), f" ({visible(verdict.reason)})"))
    style = "green" if verdict.isolation == "full" else "bold red" if verdict.isolation.startswith("weak") else "yellow"
    console.print(Text.assemble("isolation: ", (visible(verdict.isolation), style)))


def print_math_verdicts(console: Any, verdicts: list) -> None:
    """A row per case: the verdict, the reason and both parsed forms (printed literally)."""
    from rich.table import Table

    from vigor_cli.console import literal

    table = Table(title="vigor verify math")
    table.add_column("#", justify="right")
    table.add_column("verdict")
    table.add_column("reason")
    table.add_column("gold parsed", overflow="fold")
    table.add_column("pred parsed", overflow="fold")
    for i, v in enumerate(verdicts, start=1):
        mark = "[green]correct[/]" if v.correct else "[red]wrong[/]"
        table.add_row(str(i), mark, literal(v.reason), literal(v.gold_parsed), literal(v.pred_parsed))
    console.print(table)
    if len(verdicts) > 1:
        right = sum(v.correct for v in verdicts)
        console.print(f"{right}/{len(verdicts)} correct")
