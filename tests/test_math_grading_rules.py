"""The math grader's rules for issue 35's classes, each in both directions: units, decimals
compared by their digits, answers read whole, and the false rejects it no longer makes.
The pieces (numbers, words, units, the rewrites before parsing) are tested on their own
first, then through :func:`grade`."""

from __future__ import annotations

from fractions import Fraction

import pytest

from vigor_cli.verifiers.math import grade
from vigor_cli.verifiers.math_latex import prepare
from vigor_cli.verifiers.math_numbers import (
    DecimalNumber, decimal_matches, decimals_match, float_digits, read_decimal, repeating_to_fraction,
)
from vigor_cli.verifiers.math_units import split_unit
from vigor_cli.verifiers.math_words import strip_ordinal, words_value


def _verdict(gold: str, completion: str) -> float:
    return grade(gold, completion).reward


# ------------------------------------------------------------------------------ numbers


@pytest.mark.parametrize(
    "text, value, last_place, significant",
    [
        ("0.25", Fraction(1, 4), Fraction(1, 100), 2),
        ("0.250", Fraction(1, 4), Fraction(1, 1000), 3),
        ("-.5", Fraction(-1, 2), Fraction(1, 10), 1),
        ("0.0004", Fraction(1, 2500), Fraction(1, 10000), 1),
        (r"1.30\times10^{-2}", Fraction(13, 1000), Fraction(1, 10000), 3),
        (r"1.25 \cdot 10^{-2}", Fraction(1, 80), Fraction(1, 10000), 3),
        ("4.5e33", Fraction(45 * 10**32), Fraction(10**32), 2),
        (r"5\times 10^{-7}", Fraction(5, 10**7), Fraction(1, 10**7), 1),
    ],
)
def test_read_decimal_keeps_the_digits_given(text, value, last_place, significant):
    assert read_decimal(text) == DecimalNumber(value, last_place, significant)


@pytest.mark.parametrize("text", ["12", "3/4", r"\frac{1}{2}", "x", "1.2.3", ""])
def test_read_decimal_refuses_what_is_not_one_decimal(text):
    assert read_decimal(text) is None


def test_float_digits_reads_the_shortest_form():
    assert float_digits(0.2500003) == read_decimal("0.2500003")
    assert float_digits(1.3e-05).significant == 2


@pytest.mark.parametrize(
    "exact, text, same",
    [
        (Fraction(1, 4), "0.2500003", False),  # more digits than any rounding, not equal
        (Fraction(1, 4), "0.25", True),
        (Fraction(1, 3), "0.333", True),  # rounded to the digits given
        (Fraction(1, 3), "0.3334", False),
        (Fraction(1, 3), "0.33", False),  # fewer than MIN_SIGNIFICANT digits
        (Fraction(2, 3), "0.667", True),
        (Fraction(2, 3), "0.666", False),  # truncated, not rounded
        (Fraction(2), "2.0000001", False),
        (Fraction(1, 80), r"1.25\times10^{-2}", True),
        (Fraction(1, 77), r"1.30\times10^{-2}", True),
        (Fraction(1, 80), r"1.3\times10^{-2}", False),
    ],
)
def test_decimal_matches_an_exact_value_only_when_rounded_to_its_digits(exact, text, same):
    assert decimal_matches(exact, read_decimal(text)) is same


@pytest.mark.parametrize(
    "exact, text, same",
    [
        (Fraction(1, 4), "0.25", True), (Fraction(1, 4), "0.250", True), (Fraction(3, 2), "1.5", True),
        (Fraction(1, 80), r"1.25\times10^{-2}", True),  # equal: the same answer at any precision
        (Fraction(1, 3), "0.333", False), (Fraction(2, 3), "0.667", False), (Fraction(1, 3), "0.333333", False),
        (Fraction(1, 77), r"1.30\times10^{-2}", False),  # a rounding, where none was asked
    ],
)
def test_decimal_matches_an_exact_value_only_when_equal_without_rounding(exact, text, same):
    assert decimal_matches(exact, read_decimal(text), rounding=False) is same


