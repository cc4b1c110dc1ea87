"""Numbers as answers are written: exact values, decimals with the digits they give, and the
rule that says when a decimal is the same answer as a value.

Details: docs/modules.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

MIN_SIGNIFICANT = 3
"""A decimal that is not exactly the value must give at least this many significant digits
(``0.333`` for 1/3 is an answer; ``0.3`` is not)."""

NEAR_MISS = Fraction(1, 1000)
"""A decimal gold of at least :data:`MIN_SIGNIFICANT` digits may be a rounded value: a more
precise answer that rounds to it counts (``3.1416`` for ``3.14``, all 16 digits of a computed
value), unless it is closer to the gold than this fraction of the gold's last place without
being equal: that is the gold plus noise (``3.1400001``), not a value the gold rounds."""

_PLAIN_NUMBER = re.compile(
    r"(-?)(?:(\d{1,60})|(\d{0,60}\.\d{1,60})|(\d{1,60})\s*/\s*(\d{1,60})"
    r"|\\[dt]?frac\s*\{\s*(\d{1,60})\s*\}\s*\{\s*(\d{1,60})\s*\})"
)
"""``12``, ``-0.5``, ``3/4``, ``\\frac{3}{4}``: numbers whose value needs no parser."""


def plain_value(text: str) -> Fraction | None:
    """The exact value of a plain number, or None for anything else."""
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


@dataclass(frozen=True)
class DecimalNumber:
    """A decimal literal as written: its exact value and the digits it gives."""

    value: Fraction
    last_place: Fraction
    """The unit of the last digit given (``0.250``: 1/1000; ``1.3\\times10^{-2}``: 1/1000)."""
    significant: int
    """Significant digits given (``0.250``: 3; ``0.0004``: 1)."""


_DECIMAL = re.compile(
    r"(?P<sign>[-+]?)\s*(?P<int>\d*)\.(?P<frac>\d+)"
    r"(?:\s*(?:\\times|\\cdot|\*|×)\s*10\s*\^\s*\{?\s*(?P<exp>[-+−]?\s*\d+)\s*\}?"
    r"|[eE](?P<eexp>[-+]?\d+))?"
    r"|(?P<sign2>[-+]?)\s*(?P<int2>\d+)\s*(?:\\times|\\cdot|\*|×)\s*10\s*\^\s*\{?\s*(?P<exp2>[-+−]?\s*\d+)\s*\}?"
)
"""``0.25``, ``-.5``, ``1.30\\times10^{-2}``, ``4.5e33``, ``5\\times 10^{-7}``."""


def read_decimal(text: str) -> DecimalNumber | None:
    """The literal when ``text`` is one decimal or scientific-notation number; None otherwise
    (integers and fractions are exact values, not decimals: see :func:`plain_value`)."""
    m = _DECIMAL.fullmatch(text.strip())
    if not m:
        return None
    if m.group("int2") is not None:
        sign, whole, frac = m.group("sign2"), m.group("int2"), ""
        exp = m.group("exp2")
    else:
        sign, whole, frac = m.group("sign"), m.group("int"), m.group("frac")
        exp = m.group("exp") or m.group("eexp")
    shift = int(exp.replace("−", "-").replace(" ", "")) if exp else 0
    if abs(shift) > 400:
        return None
    digits = (whole + frac).lstrip("0")
    significant = len(digits) if digits else 1
    value = Fraction(int(whole + frac or "0"), 10 ** len(frac)) * Fraction(10) ** shift
    return DecimalNumber(-value if sign == "-" else value, Fraction(1, 10 ** len(frac)) * Fraction(10) ** shift,
                         significant)


def float_digits(value: float) -> DecimalNumber | None:
    """The digits a parsed float stands for: its shortest round-trip form (``0.2500003``).
    Trailing zeros of the original text are lost (``0.250`` reads as ``0.25``)."""
    try:
        d = Decimal(repr(float(value)))
    except (InvalidOperation, OverflowError, ValueError):
        return None
    if not d.is_finite():
        return None
    sign, digits, exponent = d.as_tuple()
    stripped = "".join(map(str, digits)).lstrip("0")
    value_f = Fraction(d)
    return DecimalNumber(value_f, Fraction(10) ** exponent, max(len(stripped), 1))


def decimal_matches(exact: Fraction, dec: DecimalNumber, rounding: bool = True) -> bool:
    """Whether ``dec`` is ``exact`` (an exact value: a fraction, or an irrational value to
    enough places): equal, or, only where the problem asks for rounding (``rounding``), that
    value rounded to the digits ``dec`` gives, with at least MIN_SIGNIFICANT of them. Without
    ``rounding`` a decimal approximation is another precision than the exact gold's (``0.333``
    for 1/3, ``1.4142`` for the square root of 2), as Math-Verify and Qwen2.5-Math also say."""
    if dec.value == exact:
        return True
    return rounding and dec.significant >= MIN_SIGNIFICANT and abs(dec.value - exact) * 2 <= dec.last_place


def decimals_match(gold: DecimalNumber, pred: DecimalNumber, rounding: bool = True) -> bool:
    """Two decimals: equal in value (``0.50`` and ``0.5``), or, only where the problem asks for
    rounding (``rounding``), one a rounding of the other. A less precise answer must be the
    gold rounded (:func:`decimal_matches`); a more precise one counts when the gold, having
    MIN_SIGNIFICANT digits, may itself be rounded, the answer rounds to it, and it is no near
    miss (see NEAR_MISS): ``16386.169`` for ``16386.17``; not ``0.5000001`` for ``0.5`` (one
    digit: the gold is exact) nor ``3.1400001`` for ``3.14``. Without ``rounding`` an answer
    at another precision than the gold's is another answer (``0.333`` for ``0.33``)."""
    if gold.value == pred.value:
        return True
    if not rounding:
        return False
    if pred.last_place >= gold.last_place:
        return decimal_matches(gold.value, pred)
    gap = abs(gold.value - pred.value)
    return gold.significant >= MIN_SIGNIFICANT and gap * 2 <= gold.last_place and gap >= gold.last_place * NEAR_MISS


