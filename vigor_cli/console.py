"""One rich console for the whole tool (stdout for tables, stderr for errors), and the one way
text the tool did not write itself reaches it.

Text from a program under test, a model's completion, a dataset record, a file name or a user's
value is printed *literally*: rich never reads it as markup (``[/]`` in a completion raised
``MarkupError`` and stopped training at its completions table; ``runs/[exp1]`` printed as
``runs/``), and control characters never reach the terminal: the escape sequences a
program writes to stderr (clear the screen, set the clipboard, a hidden hyperlink) are shown
as ``\\x1b``. Nor are emoji codes: a file named ``:ok:.py`` printed as ``🆗.py``, so both
consoles are built with ``emoji=False``. Use :func:`literal` for a table cell or a whole
line, :func:`shown` for a piece of a line that also holds markup.
"""

from __future__ import annotations

import re

from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.highlighter import JSONHighlighter
from rich.markup import escape
from rich.text import Text

from vigor_cli.atomic import json_bytes

PIPE_WIDTH = 4096
"""Columns of output to a pipe or a file (no terminal, no COLUMNS): wide enough that no line,
table or progress line is cut or wrapped mid-field (rich's default there is 80)."""


class _Console(Console):
    """rich's Console, as wide as :data:`PIPE_WIDTH` when it writes to no terminal and neither
    a width nor ``COLUMNS`` was given (a terminal keeps its own width)."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS", "").isdigit():
            return ConsoleDimensions(PIPE_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = _Console(emoji=False)
err_console = _Console(stderr=True, emoji=False)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
"""Every control character but newline and tab (C0, DEL, C1), and lone surrogates (which
cannot be written to a UTF-8 terminal at all)."""


def _escape_control(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """``str(text)`` with every control character written as an escape (``\\x1b``, ``\\r``)."""
    return _CONTROL.sub(_escape_control, str(text))


def literal(text: object, style: str = "") -> Text:
    """``text`` as a rich Text: no markup read, control characters visible."""
    return Text(visible(text), style=style)


def shown(text: object) -> str:
    """``text`` for a line that holds markup of its own: markup escaped, controls visible."""
    return escape(visible(text))


def print_json(data: Any, out: Console | None = None) -> None:
    """``data`` as indented JSON on ``out`` (default the stdout console), whatever text it
    holds: a lone surrogate (from a program's output) is written as its JSON escape
    (``\\ud800``), so the line always encodes and reads back to the same strings; colour
    as rich's own JSON printing, never wrapped."""
    rendered = JSONHighlighter()(Text(json_bytes(data, indent=2).decode("utf-8")))
    rendered.no_wrap, rendered.overflow = True, None
    (out or console).print(rendered, soft_wrap=True)