@pytest.mark.parametrize(
    "gold, pred, same",
    [
        ("0.000004", "0.000005", False),  # equal to 6 places, 25 % apart
        ("0.0000001", "0.0000002", False),
        ("0.000004", "0.0000040", True),
        ("3.14", "3.1416", True),  # a rounded gold and a more precise answer
        ("3.14", "3.1400001", False),  # the gold plus noise: a near miss
        ("4.12", "4.123105625617661", True),  # every digit of a value the gold rounds
        ("0.5", "0.5000001", False),  # a gold of one digit is not a rounding
        ("16386.17", "16386.169", True),
        ("0.3333", "0.333", True),
        ("1.22", "1.2", False),
    ],
)
def test_decimals_match_relatively(gold, pred, same):
    assert decimals_match(read_decimal(gold), read_decimal(pred)) is same


@pytest.mark.parametrize(
    "text, rewritten",
    [
        (r"0.\overline{6}", r"\frac{2}{3}"),
        (r"0.1\bar{6}", r"\frac{1}{6}"),
        (r"2.\overline{142857}", r"\frac{15}{7}"),
        (r"-0.\overline{3}", r"-\frac{1}{3}"),
        (r"0.333\ldots", r"\frac{1}{3}"),
        ("0.1666...", r"\frac{1}{6}"),
        (r"0.25\ldots", r"0.25\ldots"),  # no repeated block: a cut-off decimal stays
        ("1.5", "1.5"),
    ],
)
def test_repeating_decimals_become_fractions(text, rewritten):
    assert repeating_to_fraction(text) == rewritten


# -------------------------------------------------------------------------------- words


@pytest.mark.parametrize(
    "text, value",
    [
        ("four thousand", 4000), ("Twenty-Five", 25), ("one hundred and five", 105), ("negative three", -3),
        ("2.5 million", 2500000), ("4 thousand", 4000), ("a hundred", 100), ("twelfth", 12),
        ("twenty-first", 21), ("two million three hundred thousand", 2300000), ("one half", Fraction(1, 2)),
        ("three quarters", Fraction(3, 4)), ("two thirds", Fraction(2, 3)),
        ("four five", None), ("the answer", None), ("4000", None), ("thousand", None), ("two third", None),
    ],
)
def test_words_value(text, value):
    assert words_value(text) == value


@pytest.mark.parametrize(
    "text, stripped",
    [("the 12th term", "the 12 term"), (r"21^{st}", "21"), (r"3^{\text{rd}}", "3"), (r"12^\text{th}", "12"),
     ("n^{th}", "n^{th}"), ("month", "month")],
)
def test_strip_ordinal(text, stripped):
    assert strip_ordinal(text) == stripped


# -------------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    "text, value, unit",
    [
        (r"12\text{ cm}", "12", "cm"), (r"2\text{ hours}", "2", "h"), ("2 hours", "2", "h"),
        (r"5\,\mathrm{m}^2", "5", "m^2"), (r"5 \text{ cm}^{2}", "5", "cm^2"), (r"30^\circ", "30", "degree"),
        (r"30^{\circ}", "30", "degree"), (r"100^\circ C", "100", "°C"), (r"\$16.50", "16.50", "dollar"),
        (r"10 \text{ square feet}", "10", "ft^2"), (r"1.6 \mathrm{~cm}", "1.6", "cm"), ("$125$ miles", "125", "mi"),
        (r"\frac{\pi}{6}\text{ rad}", r"\frac{\pi}{6}", "rad"),
    ],
)
def test_split_unit_finds_known_units(text, value, unit):
    got_value, got_unit = split_unit(text)
    assert got_value == value and got_unit is not None and got_unit.name == unit


@pytest.mark.parametrize("text", [r"5\text{ apples}", "12 m", "12 in", r"\text{Evelyn}", "x^2", r"10\%", "5"])
def test_split_unit_leaves_what_is_not_a_unit(text):
    assert split_unit(text) == (text, None)


