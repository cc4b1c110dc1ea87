"""Whether an answer equals the gold: Math-Verify's ``verify(gold, answer)`` (gold first: the
relation is not symmetric), with its number comparison replaced, a few more equivalences,
units, and guards that veto what it wrongly accepts.

Details: docs/modules.md.
"""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from fractions import Fraction

from vigor_cli.verifiers.math_latex import Answer, math_verify, parse_latex
from vigor_cli.verifiers.math_numbers import (
    decimal_matches, decimals_match, float_digits, plain_value, read_decimal,
)
from vigor_cli.verifiers.math_units import Unit, read_unit

PERCENT = re.compile(r"\\?%")
_BASE_NUMBER = re.compile(r"([0-9A-Z]*[0-9][0-9A-Z]*)_\{?(\d{1,2})\}?")
"""``1011_2``, ``4210_{5}``, ``1A_{11}``: digits (at least one 0-9, letters upper case) and a base."""

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

EXACT_DIGITS = 40
"""Digits an irrational gold is evaluated to before a decimal answer is compared with it."""


def asks_for_percent(problem: str | None) -> bool:
    """Whether the problem text asks for its answer as a percentage."""
    return bool(problem) and _ASKS_PERCENT.search(problem) is not None


_ASKS_ROUNDING = re.compile(
    r"\bround(?:ed|ing)?(?:\s+(?:off|up|down))?(?:\s+(?:your|the|this|each|final|answer|answers|result|value|"
    r"values|it|them|number|numbers))*\s+(?:to|up|down|off)\b"
    r"|\bto\s+the\s+nearest\b|\bnearest\s+(?:tenth|hundredth|thousandth|ten[- ]thousandth|whole|integer|percent|cent)"
    r"|\bdecimal\s+places?\b|\bsignificant\s+(?:figures?|digits?)\b|\bsig\.?\s+figs?\b"
    r"|\bapproximat(?:e|ely|ion)\b|\bestimat(?:e|ed|ion)\b|\babout\s+how\s+(?:many|much|long|far)\b"
    r"|\\approx\b|≈",
    re.IGNORECASE,
)
"""A question that asks for a rounded or approximate answer: "Round your answer to the nearest
tenth", "to two decimal places", "to 3 significant figures", "approximately", "estimate".
A round table is not rounding."""


def asks_for_rounding(problem: str | None) -> bool:
    """Whether the problem text asks for its answer rounded (or approximate): only then does a
    decimal at another precision than the gold's count."""
    return bool(problem) and _ASKS_ROUNDING.search(problem) is not None


_ASKS_UNIT = re.compile(
    r"\(\s*(?:in|units?\s*:?)\s+(?P<paren>[^()]{1,40}?)\s*\)"
    r"|\b(?:in|into)\s+\\(?:text|mathrm|textrm|mbox|rm)\s*\{\s*(?P<wrapped>[^{}]{1,30}?)\s*\}"
    r"|\bhow\s+many\s+(?:(?:more|fewer|less|additional|whole|total|full|complete|extra)\s+)?(?P<many>[^\d,;:?!()$]{1,40})"
    r"|\b(?:in|into)\s+(?:units\s+of\s+)?(?P<unit>[^\d,;:?!()$\\]{1,40})",
    re.IGNORECASE,
)
"""Where a question names the unit of its answer: "(in cm)", "in \\text{cm}", "how many
minutes", "in square meters", "in miles per hour"."""


def asked_unit(problem: str | None) -> Unit | None:
    """The unit the problem asks its answer in (its last mention), or None. Single letters
    count only in parentheses or ``\\text{}`` ("(in m)"), as in answers."""
    if not problem:
        return None
    found = None
    for m in _ASKS_UNIT.finditer(problem):
        kind = m.lastgroup
        words = m.group(kind).replace("$", " ").split()
        for size in range(min(len(words), 4), 0, -1):
            phrase = " ".join(words[:size]).rstrip(".?!")
            unit = read_unit(phrase, kind in ("paren", "wrapped")) or (
                read_unit(phrase.lower(), False) if " " in phrase else None)  # "degrees Celsius"
            if unit is not None:
                found = unit
                break
    return found


