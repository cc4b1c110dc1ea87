"""Math answer rewards: Math-Verify equivalence, repaired and guarded, time-bounded.

How one completion is graded (:func:`grade`):

1. Plain numbers on both sides (``12``, ``-0.5``, ``3/4``, ``\\frac{3}{4}``) are compared
   exactly without Math-Verify when the verdict is certain (:func:`_fast_grade`).
2. The answer: boxes written as one list ("\\boxed{1} and \\boxed{2}") are one set of
   answers, as Math-Verify reads them, when the gold has several parts; otherwise the
   last ``\\boxed{}`` (a bare list of boxes is a hedge and matches no one-part gold), unless
   a "final answer is ..." follows it; without a box, Math-Verify's own extraction (LaTeX,
   then plain expressions) over the whole completion. See :func:`_extract_answer`.
3. Gold and answer are parsed by Math-Verify as ``\\boxed{...}`` and compared with
   ``verify(gold, answer)`` (gold first: the relation is not symmetric). Golds are
   parsed once per process and cached. Before parsing, what Math-Verify 0.9 misreads is
   rewritten (:func:`_prepare`): ``\\mathrm{e}``/``\\mathrm{i}`` (dropped as units) become
   ``e``/``i``; primes after a letter (``E'``, ``f'(x)``, dropped) become ``^{\\prime}``;
   digit groups split by spaces (``1 000``, read as ``1*0``) are joined; a mixed number
   (``3128 1/2``, read as ``3128*1/2``) becomes ``3128\\frac{1}{2}``.
4. Guards veto the known wrong accepts of Math-Verify 0.9 where a cheap check exists:

   - extraction that stops early inside ``\\mathrm{...}`` / ``\\text{...}``
     ("\\frac{3}{\\mathrm{x}}" is read as the string "\\frac{3}{"; two such truncated
     strings compare equal): a parse whose matched text has unbalanced braces is redone
     with the ``\\mathrm``/``\\text`` wrappers removed.
   - numbers compared as floats (``1/2004!`` equals ``1/2006!`` to 15 digits): when both
     sides are exact rationals (integers, fractions, factorials, integer powers; no
     decimal point) they must be exactly equal.
   - a percent sign dropped (``5\\%`` accepted for gold ``5``): an answer with a percent
     sign against a gold without one is read as x/100, unless the problem's text (the
     optional ``problem`` argument) asks for a percentage ("What percent ...?"): then
     ``20\\%`` also matches a gold ``20``.
   - a number-base subscript dropped (``1011_3`` accepted for gold ``1011_2``): when both
     carry a base, the values in those bases decide (so ``11_{10}`` matches ``1011_2``).
     A bare answer ("1011") against a gold with a base keeps Math-Verify's digit match.

Time: Math-Verify's own timeouts use SIGALRM (main thread only, and they cancel any
outer alarm), so they are off (``parsing_timeout=None``, ``timeout_seconds=None``).
:class:`MathVerifier` runs the grading in worker processes forked from a zygote of its own (a
fresh interpreter that has imported sympy and Math-Verify: :class:`_Zygote`; not
multiprocessing's forkserver, which left a ``pymp-*`` folder in the temp directory when its
parent was SIGKILLed, and with its resource tracker took seconds of interpreter shutdown to
follow it). The zygote and every worker die within moments of the process that owns them,
whatever killed it (a pidfd the zygote polls; :func:`sandbox.lifeline.die_with` in each
worker). A worker that passes the limit on one item is
killed at once (a replacement starts when there is more work), that item scores 0 with
reason ``timeout``, and its unfinished items go to other workers. Exceptions (also MemoryError under the workers' address-space
limit) score 0 with reason ``error: ...``. Nothing raises or hangs. For a few cases
from a single-threaded program (``vigor verify math``), :func:`grade_forked` grades in a
child forked from the caller under the same limit, without starting a pool.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from fractions import Fraction
from multiprocessing.connection import Connection, wait
from typing import Sequence, Union

from vigor_cli.verifiers.math_answers import all_boxed, boxed_spans, split_top_level

Gold = Union[str, Sequence[str]]
"""One gold answer, or several (OlympiadBench multi-answer problems: see grade_multi)."""

DEFAULT_MAX_WORKERS = 16
"""``workers=0`` means one worker per core, at most this many."""

WORKER_EXTRA_MEMORY = 1 << 30
"""Address space a worker may grow by past its size at start (bytes): MemoryError, not swap."""

GOLD_CACHE_SIZE = 8192
"""Parsed gold answers kept per worker process."""

STARTUP_TIMEOUT_S = 120.0
"""How long a new worker may take to import Math-Verify and report ready."""

SHOW_CHARS = 200
"""Parsed forms in verdicts are cut to this many characters."""


@dataclass
class MathVerdict:
    reward: float
    """1.0 when the answer is equivalent to the gold, else 0.0."""
    reason: str
    """'correct', 'wrong answer' (with the guard that vetoed, if one did), 'no answer found',
    'timeout', or 'error: <exception>'."""
    gold_parsed: str = ""
    pred_parsed: str = ""

    @property
    def correct(self) -> bool:
        return self.reward == 1.0


# --------------------------------------------------------------------------------------
# Grading in this process (no time limit: workers call these; tests call them directly)
# --------------------------------------------------------------------------------------

_MV = None


def _math_verify():
    """Math-Verify, imported on first use (it pulls in sympy: about a second) and quietened."""
    global _MV
    if _MV is None:
        import math_verify

        for name in ("math_verify", "latex2sympy2_extended"):
            logging.getLogger(name).setLevel(logging.ERROR)
        _MV = math_verify
    return _MV


_ROMAN_CONSTANT = re.compile(r"\\(?:mathrm|text|textrm|rm)\s*\{\s*([ei])\s*\}")
_ROMAN_WRAPPER = re.compile(r"\\(?:mathrm|text|textrm|textit|mathit|operatorname)\s*\{([^{}]*)\}")
_PERCENT = re.compile(r"\\?%")
_BASE_NUMBER = re.compile(r"([0-9A-Z]*[0-9][0-9A-Z]*)_\{?(\d{1,2})\}?")
"""``1011_2``, ``4210_{5}``, ``1A_{11}``: digits (at least one 0-9, letters upper case) and a base."""


_PRIME = re.compile(r"(?<=[A-Za-z])('+)(?![A-Za-z])")
"""``E'``, ``f'(x)``, ``y''``: primes after a letter (not "let's", not 5' feet)."""
_THOUSANDS = re.compile(r"(?<![\d.,^_])(\d{1,3})((?:(?:\\,|\\ |\\;|~| )\d{3})+)(?![\d])")
"""``1 000``, ``12\\,345\\,678``: groups of three digits after a space (or thin space)."""
_THOUSANDS_SEP = re.compile(r"\\,|\\ |\\;|~| ")
_MIXED = re.compile(r"(?<![\w.\\/^_])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\w./])")
"""``3128 1/2``: a whole number and a proper fraction."""


def _mixed(m: re.Match) -> str:
    whole, num, den = m.group(1), int(m.group(2)), int(m.group(3))
    if not 0 < num < den:
        return m.group(0)
    return f"{whole}\\frac{{{num}}}{{{den}}}"


def _prepare(text: str) -> str:
    """Rewrite what Math-Verify 0.9 misreads before it parses (gold and completion alike).

    - ``\\mathrm{e}`` / ``\\mathrm{i}`` -> ``e`` / ``i`` (else dropped as units);
    - ``E'`` -> ``E^{\\prime}`` (else the prime is dropped: ``f'(x)`` read as ``f(x)``);
    - ``1 000`` -> ``1000`` (else read as the product ``1*0``);
    - ``3128 1/2`` -> ``3128\\frac{1}{2}`` (a mixed number; else ``3128*1/2``).
    """
    text = _ROMAN_CONSTANT.sub(r"\1", text)
    if text.rstrip().endswith("\\}") and not _balanced(text):  # "\\boxed{185\\}": a stray backslash
        closed = text.rstrip()[:-2] + "}"
        if _balanced(closed):
            text = closed
    if "'" in text:
        text = _PRIME.sub(lambda m: "^{" + "\\prime" * len(m.group(1)) + "}", text)
    text = _THOUSANDS.sub(lambda m: m.group(1) + _THOUSANDS_SEP.sub("", m.group(2)), text)
    if "/" in text:
        text = _MIXED.sub(_mixed, text)
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for i, c in enumerate(text):
        if c == "{" and text[i - 1 : i] != "\\":
            depth += 1
        elif c == "}" and text[i - 1 : i] != "\\":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


_TRAILING_BACKSLASH = re.compile(r"(?<!\\)\\\s*$")
"""A stray backslash closing an answer ("185\\"): dropped, else the parse fails."""


def _parse_boxed(answer: str) -> list:
    """Math-Verify parse of one answer's LaTeX (as ``\\boxed{answer}``), guarded against
    dropped ``\\mathrm{e}`` and against extraction stopping inside ``\\mathrm{...}``."""
    mv = _math_verify()
    text = _TRAILING_BACKSLASH.sub("", _prepare(answer))
    latex_only = [mv.LatexExtractionConfig(boxed_match_priority=0)]
    parsed = mv.parse("\\boxed{" + text + "}", extraction_config=latex_only, parsing_timeout=None)
    if any(isinstance(p, str) and not _balanced(p) for p in parsed) or (not parsed and "\\" in text):
        unwrapped = _ROMAN_WRAPPER.sub(r"{\1}", text)
        if unwrapped != text:
            parsed = mv.parse("\\boxed{" + unwrapped + "}", extraction_config=latex_only, parsing_timeout=None)
    if not parsed:  # plain text such as "x**2 + 1"
        parsed = mv.parse(answer, parsing_timeout=None)
    if any(isinstance(p, str) and not _balanced(p) for p in parsed):
        return []  # a truncated parse would compare equal to any other truncated parse
    return parsed


_gold_cache: OrderedDict[str, list] = OrderedDict()


def _parse_gold(gold: str) -> list:
    """Parsed gold, from the per-process cache when seen before."""
    hit = _gold_cache.get(gold)
    if hit is not None:
        _gold_cache.move_to_end(gold)
        return hit
    parsed = _parse_boxed(gold)
    _gold_cache[gold] = parsed
    if len(_gold_cache) > GOLD_CACHE_SIZE:
        _gold_cache.popitem(last=False)
    return parsed


_ANSWER_SEPARATORS = re.compile(r"\\text\s*\{\s*(?:and|or)\s*\}|\\(?:quad|qquad)|\band\b|\bor\b")
_FINAL_ANSWER = re.compile(r"final answer is", re.IGNORECASE)
_BETWEEN_MARKUP = re.compile(r"\\(?:text|mathrm|textbf)\s*\{([^{}]*)\}|\\[()\[\]]|\\q?quad|\\[,;: ]|\$")
_SEPARATOR = re.compile(r"\b(?:and|or)\b|[,;]")
_PURE_SEPARATOR = re.compile(r"[\s,;.]*(?:\b(?:and|or)\b)?[\s,;.]*")
MAX_WORDS_BETWEEN_BOXES = 4
"""Boxes are one answer list when what lies between them is short: under 10 characters, or
a separator (",", ";", "and", "or") among at most this many words (under 70 characters)."""


def _joined_boxes(text: str, pure: bool = False) -> list[str]:
    """The last box and the boxes before it that Math-Verify would read as one answer list.

    Math-Verify joins a box with the one before it when fewer than 10 characters lie
    between them, or fewer than 70 with a separator. Here the second case also needs at
    most :data:`MAX_WORDS_BETWEEN_BOXES` words ("\\boxed{1} papers and \\boxed{2} bins" is
    a list; "\\boxed{1} and and and or thus but \\boxed{2}" is not). Repeated neighbours
    count once. ``pure``: only boxes with nothing but separators between them
    ("\\boxed{1} or \\boxed{2}", "\\boxed{1}, \\boxed{2}").
    """
    spans = boxed_spans(text)
    if not spans:
        return []
    items = [spans[-1][2]]
    for (_, end, content), (start, _, _) in zip(reversed(spans[:-1]), reversed(spans[1:])):
        between = text[end:start]
        if pure:
            plain = _BETWEEN_MARKUP.sub(lambda m: " " + (m.group(1) or "") + " ", between)
            if not _PURE_SEPARATOR.fullmatch(plain):
                break
        elif len(between) >= 10:
            plain = _BETWEEN_MARKUP.sub(lambda m: " " + (m.group(1) or "") + " ", between)
            words = re.findall(r"[A-Za-z]+|\(\w\)", plain)
            if len(between) >= 70 or not _SEPARATOR.search(plain) or len(words) > MAX_WORDS_BETWEEN_BOXES:
                break
        if content != items[0]:
            items.insert(0, content)
    return items


def _several_parts(gold: str, gold_parsed: list) -> bool:
    """Whether a gold answer has several parts (a list of answers, a set of solutions)."""
    first = gold_parsed[0] if gold_parsed else None
    if type(first).__name__ == "FiniteSet" and len(first) > 1:
        return True
    return len(split_top_level(_ANSWER_SEPARATORS.sub(",", gold), (",", ";"))) > 1


def _extract_answer(completion: str, several: bool = False) -> tuple[list, str]:
    """(parsed answer, its text) of a completion.

    - Boxes written as one list are read as one set of answers, as Math-Verify reads them:
      when the gold has several parts (``several``), boxes with a short text between them
      ("\\boxed{1} and \\boxed{2}", "\\boxed{1} papers and \\boxed{2} bins"; see
      :func:`_joined_boxes`); otherwise only boxes with nothing but a separator between
      them ("\\boxed{4} or \\boxed{5}": a hedge, which then matches no single gold).
    - Otherwise the last ``\\boxed{}`` is the answer (a correction after an earlier box
      wins), unless a "final answer is ..." follows it; without a box, Math-Verify's own
      extraction (LaTeX, then plain expressions) over the whole completion.
    """
    text = _prepare(completion)
    spans = boxed_spans(text)
    if spans:
        items = _joined_boxes(text, pure=not several)
        if len(items) > 1:  # a list of answers; against a one-part gold, a hedge that fails
            answer = ", ".join(items)
            parsed = _parse_boxed(answer)
            if parsed:
                return parsed, answer
        tail = text[spans[-1][1] :]
        if _FINAL_ANSWER.search(tail):
            parsed = _math_verify().parse(tail, parsing_timeout=None)
            if parsed and not any(isinstance(p, str) and not _balanced(p) for p in parsed):
                return parsed, parsed[-1] if isinstance(parsed[-1], str) else tail
        parsed = _parse_boxed(spans[-1][2])
        if parsed:
            return parsed, spans[-1][2]
    parsed = _math_verify().parse(text, parsing_timeout=None)
    if any(isinstance(p, str) and not _balanced(p) for p in parsed):
        return [], ""
    source = parsed[-1] if parsed and isinstance(parsed[-1], str) else text
    return parsed, source


def _show(parsed: list) -> str:
    if not parsed:
        return ""
    return str(parsed[0])[:SHOW_CHARS]


def _exact_rational(parsed: list):
    """The exact sympy Rational a parse stands for, or None (symbols, floats, sets, ...)."""
    import sympy

    expr = parsed[0] if parsed else None
    if not isinstance(expr, sympy.Basic) or expr.free_symbols or expr.atoms(sympy.Float):
        return None
    try:
        value = expr.doit()
    except Exception:
        return None
    return value if isinstance(value, sympy.Rational) else None


def _base_value(text: str) -> int | None:
    """Decimal value of ``digits_{base}`` when text is one such number; None otherwise."""
    m = _BASE_NUMBER.fullmatch(text.strip().strip("$").strip())
    if not m:
        return None
    digits, base = m.group(1), int(m.group(2))
    if not 2 <= base <= 36:
        return None
    try:
        return int(digits, base)
    except ValueError:
        return -1  # digits not valid in that base: matches nothing


_ASKS_PERCENT = re.compile(
    r"\b(?:what|which)\s+(?:\w+\s+){0,3}?percent(?:age)?s?\b"
    r"|\bhow\s+many\s+percent\b"
    r"|\b(?:as|in|into)\s+(?:a\s+)?percent(?:age)?s?\b"
    r"|\bpercent(?:age)?\s+(?:is|was|are|were|will|would|does|did|do|of)\b[^.?!]*\?"
    r"|\(\s*in\s*\\?%\s*\)",
    re.IGNORECASE,
)
"""A question that asks for a percentage: "What percent of ...?", "by what percentage",
"Express your answer as a percent", "(in %)". A percentage only mentioned in the
statement ("20% of the students ...") does not count."""


def asks_for_percent(problem: str | None) -> bool:
    """Whether the problem text asks for its answer as a percentage."""
    return bool(problem) and _ASKS_PERCENT.search(problem) is not None


def _guard(gold: str, gold_parsed: list, answer: str, pred_parsed: list, problem: str | None = None) -> str | None:
    """Name of the guard that rejects an answer Math-Verify accepted, or None."""
    mv = _math_verify()
    if _PERCENT.search(answer) and not _PERCENT.search(gold):
        as_fraction = _PERCENT.sub(r"\\cdot\\frac{1}{100}", answer)
        fraction_parsed = _parse_boxed(as_fraction)
        if not fraction_parsed or not mv.verify(gold_parsed, fraction_parsed, timeout_seconds=None):
            if not asks_for_percent(problem):
                return "percent"
            # "What percent ...?" with gold 20: "20\\%" is the same answer, "0.2\\%" is not.
            bare = _parse_boxed(_PERCENT.sub("", answer))
            if not bare or not mv.verify(gold_parsed, bare, timeout_seconds=None):
                return "percent"
            return _guard(gold, gold_parsed, _PERCENT.sub("", answer), bare)  # the number itself
    if _PERCENT.search(gold):
        return None  # "50\\%" is both 50 and 1/2: Math-Verify's percent rule decides
    g_exact, p_exact = _exact_rational(gold_parsed), _exact_rational(pred_parsed)
    if g_exact is not None and p_exact is not None and g_exact != p_exact:
        return "exact value"
    return None


def _compare(gold: str, gold_parsed: list, answer: str, pred_parsed: list, problem: str | None = None) -> tuple[bool, str]:
    g_base, p_base = _base_value(gold), _base_value(answer)
    if g_base is not None and p_base is not None:  # 1011_2 vs 11_{10}: compare the values
        return (True, "correct") if g_base == p_base and g_base >= 0 else (False, "wrong answer (number base)")
    if not _math_verify().verify(gold_parsed, pred_parsed, timeout_seconds=None):
        return False, "wrong answer"
    vetoed = _guard(gold, gold_parsed, answer, pred_parsed, problem)
    if vetoed:
        return False, f"wrong answer ({vetoed} guard)"
    return True, "correct"


_PLAIN_NUMBER = re.compile(
    r"(-?)(?:(\d{1,60})|(\d{0,60}\.\d{1,60})|(\d{1,60})\s*/\s*(\d{1,60})"
    r"|\\[dt]?frac\s*\{\s*(\d{1,60})\s*\}\s*\{\s*(\d{1,60})\s*\})"
)
"""``12``, ``-0.5``, ``3/4``, ``\\frac{3}{4}``: numbers whose value needs no parser."""


def _plain_value(text: str):
    """The exact value (Fraction) of a plain number, or None for anything else."""
    m = _PLAIN_NUMBER.fullmatch(text.strip())
    if not m:
        return None
    sign, integer, decimal, num, den, fnum, fden = m.groups()
    if integer is not None:
        value = Fraction(int(integer))
    elif decimal is not None:
        value = Fraction(decimal)
    else:
        n, d = (num, den) if num is not None else (fnum, fden)
        if int(d) == 0:
            return None
        value = Fraction(int(n), int(d))
    return -value if sign else value


def _fast_grade(gold: str, completion: str) -> MathVerdict | None:
    """The verdict without Math-Verify when it is certain, else None.

    Only for a plain-number gold and a completion whose answer (its last box, with no
    "final answer is" after it) is a plain number: exactly equal values are correct (as
    Math-Verify finds them); two exact numbers without a decimal point that differ are
    wrong (the exact-value guard's verdict). Anything else (a decimal that differs, which
    Math-Verify compares to 6 digits) goes to the full grader.
    """
    g = _plain_value(gold)
    if g is None:
        return None
    spans = boxed_spans(completion)
    if not spans or not _balanced(completion):
        return None
    start, end, box = spans[-1]
    if "'" in completion[start:end] or _FINAL_ANSWER.search(completion, end):
        return None
    if len(spans) > 1 and len(_joined_boxes(completion, pure=True)) > 1:
        return None  # "\\boxed{4} or \\boxed{5}": a list, for the full grader
    p = _plain_value(box)
    if p is None:
        return None
    shown_gold, shown_pred = str(g), str(p)
    if g == p:
        return MathVerdict(1.0, "correct", shown_gold, shown_pred)
    if "." not in gold and "." not in box:
        return MathVerdict(0.0, "wrong answer", shown_gold, shown_pred)
    return None


def grade(gold: str, completion: str, problem: str | None = None, *, question: str | None = None) -> MathVerdict:
    """Grade one completion against one gold answer in this process (no time limit).

    ``problem`` (optional; ``question`` is the same) is the question's text: when it asks
    for a percentage, a bare gold ``20`` also matches ``20\\%``.
    """
    problem = problem if problem is not None else question
    quick = _fast_grade(gold, completion)
    if quick is not None:
        return quick
    gold_parsed = _parse_gold(gold)
    if not gold_parsed:
        return MathVerdict(0.0, "error: gold answer does not parse", "", "")
    pred_parsed, answer = _extract_answer(completion, _several_parts(gold, gold_parsed))
    if not pred_parsed:
        return MathVerdict(0.0, "no answer found", _show(gold_parsed), "")
    ok, reason = _compare(gold, gold_parsed, answer, pred_parsed, problem)
    return MathVerdict(1.0 if ok else 0.0, reason, _show(gold_parsed), _show(pred_parsed))


def _answer_items(completion: str, count: int) -> list[str] | None:
    """The completion's answers for a problem with ``count`` answers (see grade_multi)."""
    boxes = all_boxed(completion)
    if not boxes:
        return None
    items = split_top_level(_ANSWER_SEPARATORS.sub(",", boxes[-1]), (",", ";"))
    if len(items) != count and len(boxes) >= count:
        items = boxes[-count:]
    return items


def grade_multi(golds: Sequence[str], completion: str, problem: str | None = None, *, question: str | None = None) -> MathVerdict:
    """Grade a problem with several answers (OlympiadBench ``is_multiple_answer``).

    Rule: the answers are the last ``\\boxed{}`` split at top-level commas (also ';',
    'and', 'or'); if that does not give as many answers as there are golds but the
    completion has at least that many boxes, the last ``len(golds)`` boxes are the
    answers. Correct when the answers match the golds one to one, in any order (each gold
    matched by a different answer, no answer left over; repeated golds need repeated
    answers). Without any box, the golds joined by commas are graded as one answer.
    """
    golds = list(golds)
    problem = problem if problem is not None else question
    if len(golds) == 1:
        return grade(golds[0], completion, problem)
    joined = ", ".join(golds)
    items = _answer_items(completion, len(golds))
    if items is None:
        verdict = grade(joined, completion, problem)
        verdict.gold_parsed = joined[:SHOW_CHARS]
        return verdict
    parsed_items = [(item, _parse_boxed(item)) for item in items]
    shown = ", ".join(_show(p) or item for item, p in parsed_items)[:SHOW_CHARS]
    if len(items) != len(golds):
        return MathVerdict(0.0, f"wrong answer ({len(items)} answers, expected {len(golds)})", joined[:SHOW_CHARS], shown)
    unused = list(range(len(items)))
    for gold in golds:
        gold_parsed = _parse_gold(gold)
        if not gold_parsed:
            return MathVerdict(0.0, f"error: gold answer {gold!r} does not parse", joined[:SHOW_CHARS], shown)
        match = next((i for i in unused if parsed_items[i][1] and _compare(gold, gold_parsed, *parsed_items[i], problem)[0]), None)
        if match is None:
            return MathVerdict(0.0, f"wrong answer (no answer matches {gold!r})"[:SHOW_CHARS], joined[:SHOW_CHARS], shown)
        unused.remove(match)
    return MathVerdict(1.0, "correct", joined[:SHOW_CHARS], shown)


def grade_any(gold: Gold, completion: str, problem: str | None = None, *, question: str | None = None) -> MathVerdict:
    """grade() for one gold string, grade_multi() for a list of golds."""
    problem = problem if problem is not None else question
    if isinstance(gold, str):
        return grade(gold, completion, problem)
    return grade_multi(list(gold), completion, problem)


# --------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------


def _limit_memory(extra: int) -> None:
    import resource

    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, size + extra))


