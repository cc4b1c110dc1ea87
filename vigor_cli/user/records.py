"""Checks of one data record's fields (training data, benchmarks, verify cases), before use.

A record read from a user's file becomes a prompt and a gold answer; a value of the wrong
kind would otherwise be turned into text silently (``str(None)`` is the answer ``"None"``,
``str(float("nan"))`` is ``"nan"``, an object becomes its Python repr) or stall the run (a
100 MB "question" is tokenised for minutes). :func:`check_record` refuses each with one line
naming the record (``file:line`` or ``file record N``) and the field; every loader of records
calls it with the fields it reads (see ``vigor_cli/tasks/``).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from vigor_cli.errors import UserError

MAX_TEXT_CHARS = 1 << 20
"""Longest question, answer or completion text (1 Mi characters; MATH problems are < 5 k,
LiveCodeBench statements < 20 k). Test data fields (LiveCodeBench's tests) are not text."""


def kind_of(value: Any) -> str:
    """A value's kind in a user's words: 'null', 'NaN', 'an object', 'a list', 'a number', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "infinite"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def unencodable(text: str) -> str | None:
    """Why ``text`` cannot be encoded (and so tokenised): a lone surrogate, which a JSON
    ``\\ud800`` escape without its pair decodes to; None when it can be."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"text holding a lone surrogate \\u{ord(text[e.start]):04x} at character {e.start + 1} (half of "
                "a character, which UTF-8 cannot encode: a \\ud800-style escape without its pair?)")
    return None


def _text_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return kind_of(value)
    if len(value) > MAX_TEXT_CHARS:
        return f"{len(value):,} characters long (the limit is {MAX_TEXT_CHARS:,})"
    return unencodable(value)


def _answer_problem(value: Any, lists: bool) -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if math.isfinite(value) else kind_of(value)
    if lists and isinstance(value, (list, tuple)):
        if not value:
            return "an empty list"
        return next((p for p in (_answer_problem(v, False) for v in value) if p), None)
    return _text_problem(value)


def check_record(row: Any, where: str, *, text: Iterable[str] = (), answers: Iterable[str] = (),
                 required: Iterable[str] = (), data: Iterable[str] = ()) -> dict:
    """``row`` when the fields a loader reads hold usable values; else one UserError line.

    - ``text``: text fields (a question, a solution, a completion): a string of at most
      :data:`MAX_TEXT_CHARS` characters;
    - ``answers``: gold answers: text, a finite number, or a non-empty list of those;
    - ``data``: strings of any length (e.g. encoded test cases);
    - ``required``: fields that must be present.

    A field that is absent is left to the loader (it knows the alternatives, such as
    ``problem`` or ``question``); a field that is present must hold a usable value, so a
    ``null`` gold answer, a NaN or an object where text belongs is refused, naming it.
    ``where`` names the record, e.g. ``data.jsonl:7`` or ``data.parquet record 7``.
    """
    if not isinstance(row, dict):
        raise UserError(f"{where}: {kind_of(row)}, expected a record (a JSON object)")
    for name in required:
        if name not in row:
            raise UserError(f"{where}: missing field {name!r}")
    checks = [(n, lambda v: _text_problem(v), "text") for n in text]
    checks += [(n, lambda v: _answer_problem(v, True), "an answer (text or a number)") for n in answers]
    checks += [(n, lambda v: kind_of(v) if not isinstance(v, str) else None, "text") for n in data]
    for name, problem_of, expected in checks:
        if name in row:
            problem = problem_of(row[name])
            if problem is not None:
                raise UserError(f"{where}: field {name!r} is {problem}; expected {expected}")
    return row
