"""The Math-Verify names the math grader reads (its extraction patterns, match reader, number
comparison and call signatures) exist and behave as the grader assumes, and the installed
version lies in pyproject.toml's range for it. A Math-Verify release that moves one fails here
by name, instead of silently changing rewards."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from vigor_cli.verifiers.math_compare import decimal_rule
from vigor_cli.verifiers.math_latex import math_verify

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _math_verify_range() -> tuple[tuple[int, ...], tuple[int, ...]]:
    spec = next(dep for dep in PYPROJECT["project"]["dependencies"] if dep.startswith("math-verify"))
    low = re.search(r">=\s*([\d.]+)", spec)
    high = re.search(r"<\s*([\d.]+)", spec)
    assert low and high, f"math-verify needs a lower and an upper bound in pyproject.toml: {spec!r}"
    return _release(low.group(1)), _release(high.group(1))


def test_pyproject_gives_math_verify_a_minor_range_not_a_pin():
    low, high = _math_verify_range()
    assert low < high
    assert high[:2] == (low[0], low[1] + 1), "the upper bound is the next minor release"


def test_the_installed_math_verify_is_in_that_range():
    low, high = _math_verify_range()
    installed = _release(version("math-verify"))
    assert low <= installed < high, f"math-verify {version('math-verify')} outside {low}..{high}"


def _parameters(func) -> list[str]:
    return list(inspect.signature(func).parameters)


def test_the_functions_the_grader_calls_take_the_arguments_it_passes():
    mv = math_verify()
    assert _parameters(mv.parser.get_extraction_regexes)[:1] == ["target_types"]
    assert _parameters(mv.parser.extract_match)[:2] == ["match", "target_type"]
    # decimal_rule() swaps in a four-argument function: (gold, pred, float_rounding, numeric_precision)
    assert _parameters(mv.grader.sympy_numeric_eq) == ["a", "b", "float_rounding", "numeric_precision"]
    assert {"extraction_config", "parsing_timeout"} <= set(_parameters(mv.parse))
    assert "timeout_seconds" in _parameters(mv.verify)
    config = mv.LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)
    assert (config.boxed_match_priority, config.try_extract_without_anchor) == (0, False)
    assert isinstance(mv.ExprExtractionConfig(), mv.parser.ExprExtractionConfig)


def test_the_extraction_patterns_have_the_groups_the_grader_reads():
    mv = math_verify()
    regexes = mv.parser.get_extraction_regexes((mv.LatexExtractionConfig(), mv.ExprExtractionConfig()))
    targets = {type(target) for _, target in regexes}
    assert targets == {mv.parser.LatexExtractionConfig, mv.parser.ExprExtractionConfig}
    for patterns, _ in regexes:
        for pattern, priority in patterns:
            assert isinstance(pattern, re.Pattern) and isinstance(priority, int)
    groups = {name for patterns, _ in regexes for pattern, _ in patterns for name in pattern.groupindex}
    # math_extract: a fraction found without delimiters, and the answer's span inside a match
    assert "first_latexFraction" in groups
    for prefix in ("integer", "decimal", "expr"):
        assert any(name.startswith(prefix) for name in groups), prefix
    assert any("latex" in name for name in groups)


def test_extract_match_gives_a_value_and_the_text_it_read():
    mv = math_verify()
    regexes = mv.parser.get_extraction_regexes((mv.LatexExtractionConfig(),))
    (patterns, target), = regexes
    text = r"so the answer is $\frac{1}{2}$"
    found = [m for pattern, _ in patterns for m in [pattern.search(text)] if m]
    assert found
    value, shown = mv.parser.extract_match(found[0], target)
    assert str(value) == "1/2" and "frac" in shown


@pytest.mark.parametrize("gold, pred, plain, ruled", [
    # Math-Verify rounds floats to 6 places; the decimal rule compares the digits given
    (r"\frac{1}{4}", "0.2500003", True, False),
    ("0.0000041", "0.0000044", True, False),
    (r"\frac{1}{3}", "0.333", False, True),  # a 3-digit decimal answer rounds the exact gold
    ("0.25", "0.25", True, True),
])
def test_verify_reads_the_number_comparison_through_the_module(gold, pred, plain, ruled):
    """decimal_rule() replaces math_verify.grader.sympy_numeric_eq; that only works while
    verify() looks the function up on the module, so both verdicts are checked."""
    mv = math_verify()
    parsed = [mv.parse("$" + s + "$", parsing_timeout=None) for s in (gold, pred)]
    assert mv.verify(*parsed, timeout_seconds=None) is plain
    with decimal_rule():
        assert bool(mv.verify(*parsed, timeout_seconds=None)) is ruled