def _worker_main(conn, extra_memory: int, parent_pid: int | None = None) -> None:
    """Grade chunks of (index, gold, completion[, problem]) sent on ``conn``; one reply per item, in order.

    One reply per item (not per chunk) lets the parent time each item separately.
    ``parent_pid``: the process that owns this worker; when it dies (SIGKILL included) the
    worker dies too, even in the middle of a slow item (its real parent is the forkserver).
    """
    _child_setup(extra_memory, parent_pid)
    _math_verify()
    conn.send("ready")
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for item in chunk:
            reply = _grade_reply(item)
            try:
                conn.send(reply)
            except (BrokenPipeError, OSError):
                return


def _child_setup(extra_memory: int, parent_pid: int | None) -> None:
    """A grading process's start (pool worker or one-shot child): Ctrl-C and a group's SIGTERM
    are the parent's to handle (it finishes the step, which needs this process); it dies with
    the parent (die_with) and under a memory cap."""
    import signal

    from vigor_cli.sandbox.lifeline import die_with

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if parent_pid is not None:
        die_with(parent_pid)
    try:
        _limit_memory(extra_memory)
    except (OSError, ValueError):
        pass  # no /proc or no rlimits: the time limit still holds


def _grade_reply(item: tuple) -> tuple:
    """(index, reward, reason, gold_parsed, pred_parsed) for one (index, gold, completion[, problem])."""
    index = item[0]
    try:
        gold, completion = item[1], item[2]
        problem = item[3] if len(item) > 3 else None
        v = grade_any(gold, completion, problem)
        return (index, v.reward, v.reason, v.gold_parsed, v.pred_parsed)
    except BaseException as e:  # noqa: BLE001 - RecursionError, MemoryError, sympy bugs
        try:
            detail = str(e)[:120]
        except Exception:  # noqa: BLE001 - str() of a sympy object can fail too
            detail = ""
        return (index, 0.0, f"error: {type(e).__name__}: {detail}", "", "")


