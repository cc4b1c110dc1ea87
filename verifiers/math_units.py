"""Units written after an answer: which unit, its dimension, and its size.

:func:`split_unit` cuts a known unit off the end of an answer (``12\\text{ cm}``, ``2 hours``,
``5\\,\\mathrm{m}^2``, ``30^\\circ``, ``60 \\text{ km/h}``, ``\\$5``) and returns the value's
text and the :class:`Unit`. Two answers with units are the same answer when their units have
the same dimension and the values agree after conversion (``1 m`` = ``100 cm``); the same
number in a unit of another size or dimension is another answer. Words the table does not
know ("apples", "ways") are not units: they are left to the parser, which drops them.

Sizes are exact (``Fraction``), relative to one base unit per dimension. Temperatures,
currencies other than the dollar, and calendar months or years convert only among
themselves where the ratio is exact (a year is 12 months, never 365 days).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Unit:
    name: str
    """As the table spells it (``cm``, ``h``, ``km/h``, ``cm^2``)."""
    dimension: tuple
    """Sorted (base dimension, power) pairs: ``(("length", 1),)``, ``(("length", 1), ("time", -1))``."""
    size: Fraction
    """How many base units one of it is (cm: 1/100 of a metre), times pi to ``pi_power``."""
    pi_power: int = 0
    """A degree is pi/180 radians: size 1/180, pi_power 1."""

    def __mul__(self, other: "Unit") -> "Unit":
        powers = dict(self.dimension)
        for dim, p in other.dimension:
            powers[dim] = powers.get(dim, 0) + p
        return Unit(f"{self.name}*{other.name}", tuple(sorted((d, p) for d, p in powers.items() if p)),
                    self.size * other.size, self.pi_power + other.pi_power)

    def power(self, n: int) -> "Unit":
        return Unit(f"{self.name}^{n}", tuple((d, p * n) for d, p in self.dimension), self.size ** n, self.pi_power * n)


def _u(name: str, dimension: str, size, pi_power: int = 0) -> Unit:
    return Unit(name, ((dimension, 1),), Fraction(size), pi_power)


_BASE: dict[str, tuple[Unit, tuple[str, ...]]] = {}
"""Canonical name -> (unit, spellings). Spellings of three or more letters match in any case."""


def _add(unit: Unit, *spellings: str) -> Unit:
    unit = Unit(unit.name, unit.dimension, unit.size, unit.pi_power)
    _BASE[unit.name] = (unit, (unit.name, *spellings))
    return unit


_LENGTH = {}
for _name, _size, _spell in [
    ("mm", Fraction(1, 1000), ("millimeter", "millimeters", "millimetre", "millimetres")),
    ("cm", Fraction(1, 100), ("centimeter", "centimeters", "centimetre", "centimetres")),
    ("dm", Fraction(1, 10), ("decimeter", "decimeters", "decimetre", "decimetres")),
    ("m", 1, ("meter", "meters", "metre", "metres")),
    ("km", 1000, ("kilometer", "kilometers", "kilometre", "kilometres")),
    ("nm", Fraction(1, 10**9), ("nanometer", "nanometers", "nanometre", "nanometres")),
    ("µm", Fraction(1, 10**6), ("micrometer", "micrometers", "micron", "microns")),
    ("in", Fraction(127, 5000), ("inch", "inches")),
    ("ft", Fraction(381, 1250), ("foot", "feet")),
    ("yd", Fraction(1143, 1250), ("yard", "yards")),
    ("mi", Fraction(201168, 125), ("mile", "miles")),
]:
    _LENGTH[_name] = _add(_u(_name, "length", _size), *_spell)
_TIME = {}
for _name, _size, _spell in [
    ("ms", Fraction(1, 1000), ("millisecond", "milliseconds")),
    ("s", 1, ("sec", "secs", "second", "seconds")),
    ("min", 60, ("mins", "minute", "minutes")),
    ("h", 3600, ("hr", "hrs", "hour", "hours")),
    ("day", 86400, ("days",)),
    ("week", 604800, ("weeks", "wk", "wks")),
]:
    _TIME[_name] = _add(_u(_name, "time", _size), *_spell)
_add(_u("month", "calendar", Fraction(1, 12)), "months")
_add(_u("year", "calendar", 1), "years", "yr", "yrs")
for _name, _size, _spell in [
    ("mg", Fraction(1, 10**6), ("milligram", "milligrams")),
    ("g", Fraction(1, 1000), ("gram", "grams", "gm", "gms")),
    ("kg", 1, ("kilogram", "kilograms", "kgs")),
    ("tonne", 1000, ("tonnes",)),
    ("lb", Fraction(45359237, 10**8), ("lbs", "pound", "pounds")),
    ("oz", Fraction(45359237, 16 * 10**8), ("ounce", "ounces")),
]:
    _add(_u(_name, "mass", _size), *_spell)
_VOLUME = _LENGTH["m"].power(3)
for _name, _size, _spell in [
    ("mL", Fraction(1, 10**6), ("ml", "milliliter", "milliliters", "millilitre", "millilitres", "cc")),
    ("L", Fraction(1, 1000), ("l", "liter", "liters", "litre", "litres")),
    ("gal", Fraction(3785411784, 10**12), ("gallon", "gallons")),
]:
    _add(Unit(_name, _VOLUME.dimension, Fraction(_size)), *_spell)
_AREA = _LENGTH["m"].power(2)
_add(Unit("acre", _AREA.dimension, Fraction(316160658, 78125)), "acres")
_add(Unit("hectare", _AREA.dimension, Fraction(10000)), "hectares", "ha")
_SPEED = _LENGTH["m"] * _TIME["s"].power(-1)
_add(Unit("mph", _SPEED.dimension, Fraction(201168, 125 * 3600)), "miles per hour")
_add(Unit("kmh", _SPEED.dimension, Fraction(1000, 3600)), "kmph", "kph", "kilometers per hour")
_add(_u("degree", "angle", Fraction(1, 180), pi_power=1), "degrees", "deg")
_add(_u("rad", "angle", 1), "radian", "radians")
_add(_u("dollar", "usd", 1), "dollars", "usd", "\\$", "$")
_add(_u("cent", "usd", Fraction(1, 100)), "cents")
_add(_u("°C", "celsius", 1), "celsius", "degrees celsius")
_add(_u("°F", "fahrenheit", 1), "fahrenheit", "degrees fahrenheit")
_add(_u("K", "kelvin", 1), "kelvin", "kelvins")
for _name, _dim, _spell in [
    ("J", "energy", ("joule", "joules")), ("W", "power", ("watt", "watts")),
    ("N", "force", ("newton", "newtons")), ("Pa", "pressure", ("pascal", "pascals")),
    ("Hz", "frequency", ("hertz",)), ("V", "voltage", ("volt", "volts")),
    ("A", "current", ("amp", "amps", "ampere", "amperes")), ("eV", "energy_ev", ("electronvolt", "electronvolts")),
]:
    _add(_u(_name, _dim, 1), *_spell)
    for _prefix, _scale in (("k", 1000), ("M", 10**6), ("G", 10**9), ("m", Fraction(1, 1000))):
        _add(_u(_prefix + _name, _dim, _scale))

_SPELLING: dict[str, Unit] = {}
_SPELLING_ANY_CASE: dict[str, Unit] = {}
for _unit, _spellings in _BASE.values():
    for _s in _spellings:
        _SPELLING[_s] = _unit
        if len(_s) > 2 and _s.isalpha():
            _SPELLING_ANY_CASE[_s.lower()] = _unit

_TEXT_ONLY = frozenset({"in", "ha", "Pa", "am", "pm", "at"})
"""Spellings that are also words ("12 in total"): units only inside ``\\text{}``/``\\mathrm{}``,
as single letters are (``12 m`` may be 12 times m; ``12\\text{ m}`` is metres)."""

_WRAPPER = re.compile(r"\\(?:text|mathrm|textrm|mbox|rm|textnormal|operatorname|mathit|textit)\s*\{([^{}]*)\}")
_DEGREE = re.compile(r"\^\s*(?:\{\s*\\circ\s*\}|\\circ)|°|\\degree\b|\\textdegree\b")
_SPACES = re.compile(r"(?:\\[,;:!> ]|~|\\quad|\\qquad|\s)+")


def unit_named(word: str) -> Unit | None:
    """The unit a spelling names (``cm``, ``hours``, ``Hours``), or None."""
    word = word.strip().rstrip(".")
    return _SPELLING.get(word) or _SPELLING_ANY_CASE.get(word.lower())


def _power(text: str) -> tuple[int, str]:
    """(power, rest) for a leading ``^2``, ``^{3}``, ``²``, ``³``; (1, text) without one."""
    m = re.match(r"\s*(?:\^\s*\{?\s*([23])\s*\}?|([²³]))", text)
    if not m:
        return 1, text
    digit = m.group(1) or {"²": "2", "³": "3"}[m.group(2)]
    return int(digit), text[m.end():]


_UNIT_EXPR = re.compile(
    r"(?:(?P<prefix>square|sq\.?|cubic|cu\.?)\s+)?(?P<head>[^/^²³]+?)\s*(?P<power>\^\s*\{?\s*[23]\s*\}?|[²³])?"
    r"(?:\s*(?:/|\bper\b)\s*(?P<below>.+))?",
    re.DOTALL,
)


def read_unit(text: str, in_text: bool) -> Unit | None:
    """A whole unit expression: ``cm``, ``cm^2``, ``square feet``, ``km/h``, ``m/s^2``,
    ``meters per second``, ``kmph``. None when any part is not a known unit; a single letter
    counts only inside ``\\text{}`` (``in_text``), where it cannot be a variable."""
    text = text.strip().rstrip(".").strip()
    whole = unit_named(text) if text else None
    if whole is not None:
        return whole if in_text or (len(text) > 1 and text not in _TEXT_ONLY) else None
    m = _UNIT_EXPR.fullmatch(text)
    if not m:
        return None
    head = m.group("head").strip()
    unit = unit_named(head)
    if unit is None or ((len(head) == 1 or head in _TEXT_ONLY) and not in_text):
        return None
    power, _ = _power(m.group("power") or "")
    if m.group("prefix"):
        power = 2 if m.group("prefix").lower().startswith("s") else 3
    if power != 1:
        unit = unit.power(power)
    if m.group("below"):
        below = read_unit(m.group("below"), True)
        if below is None:
            return None
        unit = unit * below.power(-1)
    return unit


def split_unit(text: str) -> tuple[str, Unit | None]:
    """(value text, unit) when ``text`` ends in a known unit after a value; (text, None) otherwise.

    ``12\\text{ cm}`` -> ("12", cm); ``2 hours`` -> ("2", hour); ``30^\\circ`` -> ("30", degree);
    ``\\$5`` -> ("5", dollar); ``5\\text{ apples}`` -> unchanged (not a unit)."""
    stripped = re.sub(r"(?<!\\)\$", " ", text).strip().rstrip(".").strip()  # math delimiters
    if stripped.startswith("\\$") and len(stripped) > 2:
        rest = stripped[2:]
        value, unit = split_unit(rest)
        return (value, unit) if unit is not None else (rest.strip(), _SPELLING["dollar"])
    degree = _degree_tail(stripped)
    if degree is not None:
        return degree
    in_text = False
    body = stripped
    wrapped = re.search(r"\\(?:text|mathrm|textrm|mbox|rm|textnormal)\s*\{([^{}]*)\}((?:\s*\^\s*\{?\s*[23]\s*\}?)?)\s*$", body)
    if wrapped:
        in_text = True
        tail = re.sub(r"~|\\[,;: ]", " ", wrapped.group(1)) + wrapped.group(2)
        value = body[: wrapped.start()]
    else:
        m = re.search(r"(?:(?<=\d)|(?<=\d\s)|(?<=\}\s)|(?<=\})|(?<=\s))((?:square\s+|sq\.?\s+|cubic\s+|cu\.?\s+)?"
                      r"[A-Za-zµ]+(?:\s*\^\s*\{?\s*[23]\s*\}?)?(?:\s*(?:/|\bper\b)\s*[A-Za-z]+(?:\s*\^\s*\{?\s*[23]\s*\}?)?)?)$",
                      body)
        if not m:
            return text, None
        tail, value = m.group(1), body[: m.start()]
    value = _SPACES.sub(" ", value).strip()
    if not value or not re.search(r"[\d}\)]", value[-1:]) and not value.endswith("\\pi"):
        return text, None
    unit = read_unit(tail, in_text)
    if unit is None:
        return text, None
    return value, unit


def _degree_tail(text: str) -> tuple[str, Unit | None] | None:
    """``30^\\circ``, ``30°``, ``100^\\circ C``, ``45^{\\circ}\\text{F}``: value and unit."""
    matches = list(_DEGREE.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    after = _WRAPPER.sub(lambda w: w.group(1), text[m.end():]).strip()
    value = text[: m.start()].strip()
    if not value or not re.search(r"[\d}\)]$", value):
        return None
    if not after:
        return value, _SPELLING["degree"]
    if after in ("C", "F") or after.lower() in ("celsius", "fahrenheit"):
        return value, _SPELLING["°C" if after[0] in "Cc" else "°F"]
    return None


def same_dimension(a: Unit, b: Unit) -> bool:
    return a.dimension == b.dimension