def test_compound_units_have_dimensions_and_sizes():
    speed = split_unit(r"60 \text{ km/h}")[1]
    assert speed.dimension == (("length", 1), ("time", -1)) and speed.size == Fraction(5, 18)  # m/s
    assert split_unit("20 meters per second")[1].dimension == speed.dimension
    assert split_unit(r"8 \text{ mL}")[1].dimension == split_unit(r"8 \text{ cm}^3")[1].dimension


# ------------------------------------------------------------------------------ rewrites


@pytest.mark.parametrize(
    "text, prepared",
    [
        (r"4\sqrt(2)", r"4\sqrt{2}"),
        ("7 - sqrt(5)", r"7 - \sqrt{5}"),
        ("7 - √5", r"7 - \sqrt{5}"),
        ("4.5e33", r"4.5\times10^{33}"),
        ("1.25e-2", r"1.25\times10^{-2}"),
        ("2e-1", "2e-1"),  # may be 2e - 1: an integer mantissa with a one-digit exponent stays
        (r"\cos(90^\circ - x)", r"\cos(\frac{90\pi}{180} - x)"),
        (r"\tan 45^\circ", r"\tan (\frac{45\pi}{180})"),
        (r"30^\circ", r"30^\circ"),  # a lone angle is an answer in degrees, not converted
        ("0.(6)", r"\frac{2}{3}"),
    ],
)
def test_prepare_rewrites_what_math_verify_misreads(text, prepared):
    assert prepare(text) == prepared


# ---------------------------------------------------------------- through grade(): units


@pytest.mark.parametrize(
    "gold, completion, reward",
    [
        (r"2\text{ hours}", r"\boxed{2\text{ minutes}}", 0.0),
        (r"2\text{ hours}", r"\boxed{120\text{ minutes}}", 1.0),
        (r"2\text{ hours}", r"\boxed{2}", 1.0),
        (r"2\text{ hours}", "It takes 2 minutes.", 0.0),
        (r"12\text{ m}", r"\boxed{12\text{ cm}}", 0.0),
        (r"1\text{ m}", r"\boxed{100\text{ cm}}", 1.0),
        (r"12\text{ m}", r"The length is $\boxed{12}$ cm.", 0.0),
        (r"5\text{ cm}^2", r"\boxed{5\text{ cm}}", 0.0),
        (r"45^\circ", r"\boxed{\frac{\pi}{4}\text{ rad}}", 1.0),
        (r"50 \text{ cents}", r"\boxed{\$0.50}", 1.0),
        ("90", r"\boxed{90\text{ minutes}}", 1.0),  # a gold without a unit: the answer's unit is not checked
        (r"5\text{ apples}", r"\boxed{5}", 1.0),
    ],
)
def test_units(gold, completion, reward):
    assert _verdict(gold, completion) == reward


def test_a_unit_of_another_dimension_says_so():
    assert grade(r"5\text{ cm}^2", r"\boxed{5\text{ cm}}").reason == "wrong answer (unit)"


# ------------------------------------------------------------- through grade(): decimals


@pytest.mark.parametrize(
    "gold, pred, reward",
    [
        # no problem text, so no rounding asked: a decimal for an exact gold must equal it (issue 47)
        (r"\frac{1}{4}", "0.2500003", 0.0), (r"\frac{1}{3}", "0.333", 0.0), ("0.000004", "0.000005", 0.0),
        ("0.0000004", "0.0000005", 0.0), (r"\sqrt{2}", "1.4142", 0.0), (r"\sqrt{2}", "1.4143", 0.0),
        (r"\pi", "3.1416", 0.0), (r"\frac{1}{77}", r"1.30\times10^{-2}", 0.0), ("33.3", r"\frac{100}{3}", 0.0),
        (r"\frac{1}{4}", "0.25", 1.0), (r"\frac{1}{80}", r"1.25\times10^{-2}", 1.0),
        (r"(1, \frac{1}{4})", "(1, 0.2500003)", 0.0), (r"(1, \frac{1}{4})", "(1, 0.25)", 1.0),
        ("4.5e33", r"4.5 \times 10^{33}", 1.0),
    ],
)
def test_decimals(gold, pred, reward):
    assert _verdict(gold, r"\boxed{" + pred + "}") == reward