def _forked_child(conn, items: list, extra_memory: int, parent_pid: int | None = None) -> None:
    _child_setup(extra_memory, parent_pid)
    for item in items:
        try:
            conn.send(_grade_reply(item))
        except (BrokenPipeError, OSError):
            return


def grade_forked(pairs: Sequence[tuple], timeout_s: float = 5.0, extra_memory: int = WORKER_EXTRA_MEMORY) -> list[MathVerdict]:
    """Grade a few (gold, completion[, problem]) cases without a worker pool: Math-Verify is
    imported here, and a child forked from this process grades the cases one after another.

    The limit is enforced: a case that takes longer than ``timeout_s`` gets reason
    ``timeout``, its child is killed, and a fresh child goes on with the cases after it.
    No forkserver and no pool start, so one case costs the import plus milliseconds. For
    single-threaded callers (the CLI); a threaded program should use :class:`MathVerifier`.
    """
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    items = []
    for i, pair in enumerate(pairs):
        gold = tuple(str(g) for g in pair[0]) if isinstance(pair[0], (list, tuple)) else str(pair[0])
        problem = pair[2] if len(pair) > 2 and pair[2] is not None else None
        items.append((i, gold, str(pair[1]), None if problem is None else str(problem)))
    quick = [_fast_grade(gold, completion) if isinstance(gold, str) else None for _, gold, completion, _ in items]
    if all(v is not None for v in quick):
        return quick  # type: ignore[return-value]  # plain numbers: no import, no child
    _math_verify()  # the children inherit it
    ctx = mp.get_context("fork")
    results: list[MathVerdict] = []
    while len(results) < len(items):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_forked_child,
                           args=(child, items[len(results) :], extra_memory, os.getpid()), daemon=True)
        proc.start()
        child.close()
        try:
            while len(results) < len(items):
                if not parent.poll(timeout_s):
                    results.append(MathVerdict(0.0, "timeout"))
                    break
                try:
                    _, reward, reason, gp, pp = parent.recv()
                except (EOFError, OSError):
                    results.append(MathVerdict(0.0, "error: worker process died"))
                    break
                results.append(MathVerdict(reward, reason, gp, pp))
        finally:
            proc.kill()
            proc.join(timeout=5)
            parent.close()
    return results


