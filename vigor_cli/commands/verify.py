"""`vigor verify math|code`: not built yet (issue 3)."""

from __future__ import annotations

import typer

from vigor_cli.errors import NotBuiltError

app = typer.Typer(help="Check one answer or program with the reward verifiers.", no_args_is_help=True)


@app.command("math")
def verify_math() -> None:
    """Not built yet."""
    raise NotBuiltError("vigor verify math is not built yet (issue 3)")


@app.command("code")
def verify_code() -> None:
    """Not built yet."""
    raise NotBuiltError("vigor verify code is not built yet (issue 3)")
