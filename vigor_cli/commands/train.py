"""`vigor train`: not built yet (issue 8)."""

from __future__ import annotations

from vigor_cli.errors import NotBuiltError


def train() -> None:
    """Not built yet."""
    raise NotBuiltError("this command is not built yet (issue 8)")
