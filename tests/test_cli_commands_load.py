"""The entry point loads only the command it runs (``vigor verify math`` must not pay for
training's imports), while ``vigor --help`` and ``vigor_cli.cli.app`` still hold every command."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer.main

from vigor_cli import cli


def _commands(app) -> dict:
    return typer.main.get_command(app).commands


def test_one_command_builds_an_app_with_only_that_command():
    app = cli.build_app("verify", "math")
    commands = _commands(app)
    assert list(commands) == ["verify"] and list(commands["verify"].commands) == ["math"]
    assert list(_commands(cli.build_app("eval"))) == ["eval"]


def test_the_whole_app_has_every_command_of_the_registry():
    commands = _commands(cli.app)
    assert sorted(commands) == sorted(cli.COMMANDS)
    assert sorted(commands["verify"].commands) == ["code", "math"]


@pytest.mark.parametrize(
    "args, selected",
    [
        (["verify", "math", "--gold", "1"], ("verify", "math")),
        (["verify", "--help"], ("verify", None)),
        (["train", "--steps", "3"], ("train", None)),
        (["--help"], (None, None)),
        (["nonsense"], (None, None)),
        ([], (None, None)),
    ],
)
def test_the_command_is_read_from_the_front_of_the_arguments(args, selected):
    assert cli._selected(args) == selected


def test_unknown_subcommand_is_still_a_usage_error(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["verify", "mth"])
    assert done.value.code == 2 and "No such command" in capsys.readouterr().err


@pytest.mark.slow
def test_verify_math_does_not_import_the_other_commands():
    code = ("import sys\nfrom vigor_cli.cli import main\n"
            "try:\n    main(['verify', 'math', '--gold', '1/2', '--pred', r'\\boxed{0.5}', '--json'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('vigor_cli.commands.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert '"reward": 1.0' in out
    assert out.strip().splitlines()[-1] == "['vigor_cli.commands.options', 'vigor_cli.commands.verify', 'vigor_cli.commands.verify_math']"
