"""The `vigor` command line: thin wrappers; each command lives in vigor_cli/commands/.

Each command's module is imported only when that command runs (:data:`COMMANDS`), so a
one-shot command such as ``vigor verify math`` does not pay for the imports of training and
evaluation; ``vigor --help`` (and :data:`app`) loads them all. Typer itself is imported after
a command's early start (:data:`EARLY_STARTS`) has had its chance to begin work in another
process. Command modules import heavy libraries (torch, transformers) inside their functions.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, Callable

from vigor_cli.errors import EXIT_SIGINT, EXIT_USER, user_message

if TYPE_CHECKING:
    import typer


def _train():
    from vigor_cli.commands import train
    return train.train


def _eval():
    from vigor_cli.commands import eval as eval_cmd
    return eval_cmd.evaluate


def _inspect():
    from vigor_cli.commands import inspect
    return inspect.inspect_allocation


def _report():
    from vigor_cli.commands import report
    return report.report


def _simulate():
    from vigor_cli.commands import simulate
    return simulate.simulate


def _verify():
    from vigor_cli.commands import verify
    return verify.build_app


def _make_tiny():
    from vigor_cli.commands import make_tiny
    return make_tiny.make_tiny


def _probe():
    from vigor_cli.commands import probe
    return probe.probe


def _export():
    from vigor_cli.commands import export
    return export.export


COMMANDS: dict[str, Callable[[], Callable]] = {
    "train": _train, "eval": _eval, "inspect-allocation": _inspect, "report": _report,
    "simulate": _simulate, "verify": _verify, "make-tiny": _make_tiny, "probe": _probe,
    "export": _export,
}
"""Command name -> a loader returning its function (or, for a group, a builder of its Typer
app that takes the subcommand to load, None for all)."""

GROUPS = frozenset({"verify"})

SUMMARIES: dict[str, str] = {
    "train": "Train a policy with GRPO, spending rollouts where the reward variance is (auto, VIGOR and peers).",
    "eval": "Evaluate a model: your own task (--run, or --data/--eval-data with --reward), or math and code "
            "benchmarks: avg@n, pass@k, the pass rate and each reward's mean.",
    "inspect-allocation": "Per-step tables of prompts and their rollouts per round (and, for a run with an\n"
                          "environment, its episodes turn by turn), and an overview across steps.",
    "report": "Plot a metric (accuracy, mean reward, pass rate) against cumulative rollouts and tokens; "
              "tabulate rollouts to a target.",
    "simulate": "Drive the real allocators with simulated rewards and compare where the rollouts go.",
    "verify": "Check one answer or program with the reward verifiers.",
    "make-tiny": "Build the tiny Qwen2 model and warm it on the tiny tasks' training split (a few CPU minutes).",
    "probe": "Sample a few rollouts per prompt, fit the variance law, and say whether allocation pays.",
    "export": "Export a run's checkpoint: config, safetensors, tokenizer and a generation_config.json with the "
              "run's stop tokens.",
}
"""Each command's line in ``vigor --help``, which lists the commands without importing them (a
test keeps these equal to what the commands' own help says)."""


def _start_math_grader() -> None:
    from vigor_cli.verifiers.math_pool import prestart
    prestart()


EARLY_STARTS: dict[tuple[str, str | None], Callable[[], None]] = {("verify", "math"): _start_math_grader}
"""(command, subcommand) -> work to start before the command line framework loads: ``vigor
verify math`` forks its grading child first, which imports Math-Verify while Typer loads."""


