"""Reading what a program produced, bounded and total.

Details: docs/modules.md.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

MAX_DEPTH = 128
"""Deepest nesting of arrays and objects read from a program (LiveCodeBench answers are a few
levels deep; far below the interpreter's recursion limit)."""

# A JSON string: a quote, then anything but a quote or backslash, or a backslash and the next
# character (or a lone backslash at the end), possessively, then a quote or the end of the text.
# It matches at every quote it starts from, so a search never rescans: linear in the text.
_STRING = re.compile(r'"(?:[^"\\]|\\[\s\S]?)*+(?:"|\Z)')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_CHUNK = 1 << 16


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside strings (an upper bound for invalid JSON)."""
    opened = text.count("[") + text.count("{")
    if opened <= MAX_DEPTH:
        return opened  # cannot be deeper than this: no scan needed
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = deepest = 0
    for start in range(0, len(brackets), _CHUNK):  # stop at the first chunk past the limit
        levels = list(accumulate(map(_STEP.__getitem__, brackets[start:start + _CHUNK]),
                                 initial=depth))
        depth, deepest = levels[-1], max(deepest, max(levels))
        if deepest > MAX_DEPTH:
            break
    return deepest


def parse_json(text: str | bytes) -> tuple[object, str | None]:
    """(value, None), or (None, why it cannot be read). Never raises."""
    try:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8", "replace")
        depth = nesting_depth(text)
        if depth > MAX_DEPTH:
            return None, f"nested deeper than {MAX_DEPTH} levels"
        return json.loads(text), None
    except RecursionError:
        return None, "nested too deep to read here"
    except (ValueError, TypeError) as exc:  # JSONDecodeError, an int past the digit limit
        return None, f"not JSON ({str(exc)[:80]})"
    except MemoryError:
        return None, "too large to read"


def json_equal(a: object, b: object) -> bool:
    """``a == b`` for JSON values (lists, dicts, scalars), however deep. Never raises."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        x_list, y_list = isinstance(x, list), isinstance(y, list)
        x_dict, y_dict = isinstance(x, dict), isinstance(y, dict)
        if x_list or y_list:
            if not (x_list and y_list) or len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif x_dict or y_dict:
            if not (x_dict and y_dict) or len(x) != len(y):
                return False
            for key, value in x.items():
                if key not in y:
                    return False
                stack.append((value, y[key]))
        else:
            try:
                if not x == y:
                    return False
            except Exception:  # noqa: BLE001 - a leaf that cannot be compared is unequal
                return False
    return True


def encodable(text: str) -> str:
    """``text`` with each character UTF-8 cannot encode (a lone surrogate) written as its
    escape (``\\ud800``); text without one is returned as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
