"""Grading one completion against its gold answer in this process (no time limit: the worker
processes of :mod:`math_pool` call these; tests call them directly).

1. Plain numbers on both sides (``12``, ``-0.5``, ``3/4``, ``\\frac{3}{4}``, ``0.333``) are
   decided without Math-Verify when the verdict is certain (:func:`fast_grade`).
2. The answer is found in the completion (:mod:`math_extract`) and read whole, with its unit
   (:mod:`math_latex`); the gold is read the same way, once per process (cached).
3. They are compared (:mod:`math_compare`): Math-Verify's equivalence with the decimal rule,
   units, a few more equivalences, and guards against its known wrong accepts.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence, Union

from vigor_cli.verifiers.math_answers import all_boxed, boxed_spans, split_top_level
from vigor_cli.verifiers.math_compare import asks_for_rounding, compare
from vigor_cli.verifiers.math_extract import (
    ANSWER_SEPARATORS, FINAL_ANSWER, extract_answer, joined_boxes, several_parts,
)
from vigor_cli.verifiers.math_latex import Answer, balanced, parse_answer
from vigor_cli.verifiers.math_numbers import decimal_matches, decimals_match, plain_value, read_decimal

Gold = Union[str, Sequence[str]]
"""One gold answer, or several (OlympiadBench multi-answer problems: see grade_multi)."""

GOLD_CACHE_SIZE = 8192
"""Parsed gold answers kept per process."""

SHOW_CHARS = 200
"""Parsed forms in verdicts are cut to this many characters."""


@dataclass
class MathVerdict:
    reward: float
    """1.0 when the answer is equivalent to the gold, else 0.0."""
    reason: str
    """'correct', 'wrong answer' (with the guard or rule that decided, if one did), 'no answer
    found', 'timeout', or 'error: <exception>'."""
    gold_parsed: str = ""
    pred_parsed: str = ""

    @property
    def correct(self) -> bool:
        return self.reward == 1.0


def _show(parsed: list) -> str:
    if not parsed:
        return ""
    return str(parsed[0])[:SHOW_CHARS]


_gold_cache: OrderedDict[str, Answer] = OrderedDict()


def parse_gold(gold: str) -> Answer:
    """Parsed gold, from the per-process cache when seen before."""
    hit = _gold_cache.get(gold)
    if hit is not None:
        _gold_cache.move_to_end(gold)
        return hit
    parsed = parse_answer(gold)
    _gold_cache[gold] = parsed
    if len(_gold_cache) > GOLD_CACHE_SIZE:
        _gold_cache.popitem(last=False)
    return parsed


def _plain_number(text: str):
    """('exact', Fraction) or ('decimal', DecimalNumber) for a plain number, else None."""
    dec = read_decimal(text)
    if dec is not None:
        return "decimal", dec
    value = plain_value(text)
    return ("exact", value) if value is not None else None


def fast_grade(gold: str, completion: str, problem: str | None = None) -> MathVerdict | None:
    """The verdict without Math-Verify when it is certain, else None.

    Only for a plain-number gold and a completion whose answer (its last box, with no
    "final answer is" after it) is a plain number: exact values must be equal; a decimal
    follows the decimal rule of :mod:`math_numbers`, as the full grader does (another
    precision, or a decimal for an exact gold it is not equal to, only where ``problem`` asks
    for rounding; a decimal gold is never a fraction's rounding).
    """
    g = _plain_number(gold)
    if g is None:
        return None
    spans = boxed_spans(completion)
    if not spans or not balanced(completion):
        return None
    start, end, box = spans[-1]
    if "'" in completion[start:end] or FINAL_ANSWER.search(completion, end):
        return None
    if len(spans) > 1 and len(joined_boxes(completion, pure=True)) > 1:
        return None  # "\\boxed{4} or \\boxed{5}": a list, for the full grader
    p = _plain_number(box)
    if p is None:
        return None
    if g[0] == "exact" and p[0] == "exact":
        same = g[1] == p[1]
    elif g[0] == "decimal" and p[0] == "decimal":
        same = decimals_match(g[1], p[1], asks_for_rounding(problem))
    elif p[0] == "decimal":
        same = decimal_matches(g[1], p[1], asks_for_rounding(problem))
    else:
        same = p[1] == g[1].value  # a decimal gold: an exact answer must be its value
    shown_gold = str(g[1] if g[0] == "exact" else g[1].value)
    shown_pred = str(p[1] if p[0] == "exact" else p[1].value)
    return MathVerdict(1.0 if same else 0.0, "correct" if same else "wrong answer", shown_gold, shown_pred)


def grade(gold: str, completion: str, problem: str | None = None, *, question: str | None = None) -> MathVerdict:
    """Grade one completion against one gold answer in this process (no time limit).

    ``problem`` (optional; ``question`` is the same) is the question's text: when it asks
    for a percentage, a bare gold ``20`` also matches ``20\\%``; when it asks for rounding,
    a decimal at another precision than the gold's may match; when it names a unit, an
    answer in another unit does not.
    """
    problem = problem if problem is not None else question
    quick = fast_grade(gold, completion, problem)
    if quick is not None:
        return quick
    parsed_gold = parse_gold(gold)
    if not parsed_gold.parsed:
        return MathVerdict(0.0, "error: gold answer does not parse", "", "")
    answer = extract_answer(completion, several_parts(gold, parsed_gold.parsed))
    if not answer.parsed:
        return MathVerdict(0.0, "no answer found", _show(parsed_gold.parsed), "")
    ok, reason = compare(parsed_gold, answer, problem)
    return MathVerdict(1.0 if ok else 0.0, reason, _show(parsed_gold.parsed), _show(answer.parsed))


def _answer_items(completion: str, count: int) -> list[str] | None:
    """The completion's answers for a problem with ``count`` answers (see grade_multi)."""
    boxes = all_boxed(completion)
    if not boxes:
        return None
    items = split_top_level(ANSWER_SEPARATORS.sub(",", boxes[-1]), (",", ";"))
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
    answers = [parse_answer(item) for item in items]
    shown = ", ".join(_show(a.parsed) or item for item, a in zip(items, answers))[:SHOW_CHARS]
    if len(items) != len(golds):
        return MathVerdict(0.0, f"wrong answer ({len(items)} answers, expected {len(golds)})", joined[:SHOW_CHARS], shown)
    unused = list(range(len(items)))
    for gold in golds:
        parsed_gold = parse_gold(gold)
        if not parsed_gold.parsed:
            return MathVerdict(0.0, f"error: gold answer {gold!r} does not parse", joined[:SHOW_CHARS], shown)
        match = next((i for i in unused if answers[i].parsed and compare(parsed_gold, answers[i], problem)[0]), None)
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