_ZYGOTE_BOOT = "from vigor_cli.verifiers.math import _zygote_main; _zygote_main()"


def _zygote_main() -> None:
    """The zygote's life (``python -c _ZYGOTE_BOOT SOCKET_FD PARENT_PID EXTRA_MEMORY``): import
    Math-Verify once, then fork a worker for each descriptor the verifier sends and send back
    the worker's pidfd. Ends the moment its parent does (no interpreter shutdown)."""
    from vigor_cli.sandbox.lifeline import _exists, die_with, pidfd

    sock_fd, parent_pid, extra_memory = (int(arg) for arg in sys.argv[1:4])
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C and a group's SIGTERM are the
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # parent's to handle (it needs us to finish)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    die_with(parent_pid)  # also during the second or two of importing Math-Verify
    sock = socket.socket(fileno=sock_fd)
    parent = pidfd(parent_pid)
    _math_verify()
    sock.send(b"ready")
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if parent is not None:
        poller.register(parent, select.POLLIN)
    while True:
        events = poller.poll(None if parent is not None else 200)
        if any(fd == parent for fd, _ in events) or (parent is None and not _exists(parent_pid)):
            os._exit(0)
        if not events:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(sock, 16, 1)
        except OSError:
            os._exit(0)
        if not message:  # the verifier closed
            os._exit(0)
        if not fds:
            continue
        try:
            pid = os.fork()
        except OSError:
            os.close(fds[0])
            sock.send(b"failed")
            continue
        if pid == 0:
            try:
                sock.close()
                if parent is not None:
                    os.close(parent)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _worker_main(Connection(fds[0]), extra_memory, parent_pid)
            finally:
                os._exit(0)
        os.close(fds[0])
        child = os.pidfd_open(pid)
        socket.send_fds(sock, [b"started"], [child])
        os.close(child)