@pytest.mark.parametrize(
    "gold, pred",
    [(r"\frac{1}{4}", "0.2500003"), (r"\frac{1}{3}", "0.333"), ("0.000004", "0.000005"), ("3.14", "3.1416")],
)
def test_fast_path_and_full_grader_apply_one_decimal_rule(gold, pred, monkeypatch):
    from vigor_cli.verifiers import math_grade

    quick = grade(gold, r"\boxed{" + pred + "}")
    monkeypatch.setattr(math_grade, "fast_grade", lambda *a: None)
    assert grade(gold, r"\boxed{" + pred + "}").reward == quick.reward


# -------------------------------------------------------- through grade(): answers whole


@pytest.mark.parametrize(
    "gold, completion, reward",
    [
        ("7", r"the answer is 7 - \sqrt{5}", 0.0),
        (r"7 - \sqrt{5}", r"the answer is 7 - \sqrt{5}", 1.0),
        ("4", r"The answer is 4\sqrt{3}.", 0.0),
        (r"4\sqrt{3}", r"The answer is 4\sqrt{3}.", 1.0),
        ("4", r"$4\sqrt(2)$", 0.0),
        (r"4\sqrt{2}", r"$4\sqrt(2)$", 1.0),
        ("2", r"\boxed{2\sqrt(8)}", 0.0),
        (r"\frac{1}{2}", r"\boxed{\frac{1}{2}x^}", 0.0),
        ("2", r"The answer is 2 \times 10^5", 0.0),
        ("10", r"The answer is 1.25 \cdot 10^{-2}", 0.0),
        (r"\frac{1}{80}", r"The answer is 1.25 \cdot 10^{-2}", 1.0),
        ("5", "The answer is 5, because the sum is even.", 1.0),
        ("12", "The answer is 12 (twelve).", 1.0),
        ("12", "It is the 12th term.", 1.0),
        (r"\sqrt{2}", r"The answer is \sqrt{2}.", 1.0),
        ("7", "The answers are 7 and 8.", 0.0),  # two answers for one gold: a hedge
    ],
)
def test_answers_are_read_whole(gold, completion, reward):
    assert _verdict(gold, completion) == reward


# ------------------------------------------------------- through grade(): false rejects


@pytest.mark.parametrize(
    "gold, completion, reward",
    [
        ("1+3i", r"\boxed{i(3-i)}", 1.0), ("1+3i", r"\boxed{i(3+i)}", 0.0), ("-1", r"\boxed{e^{i\pi}}", 1.0),
        ("y = 2x+1", r"\boxed{g(x) = 2x+1}", 1.0), ("y = 2x+1", r"\boxed{g(x) = 2x-1}", 0.0),
        ("x = 3", r"\boxed{y = 3}", 0.0),
        ("4000", "The answer is four thousand.", 1.0), ("400", "The answer is four thousand.", 0.0),
        ("2500000", "The answer is 2.5 million.", 1.0),
        (r"\frac{2}{3}", r"\boxed{0.\overline{6}}", 1.0), (r"\frac{1}{6}", r"\boxed{0.\overline{16}}", 0.0),
        ("12", "It is the twelfth term.", 1.0), ("12", r"\boxed{12^{\text{th}}}", 1.0),
        (r"\frac{1}{\sqrt{k}}", r"\boxed{\sqrt{\frac{1}{k}}}", 1.0), (r"|x|", r"\boxed{x}", 0.0),
        ("7, 8", "The answers are 7 and 8.", 1.0), ("7, 8", r"\boxed{7 \text{ and } 8}", 1.0),
        (r"\frac{1}{80}", r"\boxed{1.25\times10^{-2}}", 1.0),
        (r"\sin x", r"\boxed{\cos(90^\circ - x)}", 1.0), (r"\frac{1}{2}", r"\boxed{\sin 30}", 0.0),
    ],
)
def test_false_rejects_fixed_and_their_neighbours(gold, completion, reward):
    assert _verdict(gold, completion) == reward