def same_unit(a: Unit, b: Unit) -> bool:
    """One unit under two spellings (``cm``, ``centimeters``); a bare degree sign is any of
    the degrees (angle, Celsius, Fahrenheit) the question names."""
    if (a.dimension, a.size, a.pi_power) == (b.dimension, b.size, b.pi_power):
        return True
    return "degree" in (a.name, b.name) and {a.name, b.name} <= {"degree", "°C", "°F"}


# ------------------------------------------------------------------------------- numbers


def _sympy():
    math_verify()  # sympy comes with it; imported here once it is needed anyway
    import sympy

    return sympy


def exact_value(expr) -> Fraction | None:
    """A real number without floats as a Fraction (irrationals to EXACT_DIGITS digits)."""
    sympy = _sympy()
    if not isinstance(expr, sympy.Basic) or expr.free_symbols or expr.atoms(sympy.Float):
        return None
    try:
        if isinstance(expr, sympy.Rational):
            return Fraction(int(expr.p), int(expr.q))
        if not expr.is_number or expr.is_real is False:
            return None
        value = sympy.N(expr, EXACT_DIGITS)
        if not value.is_real or not value.is_finite:
            return None
        return Fraction(str(value))
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return None


def _exact_of(text: str, parsed: list) -> Fraction | None:
    """The exact value of a one-number answer that is not a decimal literal, or None."""
    value = plain_value(text)
    if value is None and parsed and not isinstance(parsed[0], str):
        value = exact_value(parsed[0])
    return value


def compare_numbers(gold_text: str, gold_parsed: list, pred_text: str, pred_parsed: list,
                    rounding: bool = True) -> bool | None:
    """The verdict when both answers are single numbers, at least one a decimal literal; None
    when the rule does not apply (Math-Verify decides). ``rounding``: the problem asks for a
    rounded answer (:func:`asks_for_rounding`), so two decimals may differ in precision and a
    decimal may be an exact gold rounded."""
    gold_dec, pred_dec = read_decimal(gold_text), read_decimal(pred_text)
    if gold_dec is None and pred_dec is None:
        return None
    if gold_dec is not None and pred_dec is not None:
        return decimals_match(gold_dec, pred_dec, rounding)
    if pred_dec is not None:
        exact = _exact_of(gold_text, gold_parsed)
        return None if exact is None else decimal_matches(exact, pred_dec, rounding)
    exact = _exact_of(pred_text, pred_parsed)
    return None if exact is None else exact == gold_dec.value  # a rounded decimal gold is no fraction


def _numeric_eq(original, a, b, float_rounding, numeric_precision, rounding=True):
    """Math-Verify's number comparison with the decimal rule for floats (``a`` is the gold)."""
    sympy = _sympy()
    a_float, b_float = isinstance(a, sympy.Float), isinstance(b, sympy.Float)
    if a_float or b_float:
        try:
            if a_float and b_float:
                gold, pred = float_digits(a), float_digits(b)
                if gold is not None and pred is not None:
                    return decimals_match(gold, pred, rounding)
            else:
                exact = exact_value(b if a_float else a)
                dec = float_digits(a if a_float else b)
                if exact is not None and dec is not None:
                    return exact == dec.value if a_float else decimal_matches(exact, dec, rounding)
        except (TypeError, ValueError, ArithmeticError):
            pass
    return original(a, b, float_rounding, numeric_precision)


_RULE_LOCK = threading.RLock()


