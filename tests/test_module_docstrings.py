"""Every module says what it is for, in a few lines: a docstring of at most MAX_LINES lines
that tells no history (no "issue N"). How a module works, its reasons and its numbers are in
docs/modules.md, results in BENCHMARKS.md."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("vigor_cli", "verifiers", "sandbox", "bench")
MAX_LINES = 12
HISTORY = re.compile(r"\bissues? #?\d+", re.I)
"""A reference to the tracker's history ("since issue 12", "(issue 33)")."""

BEING_SPLIT: set[str] = set()
"""Modules exempt while another branch splits them (none now)."""


def modules() -> list[Path]:
    return sorted(p for top in FOLDERS for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def module_docstring(source: str) -> str | None:
    """The module's docstring: its first statement when that is a string, read from the first
    tokens (the whole file is not parsed)."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING):
            continue
        if token.type == tokenize.STRING:
            value = ast.literal_eval(token.string)
            return value if isinstance(value, str) else None
        return None
    return None


def docstring_problems(text: str | None) -> list[str]:
    """What is wrong with one module docstring (empty: nothing)."""
    if not text or not text.strip():
        return ["no docstring"]
    problems = []
    lines = text.strip().splitlines()
    if len(lines) > MAX_LINES:
        problems.append(f"{len(lines)} lines (at most {MAX_LINES}: the rest belongs in docs/modules.md)")
    problems += [f"history: {m.group(0)!r}" for m in HISTORY.finditer(text)]
    return problems


def test_every_module_says_what_it_is_for_in_a_few_lines():
    found = []
    for path in modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel in BEING_SPLIT:
            continue
        problems = docstring_problems(module_docstring(path.read_text(encoding="utf-8")))
        found += [f"{rel}: {p}" for p in problems]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("text, problem", [
    (None, "no docstring"),
    ("   ", "no docstring"),
    ("What it is for.\n" + "more\n" * MAX_LINES, "lines"),
    ("What it is for; the loop moved here in issue 23.", "history: 'issue 23'"),
    ("What it is for (issues #12).", "history"),
])
def test_the_docstring_rule_catches(text, problem):
    assert any(problem in p for p in docstring_problems(text))


def test_the_docstring_is_read_as_python_reads_it():
    for path in modules()[::10]:
        source = path.read_text(encoding="utf-8")
        assert module_docstring(source) == ast.get_docstring(ast.parse(source), clean=False), path
    assert module_docstring("# a comment\n\nx = 1\n") is None


def test_the_docstring_rule_passes_a_short_one():
    assert docstring_problems("What it is for.\n\nHow to call it, in two lines:\n    f(x)\n") == []
    assert all(path.exists() for path in map(ROOT.joinpath, BEING_SPLIT))  # no stale entry