# ------------------------------------- precision, rounded golds and the unit the question asks

ROUND = "Round your answer to the nearest hundredth."
CM = "A rope is 5 m long. What is its length in centimeters?"


@pytest.mark.parametrize(
    "gold, pred, problem, reward",
    [
        # another precision than the gold's, both ways, is another answer unless rounding is asked
        ("0.33", "0.333", None, 0.0), ("0.333", "0.33", None, 0.0), ("3.14", "3.1416", None, 0.0),
        ("3.1416", "3.14", None, 0.0), ("1.234", "1.23", "Compute the ratio.", 0.0), ("-0.33", "-0.333", None, 0.0),
        ("-0.333", "-0.33", None, 0.0), ("16386.17", "16386.169", None, 0.0),
        (r"1.23\times10^{-2}", "0.01234", None, 0.0), ("1.5e3", "1502.1", None, 0.0),
        ("3.14", "3.1416", ROUND, 1.0), ("3.1416", "3.14", ROUND, 1.0), ("2.72", "2.718", "Approximately what is e?", 1.0),
        ("1.23", "1.234", "Give it to 3 significant figures.", 1.0), ("1.23", "1.234", "to two decimal places", 1.0),
        ("3.14", "3.15", ROUND, 0.0), ("0.33", "0.333", ROUND, 0.0),  # a wrong rounding; a 2-digit gold
        ("3.14", "3.1416", "Eight people sit around a round table. Find the ratio.", 0.0),
        # the same value at another precision is the same answer
        ("0.50", "0.5", None, 1.0), ("0.5", "0.50", None, 1.0), ("3", "3.0", None, 1.0), ("3.0", "3", None, 1.0),
        ("-0.75", "-0.750", None, 1.0), (r"2.5\times10^{-3}", "0.0025", None, 1.0), ("0.0025", "2.5e-3", None, 1.0),
        ("4.5e33", r"4.50 \times 10^{33}", None, 1.0), ("0.25", r"25\%", None, 1.0),
        # a rounded decimal gold is no fraction or root, even where rounding is asked
        ("0.33", r"\frac{1}{3}", None, 0.0), ("0.333", r"\frac{1}{3}", None, 0.0), ("0.333", "1/3", ROUND, 0.0),
        ("0.667", r"\frac{2}{3}", None, 0.0), ("-0.33", r"-\frac{1}{3}", None, 0.0), ("1.41", r"\sqrt{2}", None, 0.0),
        ("33.3", r"\frac{100}{3}", None, 0.0),
        ("0.5", r"\frac{1}{2}", None, 1.0), ("-0.25", r"-\frac{1}{4}", None, 1.0), ("1.5", "3/2", None, 1.0),
        ("0.125", r"\frac{1}{8}", ROUND, 1.0),
        # inside tuples the same rules
        ("(0.33, 1)", "(0.333, 1)", None, 0.0), ("(0.33, 1)", r"(\frac{1}{3}, 1)", None, 0.0),
        ("(0.5, 1)", r"(\frac{1}{2}, 1)", None, 1.0), ("(3.14, 1)", "(3.1416, 1)", ROUND, 1.0),
        ("(0.50, 2)", "(0.5, 2)", None, 1.0),
    ],
)
def test_precision_and_rounded_golds(gold, pred, problem, reward):
    assert grade(gold, r"\boxed{" + pred + "}", problem).reward == reward


THOUSANDTH = "Round your answer to the nearest thousandth."


