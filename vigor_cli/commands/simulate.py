"""`vigor simulate`: not built yet (issue 2)."""

from __future__ import annotations

from vigor_cli.errors import NotBuiltError


def simulate() -> None:
    """Not built yet."""
    raise NotBuiltError("this command is not built yet (issue 2)")
