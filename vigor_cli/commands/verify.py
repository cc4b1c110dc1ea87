"""`vigor verify math|code`: check one answer or program with the reward verifiers."""

from __future__ import annotations

import typer

from vigor_cli.commands.verify_code import verify_code
from vigor_cli.commands.verify_math import verify_math

app = typer.Typer(help="Check one answer or program with the reward verifiers.", no_args_is_help=True)
app.command("math")(verify_math)
app.command("code")(verify_code)
