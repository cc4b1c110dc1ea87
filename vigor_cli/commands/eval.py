"""`vigor eval`: not built yet (issue 6)."""

from __future__ import annotations

from vigor_cli.errors import NotBuiltError


def evaluate() -> None:
    """Not built yet."""
    raise NotBuiltError("this command is not built yet (issue 6)")
