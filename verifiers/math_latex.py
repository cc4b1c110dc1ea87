"""One answer's LaTeX, read by Math-Verify: what is rewritten first, and the parse itself.

Details: docs/modules.md.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from vigor_cli.verifiers.math_numbers import repeating_to_fraction
from vigor_cli.verifiers.math_units import Unit, split_unit
from vigor_cli.verifiers.math_words import strip_ordinal, words_value

_MV = None


def math_verify():
    """Math-Verify, imported on first use (it pulls in sympy: about a second) and quietened."""
    global _MV
    if _MV is None:
        import math_verify as mv

        for name in ("math_verify", "latex2sympy2_extended"):
            logging.getLogger(name).setLevel(logging.ERROR)
        _MV = mv
    return _MV


_ROMAN_CONSTANT = re.compile(r"\\(?:mathrm|text|textrm|rm)\s*\{\s*([ei])\s*\}")
ROMAN_WRAPPER = re.compile(r"\\(?:mathrm|text|textrm|textit|mathit|operatorname|mbox)\s*\{([^{}]*)\}")
_PRIME = re.compile(r"(?<=[A-Za-z])('+)(?![A-Za-z])")
"""``E'``, ``f'(x)``, ``y''``: primes after a letter (not "let's", not 5' feet)."""
_THOUSANDS = re.compile(r"(?<![\d.,^_])(\d{1,3})((?:(?:\\,|\\ |\\;|~| )\d{3})+)(?![\d])")
"""``1 000``, ``12\\,345\\,678``: groups of three digits after a space (or thin space)."""
_THOUSANDS_SEP = re.compile(r"\\,|\\ |\\;|~| ")
_MIXED = re.compile(r"(?<![\w.\\/^_])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\w./])")
"""``3128 1/2``: a whole number and a proper fraction."""
_SQRT_PARENS = re.compile(r"\\sqrt\s*\(([^()]*)\)")
"""``\\sqrt(8)``: square-root brackets written as parentheses."""
_PLAIN_SQRT = re.compile(r"(?<![\\A-Za-z])sqrt\s*(?:\(([^()]*)\)|\{([^{}]*)\})|√\s*(?:\(([^()]*)\)|\{([^{}]*)\}|(\d+(?:\.\d+)?|[A-Za-z]))")
"""``sqrt(5)``, ``√5``, ``√(x+1)``: square roots written without LaTeX."""
_REPEAT_PARENS = re.compile(r"(?<![\d.])(\d*)\.\((\d{1,12})\)")
"""``0.(6)``: the repeating block in parentheses right after the point (``2.5(3)`` is a product)."""
_E_NOTATION = re.compile(r"(?<![\w.{\\])(\d+\.\d+|\d+)[eE]([-+]?\d+)(?![\w.])")
"""``4.5e33``, ``1.25e-2``, ``3e+08``: scientific notation in e-form."""
_TRIG_ARGUMENT = re.compile(
    r"(\\(?:sin|cos|tan|cot|sec|csc)\s*(?:\^\s*\{?[^{}\s]*\}?\s*)?)"
    r"(\\left\s*\(([^()]*)\\right\s*\)|\(([^()]*)\)|\{([^{}]*)\}|(\d+(?:\.\d+)?\s*\^\s*(?:\{\s*\\circ\s*\}|\\circ)))"
)
_DEGREES = re.compile(r"(\d+(?:\.\d+)?)\s*\^\s*(?:\{\s*\\circ\s*\}|\\circ)|(\d+(?:\.\d+)?)\s*°")


def _mixed(m: re.Match) -> str:
    whole, num, den = m.group(1), int(m.group(2)), int(m.group(3))
    if not 0 < num < den:
        return m.group(0)
    return f"{whole}\\frac{{{num}}}{{{den}}}"


def _e_notation(m: re.Match) -> str:
    mantissa, exponent = m.group(1), m.group(2)
    if "." not in mantissa and not (exponent[0] == "+" or len(exponent.lstrip("-")) > 1):
        return m.group(0)  # "2e-1" may be 2e - 1; only a decimal mantissa or a long exponent is notation
    return f"{mantissa}\\times10^{{{int(exponent)}}}"


def _radians(m: re.Match) -> str:
    number = m.group(1) or m.group(2)
    return f"\\frac{{{number}\\pi}}{{180}}"


def _trig_degrees(m: re.Match) -> str:
    argument = _DEGREES.sub(_radians, m.group(2))
    if m.group(6):  # "\\tan 45^\\circ": no brackets around the argument; give it some
        argument = "(" + argument + ")"
    return m.group(1) + argument


def _plain_sqrt(m: re.Match) -> str:
    inner = next(g for g in m.groups() if g is not None)
    return "\\sqrt{" + inner + "}"


_UNICODE_OPERATORS = str.maketrans({"−": "-", "–": "-", "×": "\\times ", "·": "\\cdot ", "÷": "\\div "})
"""Operators typed as Unicode (minus sign, en dash, times, middle dot, division sign)."""


def prepare(text: str) -> str:
    """Rewrite what Math-Verify 0.9 misreads before it parses (see the module's docstring)."""
    if any(c in text for c in "−–×·÷"):
        text = text.translate(_UNICODE_OPERATORS)
    text = _ROMAN_CONSTANT.sub(r"\1", text)
    if text.rstrip().endswith("\\}") and not balanced(text):  # "\\boxed{185\\}": a stray backslash
        closed = text.rstrip()[:-2] + "}"
        if balanced(closed):
            text = closed
    if "'" in text:
        text = _PRIME.sub(lambda m: "^{" + "\\prime" * len(m.group(1)) + "}", text)
    text = _THOUSANDS.sub(lambda m: m.group(1) + _THOUSANDS_SEP.sub("", m.group(2)), text)
    if "/" in text:
        text = _MIXED.sub(_mixed, text)
    if "\\sqrt" in text:
        text = _SQRT_PARENS.sub(r"\\sqrt{\1}", text)
    if "sqrt" in text or "√" in text:
        text = _PLAIN_SQRT.sub(_plain_sqrt, text)
    if "e" in text or "E" in text:
        text = _E_NOTATION.sub(_e_notation, text)
    if "circ" in text or "°" in text:
        text = _TRIG_ARGUMENT.sub(_trig_degrees, text)
    if ".(" in text:
        text = _REPEAT_PARENS.sub(lambda m: f"{m.group(1)}.\\overline{{{m.group(2)}}}", text)
    return repeating_to_fraction(text)


def balanced(text: str) -> bool:
    """Whether every ``{`` (not ``\\{``) is closed, in order."""
    depth = 0
    for i, c in enumerate(text):
        if c == "{" and text[i - 1 : i] != "\\":
            depth += 1
        elif c == "}" and text[i - 1 : i] != "\\":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def truncated(parsed: list) -> bool:
    """Whether a parse is a string cut inside braces (Math-Verify stopping inside ``\\mathrm{``):
    two such strings would compare equal whatever followed."""
    return any(isinstance(p, str) and not balanced(p) for p in parsed)


_TRAILING_BACKSLASH = re.compile(r"(?<!\\)\\\s*$")
"""A stray backslash closing an answer ("185\\"): dropped, else the parse fails."""


def parse_latex(answer: str) -> list:
    """Math-Verify's parse of one answer's LaTeX (as ``\\boxed{answer}``), guarded against
    extraction stopping inside ``\\mathrm{...}``. ``answer`` is already prepared."""
    mv = math_verify()
    text = _TRAILING_BACKSLASH.sub("", answer)
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1]  # a sentence's period: "\\boxed{5.}"
    # Only the box: with its default unanchored patterns Math-Verify would take a fraction
    # out of a box it cannot parse ("\\frac{1}{2}x^" read as 1/2).
    latex_only = [mv.LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)]
    parsed = mv.parse("\\boxed{" + text + "}", extraction_config=latex_only, parsing_timeout=None)
    if truncated(parsed) or (not parsed and "\\" in text):
        unwrapped = ROMAN_WRAPPER.sub(r"{\1}", text)
        if unwrapped != text:
            parsed = mv.parse("\\boxed{" + unwrapped + "}", extraction_config=latex_only, parsing_timeout=None)
    if not parsed:  # plain text such as "x**2 + 1": only when the expression is all of it
        parsed = mv.parse(text, extraction_config=[mv.ExprExtractionConfig()], parsing_timeout=None)
        if len(parsed) > 1 and isinstance(parsed[1], str) and parsed[1].strip() != text.strip().rstrip("."):
            return []
    if truncated(parsed):
        return []
    return parsed


@dataclass
class Answer:
    """One answer read from its text."""

    parsed: list
    """Math-Verify's parse of the value: [sympy expression, text], or [text] when it did not parse."""
    text: str
    """The value's text (LaTeX, prepared; unit cut off)."""
    unit: Unit | None = None


def parse_answer(answer: str) -> Answer:
    """One answer's value and unit (see the module's docstring); ``parsed`` is [] when nothing
    of it can be read whole."""
    text = prepare(answer).strip()
    value, unit = split_unit(text)
    plain = ROMAN_WRAPPER.sub(r"\1", value).strip()
    if any(c.isalpha() for c in plain):
        number = words_value(plain)
        if number is not None:
            value = str(number.numerator) if number.denominator == 1 else f"\\frac{{{number.numerator}}}{{{number.denominator}}}"
        else:
            value = strip_ordinal(value)
    return Answer(parse_latex(value), value, unit)
