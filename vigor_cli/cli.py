"""The `vigor` command line: thin wrappers; each command lives in vigor_cli/commands/.

Command modules import heavy libraries (torch, transformers) inside their
functions, so `vigor --help` stays fast.
"""

from __future__ import annotations

import sys

import typer

from vigor_cli.commands import eval as eval_cmd
from vigor_cli.commands import inspect as inspect_cmd
from vigor_cli.commands import make_tiny as make_tiny_cmd
from vigor_cli.commands import probe as probe_cmd
from vigor_cli.commands import report as report_cmd
from vigor_cli.commands import simulate as simulate_cmd
from vigor_cli.commands import train as train_cmd
from vigor_cli.commands import verify as verify_cmd
from vigor_cli.config import ConfigError
from vigor_cli.console import err_console
from vigor_cli.errors import UserError

app = typer.Typer(
    name="vigor",
    help="GRPO post-training on one GPU with variance-guided rollout allocation (VIGOR).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.command("train")(train_cmd.train)
app.command("eval")(eval_cmd.evaluate)
app.command("inspect-allocation")(inspect_cmd.inspect_allocation)
app.command("report")(report_cmd.report)
app.command("simulate")(simulate_cmd.simulate)
app.add_typer(verify_cmd.app, name="verify")
app.command("make-tiny")(make_tiny_cmd.make_tiny)
app.command("probe")(probe_cmd.probe)


def main(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, standalone_mode=False)
    except (UserError, ConfigError) as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except Exception as e:
        # Click's usage errors (an unknown flag, a bad value) arrive here in non-standalone mode.
        # Recent typer releases vendor click, so match the shape, not the click class.
        if hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int):
            ctx = getattr(e, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            err_console.print(f"[bold red]error:[/] {e.format_message()}{where}", highlight=False,
                              soft_wrap=True)
            sys.exit(2 if e.exit_code == 2 else e.exit_code)
        raise

if __name__ == "__main__":
    main()
