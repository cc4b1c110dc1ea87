"""`vigor inspect-allocation`: not built yet (issue 6)."""

from __future__ import annotations

from vigor_cli.errors import NotBuiltError


def inspect_allocation() -> None:
    """Not built yet."""
    raise NotBuiltError("this command is not built yet (issue 6)")