@contextmanager
def decimal_rule(rounding: bool = True):
    """Math-Verify's float comparison (rounding to 6 places) replaced by the decimal rule while
    in the block, for the numbers it compares inside tuples, sets, intervals and matrices."""
    grader = math_verify().grader
    with _RULE_LOCK:
        original = grader.sympy_numeric_eq
        grader.sympy_numeric_eq = lambda a, b, r, p: _numeric_eq(original, a, b, r, p, rounding)
        try:
            yield
        finally:
            grader.sympy_numeric_eq = original


# ------------------------------------------------------------------------- equivalences


def _verify(gold: list, pred: list, rounding: bool = True) -> bool:
    with decimal_rule(rounding):
        return bool(math_verify().verify(gold, pred, timeout_seconds=None))


def _named(expr, name: str) -> list:
    """The symbols called ``name`` in ``expr`` (the parser gives symbols assumptions, so a
    plain ``Symbol(name)`` is not equal to them)."""
    return [s for s in getattr(expr, "free_symbols", ()) if getattr(s, "name", None) == name]


def _imaginary(parsed: list) -> list:
    sympy = _sympy()
    return [p.subs({s: sympy.I for s in _named(p, "i")}) if isinstance(p, sympy.Basic) else p for p in parsed]


def _uses_i(parsed: list) -> bool:
    sympy = _sympy()
    first = parsed[0] if parsed else None
    return isinstance(first, sympy.Basic) and (bool(_named(first, "i")) or first.has(sympy.I))


def _function_rhs(expr):
    """The right side of ``y = ...`` or ``f(x) = ...`` (a function's definition), else None."""
    sympy = _sympy()
    from sympy.core.function import AppliedUndef

    if not isinstance(expr, sympy.Eq):
        return None
    lhs, rhs = expr.lhs, expr.rhs
    if isinstance(lhs, sympy.Pow) and lhs.exp == -1 and isinstance(lhs.base, AppliedUndef):
        lhs = lhs.base  # f^{-1}(x) = ...: an inverse function's definition
    if isinstance(lhs, AppliedUndef) and not rhs.has(lhs.func):
        return rhs
    if isinstance(lhs, sympy.Symbol) and lhs.name == "y" and not rhs.has(lhs):
        return rhs
    return None


def _positive(expr):
    sympy = _sympy()
    return expr.subs({s: sympy.Symbol(s.name, positive=True) for s in expr.free_symbols if isinstance(s, sympy.Symbol)})


def _equal_for_positive_symbols(g, p) -> bool:
    sympy = _sympy()
    if not (isinstance(g, sympy.Expr) and isinstance(p, sympy.Expr)) or not g.free_symbols:
        return False
    if g.has(sympy.Abs) or p.has(sympy.Abs) or {s.name for s in g.free_symbols} != {s.name for s in p.free_symbols}:
        return False
    if not any(isinstance(e, sympy.Pow) and not e.exp.is_integer for e in (g - p).atoms(sympy.Pow)):
        return False  # only roots and fractional powers differ by the sign of their symbols
    try:
        return sympy.simplify(_positive(g) - _positive(p)) == 0
    except Exception:  # noqa: BLE001 - sympy raises many kinds on odd input
        return False


def equivalent(gold: list, pred: list, rounding: bool = True) -> bool:
    """Math-Verify's verdict with the decimal rule, then the extra equivalences."""
    if _verify(gold, pred, rounding):
        return True
    g, p = gold[0] if gold else None, pred[0] if pred else None
    if _uses_i(gold) or _uses_i(pred):
        if _verify(_imaginary(gold), _imaginary(pred), rounding):
            return True
    g_rhs, p_rhs = _function_rhs(g), _function_rhs(p)
    if g_rhs is not None and p_rhs is not None and _verify([g_rhs], [p_rhs], rounding):
        return True
    return _equal_for_positive_symbols(g, p)


# ------------------------------------------------------------------------------- guards


