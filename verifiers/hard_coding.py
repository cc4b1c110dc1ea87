"""Signs that a program hard-codes a problem's sample tests instead of computing.

Details: docs/modules.md.
"""

from __future__ import annotations

import re
from typing import Sequence

MIN_TEXT_OUTPUT = 8
"""Characters an output without a digit needs to count as distinctive."""
MOST_PRIVATE = 0.5
"""A program that passes every public test "fails most private ones" below this share."""


def _distinctive(output: str) -> bool:
    text = output.strip()
    return (len(text) >= 2 and any(c.isdigit() for c in text)) or len(text) >= MIN_TEXT_OUTPUT


def _forms(output: str) -> list[str]:
    """How an expected output can be written in a program: as it is (a triple-quoted string),
    or with its line breaks as ``\\n`` escapes."""
    text = output.strip()
    return [text] if "\n" not in text else [text, text.replace("\n", "\\n")]


def _contains(source: str, text: str) -> bool:
    pattern = r"(?<![\w.])" + re.escape(text) + r"(?![\w.])"
    return re.search(pattern, source) is not None


def quotes_outputs(source: str, outputs: Sequence[str]) -> bool:
    """Whether ``source`` holds every distinctive expected output of ``outputs`` (the public
    tests'; functional tests' outputs are JSON values, compared as written) literally. False
    when none is distinctive: nothing to tell."""
    wanted = [o for o in outputs if _distinctive(o)]
    if not wanted:
        return False
    return all(any(_contains(source, form) for form in _forms(o)) for o in wanted)


def signals(code: str, public: Sequence[object], public_passed: bool | None,
            private_fraction: float | None) -> dict:
    """The details a code score carries: ``public_passed`` and ``private_fraction`` (None where
    not graded), ``hard_coded`` (every public test passed, most private ones failed) and
    ``quotes_outputs``; ``public`` are the problem's public TestCases."""
    hard = bool(public_passed) and private_fraction is not None and private_fraction < MOST_PRIVATE
    return {"public_passed": public_passed, "private_fraction": private_fraction, "hard_coded": hard,
            "quotes_outputs": quotes_outputs(code, [t.output for t in public])}
