"""`vigor verify math|code`: check one answer or program with the reward verifiers."""

from __future__ import annotations

import typer


def _math():
    from vigor_cli.commands.verify_math import verify_math
    return verify_math


def _code():
    from vigor_cli.commands.verify_code import verify_code
    return verify_code


SUBCOMMANDS = {"math": _math, "code": _code}
"""Subcommand -> a loader of its function (only the one that runs is imported)."""


def build_app(subcommand: str | None = None) -> typer.Typer:
    """The ``verify`` group with every subcommand, or only ``subcommand`` when it is known."""
    group = typer.Typer(help="Check one answer or program with the reward verifiers.", no_args_is_help=True)
    for name, load in SUBCOMMANDS.items():
        if subcommand in SUBCOMMANDS and name != subcommand:
            continue
        group.command(name)(load())
    return group