def exact_rational(parsed: list):
    """The exact sympy Rational a parse stands for, or None (symbols, floats, sets, ...)."""
    sympy = _sympy()
    expr = parsed[0] if parsed else None
    if not isinstance(expr, sympy.Basic) or expr.free_symbols or expr.atoms(sympy.Float):
        return None
    try:
        value = expr.doit()
    except Exception:  # noqa: BLE001 - sympy
        return None
    return value if isinstance(value, sympy.Rational) else None


def base_value(text: str) -> int | None:
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


def _guard(gold: str, gold_parsed: list, answer: str, pred_parsed: list, problem: str | None = None) -> str | None:
    """Name of the guard that rejects an answer Math-Verify accepted, or None."""
    if PERCENT.search(answer) and not PERCENT.search(gold):
        fraction_parsed = parse_latex(PERCENT.sub(r"\\cdot\\frac{1}{100}", answer))
        if not fraction_parsed or not _verify(gold_parsed, fraction_parsed):
            if not asks_for_percent(problem):
                return "percent"
            # "What percent ...?" with gold 20: "20\\%" is the same answer, "0.2\\%" is not.
            bare = parse_latex(PERCENT.sub("", answer))
            if not bare or not _verify(gold_parsed, bare):
                return "percent"
            return _guard(gold, gold_parsed, PERCENT.sub("", answer), bare)  # the number itself
    if PERCENT.search(gold):
        return None  # "50\\%" is both 50 and 1/2: Math-Verify's percent rule decides
    g_exact, p_exact = exact_rational(gold_parsed), exact_rational(pred_parsed)
    if g_exact is not None and p_exact is not None and g_exact != p_exact:
        return "exact value"
    return None


# ----------------------------------------------------------------------------- compare


def _converted(pred: Answer, gold_unit: Unit) -> list:
    """The answer's value expressed in the gold's unit (same dimension)."""
    sympy = _sympy()
    unit = pred.unit
    ratio = sympy.Rational(unit.size.numerator, unit.size.denominator) / sympy.Rational(
        gold_unit.size.numerator, gold_unit.size.denominator) * sympy.pi ** (unit.pi_power - gold_unit.pi_power)
    return [p * ratio if isinstance(p, sympy.Basic) else p for p in pred.parsed[:1]]


def compare(gold: Answer, pred: Answer, problem: str | None = None) -> tuple[bool, str]:
    """(equal, reason) for a parsed gold and a parsed answer. ``problem``: the question's text
    (or None), for the unit it asks for, rounding and percentages."""
    g_base, p_base = base_value(gold.text), base_value(pred.text)
    if g_base is not None and p_base is not None:  # 1011_2 vs 11_{10}: compare the values
        return (True, "correct") if g_base == p_base and g_base >= 0 else (False, "wrong answer (number base)")
    pred_parsed = pred.parsed
    asked = asked_unit(problem) if pred.unit is not None else None
    if asked is not None and not same_unit(asked, pred.unit) and not (gold.unit and same_unit(gold.unit, pred.unit)):
        return False, f"wrong answer (unit: the question asks for {asked.name})"
    rounding = asks_for_rounding(problem)
    if gold.unit is not None and pred.unit is not None and gold.unit != pred.unit:
        if gold.unit.dimension != pred.unit.dimension:
            return False, "wrong answer (unit)"
        if (gold.unit.size, gold.unit.pi_power) != (pred.unit.size, pred.unit.pi_power):
            pred_parsed = _converted(pred, gold.unit)
            if not equivalent(gold.parsed, pred_parsed, rounding):
                return False, "wrong answer (unit)"
            return True, "correct"
    verdict = compare_numbers(gold.text, gold.parsed, pred.text, pred_parsed, rounding)
    if verdict is None:
        verdict = equivalent(gold.parsed, pred_parsed, rounding)
    if not verdict:
        return False, "wrong answer"
    vetoed = _guard(gold.text, gold.parsed, pred.text, pred_parsed, problem)
    if vetoed:
        return False, f"wrong answer ({vetoed} guard)"
    return True, "correct"
