"""The command reference (docs/commands.md), written from the command line itself.

Every command and ``verify`` subcommand gets a section: its usage line, its description and its
options grouped as ``--help`` groups them, each with the text ``--help`` shows (help, bounds,
default). Nothing depends on the terminal: plain text, no colour, no wrapping.
``python -m vigor_cli.reference.commands`` rewrites the page; ``--check`` exits 1 when it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parents[2] / "docs" / "commands.md"

INTRO = """\
# Command reference

Generated from the command line itself by `python -m vigor_cli.reference.commands` (do not edit
by hand; `tests/test_command_reference.py` keeps it equal to each command's `--help`). What the
commands are for, with examples: the [README](../README.md) and the [documentation index](index.md).

Every command takes `--help`, which shows each option's type (none for a switch, which takes no
value) and default (`vigor --version` prints the version). Output to a pipe or a file is not cut
at 80 columns: with no terminal (and no `COLUMNS`) lines, tables and the progress line are
written whole. Bad input (a key, file, record or flag) is one error line naming it, exit code 2;
nothing already written is lost ([errors.md](errors.md)).

`vigor train`'s flags each set one config key and are listed by section (model, task and data,
allocation, sampling, engine, GRPO update, training, logging and checkpoints); the help of each
is that key's description, its bounds are the key's, and its default is the key's built-in
default, with the bundled tiny config's value where that differs (`--steps ... [default: (100;
tiny-math.yaml: 150)]`). Every other key is reachable with `--set section.key=value`
([configuration.md](configuration.md)). With `--resume`, only `--steps` (and
`--allow-changed-files`) may be given (the saved config is kept); with `--rerun`, only
`--steps`, `--output-dir` and `--run-name`. The flags come from one table, `FLAGS` in
`vigor_cli/commands/train.py`: a new flag is one entry there (`Flag("--eval-every",
"train.eval_every")`), and `tests/test_train_flags.py` checks every entry. The options that
describe your own task are one table too (`TASK_FLAGS` in `vigor_cli/commands/flags.py`),
shared by `train`, `probe`, `eval` and the TRL path ([own-task.md](own-task.md)).
"""


def plain(markup: str) -> str:
    """Help text as ``--help`` shows it: rich markup rendered to plain text, one line."""
    from rich.text import Text

    return " ".join(Text.from_markup(markup).plain.split())


def commands() -> list[tuple[str, Any, Any]]:
    """(full name, click command, click context) for the app, each command and each
    subcommand of a group, in ``vigor --help``'s order."""
    import typer.main

    from vigor_cli.cli import app

    root = typer.main.get_command(app)  # click's classes as Typer ships them (it may vendor click)
    top = root.context_class(root, info_name="vigor")
    found = [("vigor", root, top)]
    for name in root.list_commands(top):
        cmd = root.get_command(top, name)
        ctx = cmd.context_class(cmd, info_name=name, parent=top)
        found.append((f"vigor {name}", cmd, ctx))
        for sub_name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else ():
            sub = cmd.get_command(ctx, sub_name)
            found.append((f"vigor {name} {sub_name}", sub, sub.context_class(sub, info_name=sub_name, parent=ctx)))
    return found


def option_rows(cmd: Any, ctx: Any) -> list[tuple[str, str, str]]:
    """(panel, names with the value's type, help with bounds and default) per parameter."""
    rows = []
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        help_text = getattr(param, "help", None) or ""
        extras = text[len(help_text):] if text.startswith(help_text) else text
        shown = " ".join(part for part in (plain(help_text), " ".join(extras.split())) if part)
        panel = getattr(param, "rich_help_panel", None) or ("Arguments" if param.param_type_name == "argument"
                                                              else "Options")
        rows.append((panel, " ".join(names.split()), shown))
    return rows


def cell(text: str) -> str:
    """Text for a markdown table cell: its pipes escaped."""
    return text.replace("|", "\\|")


def md(text: str) -> str:
    """Help text for a markdown table cell, shown as written: outside its `code spans`,
    backslashes, asterisks, double underscores (``__init__``) and ``<`` (``<date>`` would read
    as an HTML tag) escaped."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;").replace("__", "\\_\\_")
    return cell("`".join(parts))


def section(name: str, cmd: Any, ctx: Any) -> list[str]:
    """One command's section: heading, usage, description, options by panel."""
    level = "#" * min(name.count(" ") + 1, 3)
    lines = [f"#{level} `{name}`", "", "```text", " ".join(cmd.get_usage(ctx).split()), "```", ""]
    for paragraph in (cmd.help or "").split("\n\n"):
        if paragraph.strip():
            lines += [md(plain(paragraph)).replace("\\|", "|"), ""]
    panels: dict[str, list[tuple[str, str]]] = {}
    for panel, names, text in option_rows(cmd, ctx):
        panels.setdefault(panel, []).append((names, text))
    for panel, rows in panels.items():
        lines += [f"**{panel}**", "", "| option | what it does |", "| --- | --- |"]
        lines += [f"| `{cell(names)}` | {md(text)} |" for names, text in rows]
        lines.append("")
    if hasattr(cmd, "list_commands"):
        lines += ["**Commands**", "", "| command | what it does |", "| --- | --- |"]
        for sub_name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, sub_name)
            lines.append(f"| `{sub_name}` | {md(plain(sub.get_short_help_str(limit=10_000)))} |")
        lines.append("")
    return lines


def render() -> str:
    """The whole page."""
    lines = [INTRO]
    for name, cmd, ctx in commands():
        lines += section(name, cmd, ctx)
    return "\n".join(lines).rstrip() + "\n"


def write_page(page: Path, text: str, module: str, args: list[str]) -> int:
    """Write ``text`` to ``page``; with ``--check`` in ``args`` only say whether the page is
    stale (exit code 1) and which command (``python -m MODULE``) rewrites it."""
    if "--check" in args:
        same = page.exists() and page.read_text(encoding="utf-8") == text
        print(f"{page.name}: {'up to date' if same else f'stale: run python -m {module}'}")
        return 0 if same else 1
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_page(PAGE, render(), "vigor_cli.reference.commands",
                      sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
