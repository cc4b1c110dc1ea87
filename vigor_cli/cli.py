"""The `vigor` command line: thin wrappers; each command lives in vigor_cli/commands/.

Command modules import heavy libraries (torch, transformers) inside their
functions, so `vigor --help` stays fast.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
import typer.core

from vigor_cli.commands import eval as eval_cmd
from vigor_cli.commands import export as export_cmd
from vigor_cli.commands import inspect as inspect_cmd
from vigor_cli.commands import make_tiny as make_tiny_cmd
from vigor_cli.commands import probe as probe_cmd
from vigor_cli.commands import report as report_cmd
from vigor_cli.commands import simulate as simulate_cmd
from vigor_cli.commands import train as train_cmd
from vigor_cli.commands import verify as verify_cmd
from vigor_cli.console import err_console, shown
from vigor_cli.errors import EXIT_SIGINT, EXIT_USER, user_message
from vigor_cli.user_code import left_running


def _switches_take_no_type(params: list[Any]) -> list[Any]:
    """A switch (``--dry-run``, ``--json``, ``--help``) takes no value: its --help row shows
    no type (Typer printed ``<bool>`` beside it)."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
    return params


class Command(typer.core.TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _switches_take_no_type(super().get_params(ctx))


class Group(typer.core.TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _switches_take_no_type(super().get_params(ctx))


app = typer.Typer(
    name="vigor",
    help="GRPO post-training on one GPU with variance-guided rollout allocation (VIGOR).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"show_default": True},  # every option's default in --help
    rich_markup_mode="rich",  # help text is rich markup whatever typer version is installed
    cls=Group,
)

def _version(value: bool) -> None:
    if value:
        from vigor_cli import __version__

        typer.echo(f"vigor {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print vigor's version and exit.")] = False,
) -> None:
    """GRPO post-training on one GPU with variance-guided rollout allocation (VIGOR)."""


app.command("train", cls=Command)(train_cmd.train)
app.command("eval", cls=Command)(eval_cmd.evaluate)
app.command("inspect-allocation", cls=Command)(inspect_cmd.inspect_allocation)
app.command("report", cls=Command)(report_cmd.report)
app.command("simulate", cls=Command)(simulate_cmd.simulate)
for sub in verify_cmd.app.registered_commands:
    sub.cls = Command
app.add_typer(verify_cmd.app, name="verify", cls=Group)
app.command("make-tiny", cls=Command)(make_tiny_cmd.make_tiny)
app.command("probe", cls=Command)(probe_cmd.probe)
app.command("export", cls=Command)(export_cmd.export)


def main(argv: list[str] | None = None) -> None:
    """Run one command. Every error the user can fix (a usage error, a bad value, key, file or
    path: :func:`vigor_cli.errors.user_message`) is one line on stderr and exit 2; Ctrl-C is
    exit 130; anything else is a bug and keeps its traceback (exit 1). A thread the user's
    code left running, which the process waits for, is named at the end."""
    try:
        _run(argv)
    finally:
        for line in left_running():
            err_console.print(f"warning: {shown(line)}", style="yellow", highlight=False, soft_wrap=True)


def _run(argv: list[str] | None) -> None:
    try:
        code = app(args=argv, prog_name="vigor", standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        code = EXIT_SIGINT
    except Exception as e:
        message = user_message(e)
        if message is None:
            raise
        if message:  # empty: click printed the help instead (a group given no command)
            err_console.print(f"[bold red]error:[/] {shown(message)}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_USER)
    # Outside standalone mode Typer returns a typer.Exit's code instead of raising it, and
    # turns Ctrl-C into Exit(130). A command that prints its own line on Ctrl-C (training's
    # resume hint) raises SystemExit, which passes through untouched.
    if isinstance(code, int) and code:
        if code == EXIT_SIGINT:
            err_console.print("interrupted", highlight=False)
        sys.exit(code)


if __name__ == "__main__":
    main()