# ----------------------------------------------------------------------- repeating decimals

_REPEATING_BAR = re.compile(
    r"(?<![\d.])(-?)(\d*)\.(\d*)\s*\\(?:overline|bar|dot|wideparen|overset\{\\frown\})\s*(?:\{\s*(\d{1,12})\s*\}|(\d))"
)
"""``0.\\overline{6}``, ``0.1\\bar{6}``, ``2.\\overline{142857}``, ``0.\\dot 3``."""
_REPEATING_DOTS = re.compile(r"(?<![\d.])(-?)(\d*)\.(\d{2,40})\s*(?:\\ldots|\\dots|\\cdots|\.\.\.|…)")
"""``0.333\\ldots``, ``0.1666...``, ``0.142857142857\\dots``: a repeated block then dots."""


def _fraction_latex(value: Fraction) -> str:
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value.denominator == 1:
        return f"{sign}{value.numerator}"
    return f"{sign}\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _repeating_value(whole: str, prefix: str, block: str) -> Fraction:
    value = Fraction(int(whole or "0"))
    if prefix:
        value += Fraction(int(prefix), 10 ** len(prefix))
    value += Fraction(int(block), (10 ** len(block) - 1) * 10 ** len(prefix))
    return value


def _bar(m: re.Match) -> str:
    sign, whole, prefix, block = m.group(1), m.group(2), m.group(3), m.group(4) or m.group(5)
    value = _repeating_value(whole, prefix, block)
    return _fraction_latex(-value if sign else value)


def _dots(m: re.Match) -> str:
    sign, whole, digits = m.group(1), m.group(2), m.group(3)
    for size in range(1, min(len(digits) // 2, 12) + 1):
        block = digits[-size:]
        times = 3 if size == 1 else 2
        if len(digits) >= size * times and digits.endswith(block * times):
            prefix = digits[: len(digits) - size * times]
            while prefix and prefix[-size:] == block:  # "0.3333..." -> prefix "", block "3"
                prefix = prefix[:-size]
            value = _repeating_value(whole, prefix, block)
            return _fraction_latex(-value if sign else value)
    return m.group(0)  # no repeated block: a cut-off decimal, left as written


def repeating_to_fraction(text: str) -> str:
    """Repeating decimals in ``text`` rewritten as exact LaTeX fractions (``0.\\overline{6}`` ->
    ``\\frac{2}{3}``; ``0.1666\\ldots`` -> ``\\frac{1}{6}``). Other text is left as it is."""
    if "." not in text:
        return text
    if "\\" in text:
        text = _REPEATING_BAR.sub(_bar, text)
    if "." in text and ("..." in text or "dots" in text or "…" in text):
        text = _REPEATING_DOTS.sub(_dots, text)
    return text