def _switches_take_no_type(params: list[Any]) -> list[Any]:
    """A switch (``--dry-run``, ``--json``, ``--help``) takes no value: its --help row shows
    no type (Typer printed ``<bool>`` beside it)."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
    return params


@functools.lru_cache(maxsize=1)
def _classes() -> tuple[type, type]:
    """(Command, Group): Typer's command and group classes whose --help shows no type beside a
    switch; made on first use, so Typer loads only once a command needs it."""
    import typer.core

    class Command(typer.core.TyperCommand):
        def get_params(self, ctx: Any) -> list[Any]:
            return _switches_take_no_type(super().get_params(ctx))

    class Group(typer.core.TyperGroup):
        def get_params(self, ctx: Any) -> list[Any]:
            return _switches_take_no_type(super().get_params(ctx))

    return Command, Group


def _version(value: bool) -> None:
    if value:
        import typer

        from vigor_cli import __version__

        typer.echo(f"vigor {__version__}")
        raise typer.Exit()


def build_app(command: str | None = None, subcommand: str | None = None, listing: bool = False) -> "typer.Typer":
    """The Typer app with every command, or with only ``command`` (and, for a group, only its
    ``subcommand``): what one run of ``vigor`` needs. ``listing``: every command by its
    :data:`SUMMARIES` line only, none imported (``vigor --help``, ``vigor`` alone, a command
    name that does not exist)."""
    import typer

    command_cls, group_cls = _classes()

    def _main(  # the default carries the option: an annotation naming typer would be resolved in this
        version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,  # module's globals
                                     help="Print vigor's version and exit."),
    ) -> None:
        """GRPO post-training on one GPU with variance-guided rollout allocation (VIGOR)."""

    built = typer.Typer(
        name="vigor",
        help="GRPO post-training on one GPU with variance-guided rollout allocation (VIGOR).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"show_default": True},  # every option's default in --help
        rich_markup_mode="rich",  # help text is rich markup whatever typer version is installed
        cls=group_cls,
    )
    built.callback()(_main)
    order = sorted(COMMANDS, key=lambda n: n in GROUPS) if listing else list(COMMANDS)  # groups last, as Typer lists them
    for name in order:
        load = COMMANDS[name]
        if command is not None and name != command:
            continue
        if listing:
            built.command(name, cls=command_cls, help=SUMMARIES[name])(_listed)
        elif name in GROUPS:
            group = load()(subcommand)
            for sub in group.registered_commands:
                sub.cls = command_cls
            built.add_typer(group, name=name, cls=group_cls)
        else:
            built.command(name, cls=command_cls)(load())
    return built


def _listed() -> None:
    """A command as ``vigor --help`` lists it (never run: naming a command builds it whole)."""


def __getattr__(name: str):
    if name == "app":  # the whole app, built on first use (tests and tools that list commands)
        globals()["app"] = build_app()
        return globals()["app"]
    raise AttributeError(name)


def _selected(args: list[str]) -> tuple[str | None, str | None]:
    """(command, subcommand) named at the front of ``args``, when known; else (None, None)."""
    if not args or args[0] not in COMMANDS:
        return None, None
    sub = args[1] if args[0] in GROUPS and len(args) > 1 and not args[1].startswith("-") else None
    return args[0], sub


def main(argv: list[str] | None = None) -> None:
    """Run one command. Every error the user can fix (a usage error, a bad value, key, file or
    path: :func:`vigor_cli.errors.user_message`) is one line on stderr and exit 2; Ctrl-C is
    exit 130; anything else is a bug and keeps its traceback (exit 1). A thread the user's
    code left running, which the process waits for, is named at the end."""
    try:
        _run(argv)
    finally:
        from vigor_cli.user.code import left_running

        lines = left_running()
        if lines:
            from vigor_cli.console import err_console, shown

            for line in lines:
                err_console.print(f"warning: {shown(line)}", style="yellow", highlight=False, soft_wrap=True)


def _run(argv: list[str] | None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:  # before the command line framework loads
        from vigor_cli import __version__

        print(f"vigor {__version__}")
        return
    selected = _selected(args)
    early = EARLY_STARTS.get(selected)
    if early is not None and "--help" not in args:
        early()
    import typer

    from vigor_cli.console import err_console, shown

    try:
        code = build_app(*selected, listing=selected[0] is None)(args=args, prog_name="vigor", standalone_mode=False)
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