@pytest.mark.parametrize(
    "gold, pred, problem, reward",
    [
        # an exact gold: a decimal that is not its value is another precision unless rounding is asked
        (r"\frac{1}{3}", "0.333", None, 0.0), (r"\frac{1}{3}", "0.333", THOUSANDTH, 1.0),
        (r"\frac{1}{3}", "0.333", "What is the probability?", 0.0),
        (r"\frac{1}{3}", "0.333333", None, 0.0), (r"\frac{1}{3}", "0.3333", "Approximately what is x?", 1.0),
        ("1/3", "0.333", None, 0.0), ("1/3", "0.333", THOUSANDTH, 1.0), (r"-\frac{1}{3}", "-0.333", None, 0.0),
        (r"-\frac{1}{3}", "-0.333", THOUSANDTH, 1.0), (r"\frac{2}{3}", "0.667", None, 0.0),
        (r"\frac{2}{3}", "0.667", THOUSANDTH, 1.0), (r"\sqrt{2}", "1.414", None, 0.0),
        (r"\sqrt{2}", "1.414", "Estimate the diagonal.", 1.0), (r"\pi", "3.1416", None, 0.0),
        (r"\pi", "3.1416", "Give the area to 4 decimal places.", 1.0), (r"\pi", r"\approx 3.1416", None, 0.0),
        (r"\frac{1}{77}", r"1.30\times10^{-2}", None, 0.0),
        (r"\frac{1}{77}", r"1.30\times10^{-2}", "to 3 significant figures", 1.0),
        (r"\frac{1}{9900}", "0.00010101", "Give 5 significant figures.", 1.0),  # no exact-value guard veto
        (r"\frac{1}{3}", "0.333", "Eight people sit around a round table. Find the probability.", 0.0),
        # with rounding asked the decimal must still be the gold rounded, with 3 significant digits
        (r"\frac{1}{3}", "0.334", THOUSANDTH, 0.0), (r"\frac{2}{3}", "0.666", THOUSANDTH, 0.0),
        (r"\pi", "3.1415", "Give the area to 4 decimal places.", 0.0), (r"\frac{1}{3}", "0.3", THOUSANDTH, 0.0),
        # a decimal equal to the exact gold is the same answer, rounding asked or not
        (r"\frac{1}{2}", "0.5", None, 1.0), (r"\frac14", "0.25", None, 1.0), (r"\frac{1}{4}", "0.250", None, 1.0),
        ("3/2", "1.5", None, 1.0), (r"\frac{3}{8}", "0.375", THOUSANDTH, 1.0), (r"\sqrt{16}", "4.0", None, 1.0),
        # inside tuples, lists and intervals the same
        (r"(1, \frac{1}{3})", "(1, 0.333)", None, 0.0), (r"(1, \frac{1}{3})", "(1, 0.333)", THOUSANDTH, 1.0),
        (r"(1, \frac{1}{4})", "(1, 0.25)", None, 1.0), (r"(\frac{3}{5},\frac{8}{3}]", "(0.6,2.6667]", None, 0.0),
        (r"(\frac{3}{5},\frac{8}{3}]", "(0.6,2.6667]", "Round the endpoints to four decimal places.", 1.0),
    ],
)
def test_a_decimal_for_an_exact_gold_only_where_rounding_is_asked(gold, pred, problem, reward):
    verdict = grade(gold, r"\boxed{" + pred + "}", problem)
    assert verdict.reward == reward, verdict


@pytest.mark.parametrize("gold, pred, problem", [
    ("3.14", "3.1416", None), ("3.14", "3.1416", ROUND), ("0.333", r"\frac{1}{3}", None), ("0.333", "1/3", ROUND),
    ("0.5", r"\frac{1}{2}", None), ("-0.33", "-0.333", None), ("1/3", "0.333", None), ("1/3", "0.333", THOUSANDTH),
    (r"\frac{1}{3}", "0.333", None), (r"\frac{1}{3}", "0.333", THOUSANDTH), ("1/4", "0.25", None),
])
def test_fast_path_and_full_grader_agree_with_a_problem(gold, pred, problem, monkeypatch):
    from vigor_cli.verifiers import math_grade

    quick = grade(gold, r"\boxed{" + pred + "}", problem)
    monkeypatch.setattr(math_grade, "fast_grade", lambda *a: None)
    assert grade(gold, r"\boxed{" + pred + "}", problem).reward == quick.reward


