"""`vigor make-tiny`: not built yet (issue 4)."""

from __future__ import annotations

from vigor_cli.errors import NotBuiltError


def make_tiny() -> None:
    """Not built yet."""
    raise NotBuiltError("this command is not built yet (issue 4)")