class _Child:
    """A worker process (the zygote's child) seen through its pidfd: no pid reuse, no waiting
    on a process that is not ours."""

    def __init__(self, pidfd: int):
        self.pidfd = pidfd
        self.pid = int(next((line.split()[1] for line in open(f"/proc/self/fdinfo/{pidfd}")
                             if line.startswith("Pid:")), "-1"))

    def kill(self) -> None:
        if self.pidfd >= 0:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def join(self, timeout: float | None = None) -> None:
        if self.pidfd >= 0:
            select.select([self.pidfd], [], [], timeout)

    def is_alive(self) -> bool:
        return self.pidfd >= 0 and not select.select([self.pidfd], [], [], 0)[0]

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


class _Zygote:
    """A fresh interpreter (never a fork of the caller, which may hold GPUs and threads) that
    has imported Math-Verify and forks workers on request, in milliseconds."""

    def __init__(self, extra_memory: int):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path
                                            if p and os.path.isdir(p))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE_BOOT, str(theirs.fileno()), str(os.getpid()),
                 str(extra_memory)],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, cwd="/")
        finally:
            theirs.close()
        self.sock = ours
        if self._reply(STARTUP_TIMEOUT_S)[0] != b"ready":
            self.close()
            raise RuntimeError("the math verifier's zygote did not start (see its stderr above)")

    def _reply(self, timeout: float) -> tuple[bytes, list[int]]:
        if not select.select([self.sock], [], [], timeout)[0]:
            return b"", []
        try:
            message, fds, _, _ = socket.recv_fds(self.sock, 16, 1)
        except OSError:
            return b"", []
        return message, fds

    def fork(self) -> tuple[Connection, _Child]:
        """A new worker: (the connection to it, its handle). Raises RuntimeError."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(self.sock, [b"fork"], [theirs.fileno()])
        except OSError as exc:
            ours.close()
            raise RuntimeError(f"the math verifier's zygote is gone: {exc}") from None
        finally:
            theirs.close()
        message, fds = self._reply(STARTUP_TIMEOUT_S)
        if message != b"started" or not fds:
            ours.close()
            raise RuntimeError("the math verifier's zygote could not start a worker")
        return Connection(ours.detach()), _Child(fds[0])

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self.sock.close()  # the zygote sees the end of file and leaves
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Worker:
    def __init__(self, zygote: _Zygote):
        self.conn, self.proc = zygote.fork()
        ready = self.conn.poll(STARTUP_TIMEOUT_S)
        try:
            ok = ready and self.conn.recv() == "ready"
        except (EOFError, OSError):
            ok = False
        if not ok:
            self.kill()
            raise RuntimeError("a math verifier worker did not start")
        self.items: deque = deque()  # (index, gold, completion, problem) sent and not yet answered
        self.item_started = 0.0

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(timeout=5)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self.proc.close()
        self.conn.close()


class MathVerifier:
    """Time-bounded math rewards over a pool of worker processes kept alive across calls.

    ``timeout_s`` bounds each item; ``workers=0`` means one per CPU core (at most 16). Use as a
    context manager or call :meth:`close`. Safe to call from any thread (calls are
    serialised).
    """

    def __init__(self, timeout_s: float = 5.0, workers: int = 0, extra_memory: int = WORKER_EXTRA_MEMORY):
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.timeout_s = float(timeout_s)
        self.workers = workers if workers > 0 else min(os.cpu_count() or 1, DEFAULT_MAX_WORKERS)
        self._extra_memory = extra_memory
        self._zygote: _Zygote | None = None
        self._pool: list[_Worker] = []
        self._dying: list = []  # killed worker processes not yet seen to exit
        self._lock = threading.Lock()
        self.restarts = 0
        """Workers killed and replaced so far (timeouts and crashes)."""

    # -- public API ---------------------------------------------------------------------

    def score(self, gold: Gold, completion: str, problem: str | None = None, *, question: str | None = None) -> MathVerdict:
        return self.score_many([(gold, completion, problem if problem is not None else question)])[0]

    def score_many(self, pairs: Sequence[tuple]) -> list[MathVerdict]:
        """Verdicts for (gold, completion) or (gold, completion, problem) tuples, in order,
        graded in parallel (``problem``: the question's text, or None; see :func:`grade`)."""
        items = []
        for i, pair in enumerate(pairs):
            gold, completion = pair[0], pair[1]
            problem = pair[2] if len(pair) > 2 and pair[2] is not None else None
            if isinstance(gold, (list, tuple)):
                gold = tuple(str(g) for g in gold)
            else:
                gold = str(gold)
            items.append((i, gold, str(completion), None if problem is None else str(problem)))
        if not items:
            return []
        with self._lock:
            return self._run(items)

    def close(self) -> None:
        with self._lock:
            for w in self._pool:
                try:
                    w.conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
            for w in self._pool:
                w.proc.join(timeout=1)
                w.kill()
            for proc in self._dying:
                proc.join(timeout=5)
                proc.close()
            self._pool, self._dying = [], []
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    def __enter__(self) -> "MathVerifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- scheduling ---------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        if self._zygote is not None and not self._zygote.alive():
            self._zygote.close()
            self._zygote = None
        if self._zygote is None:
            self._zygote = _Zygote(self._extra_memory)
        return _Worker(self._zygote)

    def _run(self, items: list) -> list[MathVerdict]:
        results: list[MathVerdict | None] = [None] * len(items)
        # Same gold next to each other: one worker parses it once and reuses it.
        items.sort(key=lambda it: (str(it[1]), it[0]))
        n_workers = min(self.workers, len(items))
        size = max(1, min(64, -(-len(items) // (n_workers * 4))))
        pending = deque(items[k : k + size] for k in range(0, len(items), size))
        left = len(items)
        while left:
            self._reap()
            while len(self._pool) < n_workers:
                self._pool.append(self._spawn())
            now = time.monotonic()
            for w in list(self._pool):
                if not w.items and pending:
                    chunk = pending.popleft()
                    try:
                        w.conn.send(chunk)
                    except (BrokenPipeError, OSError):
                        pending.appendleft(chunk)
                        self._retire(w)
                        continue
                    w.items.extend(chunk)
                    w.item_started = now
            busy = [w for w in self._pool if w.items]
            if not busy:
                continue  # a send failed: start a replacement and try again
            deadline = min(w.item_started for w in busy) + self.timeout_s
            ready = wait([w.conn for w in busy], timeout=max(0.0, deadline - time.monotonic()))
            for w in busy:
                if w.conn in ready:
                    while w.items and w.conn.poll():
                        try:
                            index, reward, reason, gp, pp = w.conn.recv()
                        except (EOFError, OSError):
                            left -= self._fail(w, results, pending, "error: worker process died")
                            break
                        results[index] = MathVerdict(reward, reason, gp, pp)
                        w.items.popleft()
                        w.item_started = time.monotonic()
                        left -= 1
                elif time.monotonic() - w.item_started >= self.timeout_s:
                    left -= self._fail(w, results, pending, "timeout")
        return results  # type: ignore[return-value]

    def _fail(self, w: _Worker, results: list, pending: deque, reason: str) -> int:
        """Score the worker's current item 0 with ``reason``, hand its other items back, retire it."""
        index = w.items.popleft()[0]
        results[index] = MathVerdict(0.0, reason)
        if w.items:
            pending.appendleft(list(w.items))
            w.items.clear()
        self._retire(w)
        return 1

    def _retire(self, w: _Worker) -> None:
        """SIGKILL a worker and drop it from the pool without waiting for it to exit (a worker
        that holds gigabytes can take a second to die); _reap and close collect it."""
        try:
            w.proc.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass
        w.conn.close()
        self._pool.remove(w)
        self._dying.append(w.proc)
        self.restarts += 1

    def _reap(self) -> None:
        alive = []
        for proc in self._dying:
            if proc.is_alive():
                alive.append(proc)
            else:
                proc.close()
        self._dying = alive