@pytest.mark.parametrize(
    "gold, pred, problem, reward",
    [
        ("500", r"500\text{ m}", CM, 0.0), ("500", r"5\text{ m}", CM, 0.0), ("500", "500 meters", CM, 0.0),
        ("500", r"500\text{ cm}", CM, 1.0), ("500", "500 centimeters", CM, 1.0), ("500", "500", CM, 1.0),
        ("500", r"500\text{ m}", "What is the length of the rope (in cm)?", 0.0),
        ("500", r"500\text{ cm}", "What is the length of the rope (in cm)?", 1.0),
        ("90", "1.5 hours", "How many minutes does the trip take?", 0.0),
        ("90", "90 minutes", "How many more minutes does the trip take?", 1.0),
        ("120", "120 feet", "What is the area of the room, in square feet?", 0.0),
        ("120", "120 square feet", "What is the area of the room, in square feet?", 1.0),
        ("120", r"120\text{ ft}^2", "What is the area of the room, in square feet?", 1.0),
        ("5", "500 cents", "How many dollars did she spend?", 0.0), ("5", r"\$5", "How many dollars did she spend?", 1.0),
        ("60", "60 km/h", "What is the car's speed in miles per hour?", 0.0),
        ("60", "60 mph", "What is the car's speed in miles per hour?", 1.0),
        ("30", r"30^\circ", "What is the temperature in degrees Celsius?", 1.0),
        ("30", r"30^\circ\text{F}", "What is the temperature in degrees Celsius?", 0.0),
        ("12", r"12\text{ cm}", r"Give the height in \text{m}.", 0.0),
        # no unit asked: convertible units and a gold's own unit decide as before
        (r"500\text{ cm}", r"5\text{ m}", "How long is the rope?", 1.0), (r"500\text{ cm}", r"5\text{ m}", None, 1.0),
        ("60", "60 km/h", "A car travels 120 km in 2 hours. What is its speed?", 1.0),
        (r"500\text{ cm}", r"500\text{ cm}", CM, 1.0), (r"2\text{ hours}", r"2\text{ minutes}", None, 0.0),
    ],
)
def test_a_quantity_in_another_unit_than_asked_is_rejected(gold, pred, problem, reward):
    verdict = grade(gold, r"\boxed{" + pred + "}", problem)
    assert verdict.reward == reward, verdict.reason


def test_the_unit_rule_says_which_unit_was_asked():
    assert grade("500", r"\boxed{500\text{ m}}", CM).reason == "wrong answer (unit: the question asks for cm)"


@pytest.mark.parametrize("problem, rounding", [
    (ROUND, True), ("Express your answer as a decimal to the nearest tenth.", True), ("to 2 decimal places", True),
    ("Give 3 significant digits.", True), ("What is the approximate area?", True), ("Estimate the sum.", True),
    ("About how many marbles are there?", True), (r"Find $x \approx$ what?", True), ("Rounded to the nearest cent", True),
    ("Eight people sit around a round table.", False), ("Compute 1/3.", False), ("", False), (None, False),
    ("Each round of the game lasts 3 minutes.", False), ("Express your answer as a decimal.", False),
])
def test_asks_for_rounding(problem, rounding):
    from vigor_cli.verifiers.math_compare import asks_for_rounding

    assert asks_for_rounding(problem) is rounding


@pytest.mark.parametrize("problem, unit", [
    (CM, "cm"), ("(in cm)", "cm"), ("(in m)", "m"), ("in square meters?", "m^2"), ("How many seconds?", "s"),
    ("in miles per hour", "mph"), ("in km/h", "km*h^-1"), ("in degrees Celsius", "°C"), ("in degrees?", "degree"),
    ("It travels 120 km in 2 hours. How far?", None), ("In how many ways?", None), ("in total", None),
    ("in m", None), ("How many ways are there?", None), ("in terms of x", None), (None, None),
])
def test_asked_unit(problem, unit):
    from vigor_cli.verifiers.math_compare import asked_unit

    found = asked_unit(problem)
    assert (found.name if found else None) == unit
