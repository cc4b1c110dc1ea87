"""Numbers written in words or as ordinals, read as numbers.

- :func:`words_value`: "four thousand", "twenty-five", "one hundred and five", "negative
  three", "2.5 million", "4 thousand", ordinals ("twelfth", "twenty-first") -> their value,
  when the whole text is one such number; None otherwise.
- :func:`strip_ordinal`: ``12th``, ``21^{st}``, ``3^{\\text{rd}}`` -> ``12``, ``21``, ``3``.
"""

from __future__ import annotations

import re
from fractions import Fraction

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fourty": 40, "fifty": 50, "sixty": 60,
         "seventy": 70, "eighty": 80, "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_ORDINALS = {
    "zeroth": "zero", "first": "one", "second": "two", "third": "three", "fourth": "four",
    "fifth": "five", "sixth": "six", "seventh": "seven", "eighth": "eight", "ninth": "nine",
    "tenth": "ten", "eleventh": "eleven", "twelfth": "twelve", "thirteenth": "thirteen",
    "fourteenth": "fourteen", "fifteenth": "fifteen", "sixteenth": "sixteen",
    "seventeenth": "seventeen", "eighteenth": "eighteen", "nineteenth": "nineteen",
    "twentieth": "twenty", "thirtieth": "thirty", "fortieth": "forty", "fiftieth": "fifty",
    "sixtieth": "sixty", "seventieth": "seventy", "eightieth": "eighty", "ninetieth": "ninety",
    "hundredth": "hundred", "thousandth": "thousand", "millionth": "million", "billionth": "billion",
}
_DENOMINATORS = {"half": 2, "halves": 2, "thirds": 3, "quarter": 4, "quarters": 4, "fourths": 4, "fifths": 5,
                 "sixths": 6, "sevenths": 7, "eighths": 8, "ninths": 9, "tenths": 10}
"""Fractions in words: "one half", "three quarters", "two thirds" ("third" alone is an ordinal;
"one third" is read below as well)."""
NUMBER_WORDS = frozenset(_UNITS) | frozenset(_TENS) | frozenset(_SCALES) | frozenset(_ORDINALS) | frozenset(_DENOMINATORS)
"""Every word :func:`words_value` reads (besides "a", "and", "negative", "minus")."""
SCALE_WORDS = frozenset(_SCALES)

_TOKEN = re.compile(r"\d+(?:\.\d+)?|[a-z]+")
_FILLER = re.compile(r"[\s,-]+")


def words_value(text: str) -> Fraction | None:
    """The value of ``text`` when all of it is one number in words (digits may carry a scale
    word: "4 thousand", "2.5 million"); None when any word is not part of a number."""
    words = _TOKEN.findall(text.lower())
    if not words or _TOKEN.sub("", text.lower()).strip(" ,-.") or not any(w in NUMBER_WORDS for w in words):
        return None
    sign = 1
    if words[0] in ("negative", "minus"):
        sign, words = -1, words[1:]
    fraction = _fraction_words(words)
    if fraction is not None:
        return sign * fraction
    words = [_ORDINALS.get(w, w) for w in words if w != "and"]
    if words and words[0] == "a" and len(words) > 1 and words[1] in _SCALES:
        words[0] = "one"  # "a hundred", "a thousand"
    total, current, seen = Fraction(0), Fraction(0), False
    previous = None
    for w in words:
        if w[0].isdigit():
            if previous is not None:
                return None  # digits only lead ("4 thousand"), never follow a word
            current += Fraction(w)
        elif w in _UNITS:
            if previous in _UNITS or (previous is not None and previous[0].isdigit()):
                return None  # "four five" is no number
            current += _UNITS[w]
        elif w in _TENS:
            if previous is not None and previous not in _SCALES:
                return None
            current += _TENS[w]
        elif w in _SCALES:
            if current == 0:
                return None  # a scale word multiplies the number before it
            scale = _SCALES[w]
            if scale == 100:
                current *= 100
            else:
                total += current * scale
                current = Fraction(0)
        else:
            return None
        previous, seen = w, True
    if not seen:
        return None
    value = total + current
    if value.denominator != 1 and not any(w in _SCALES for w in words):
        return None  # "2.5" alone is not a word number
    return sign * value


def _fraction_words(words: list[str]) -> Fraction | None:
    """ "one half", "a quarter", "three quarters", "two thirds", "one third" -> the fraction."""
    if len(words) != 2:
        return None
    numerator = 1 if words[0] in ("a", "an") else _UNITS.get(words[0])
    if not numerator:
        return None
    denominator = _DENOMINATORS.get(words[1])
    if denominator is None and numerator == 1 and words[1] in _ORDINALS and words[1] not in ("first", "second"):
        denominator = words_value(words[1])  # "one third", "one fifth"
    if denominator is None or (numerator > 1 and not words[1].endswith("s")):
        return None
    return Fraction(numerator, int(denominator))


_ORDINAL_DIGITS = re.compile(
    r"(?<![\w.])(\d+)\s*(?:\^\s*\{?\s*(?:\\(?:text|mathrm|textrm)\s*\{\s*)?(?:st|nd|rd|th)\s*\}?\s*\}?|(?:st|nd|rd|th)\b)"
)
"""``12th``, ``1st``, ``22^{nd}``, ``3^{\\text{rd}}``, ``12^\\text{th}``."""


def strip_ordinal(text: str) -> str:
    """Digit ordinals written as their number (``the 12th term`` -> ``the 12 term``)."""
    if not any(s in text for s in ("st", "nd", "rd", "th")):
        return text
    return _ORDINAL_DIGITS.sub(r"\1", text)
