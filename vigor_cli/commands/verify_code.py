"""`vigor verify code`: not built yet (issue 3)."""

from __future__ import annotations

from vigor_cli.errors import NotBuiltError


def verify_code() -> None:
    """Not built yet."""
    raise NotBuiltError("this command is not built yet (issue 3)")
