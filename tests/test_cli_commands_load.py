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


_PRESTART = """
import os, sys, time
from vigor_cli.verifiers import math_pool
math_pool.prestart()
conn, pid = math_pool._prestarted
print(pid, flush=True)
if sys.argv[1] == "grade":
    first = math_pool.grade_forked([(r"\\sqrt{2}", r"\\boxed{\\sqrt2}")], timeout_s=3)
    print([v.reason for v in first], "math_verify" in sys.modules, math_pool._prestarted)
    later = math_pool.grade_forked([("5", r"\\boxed{9^{9^{9^{9}}}}"), ("1", r"\\boxed{x}")], timeout_s=3)
    print([v.reason for v in later])
elif sys.argv[1] == "plain":
    print([v.reason for v in math_pool.grade_forked([("1/2", r"\\boxed{0.5}")])], math_pool._prestarted)
"""


def _gone(pid: int, within_s: float = 5.0) -> bool:
    import os
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_prestarted_grading_child_grades_times_out_and_leaves():
    """vigor verify math's early child grades (the parent never imports Math-Verify); later
    cases go to children forked from the parent, where a slow case still times out; the early
    child is gone when the parent is."""
    out = subprocess.run([sys.executable, "-c", _PRESTART, "grade"], capture_output=True, text=True, check=True).stdout
    pid, first, later = out.strip().splitlines()
    assert first == "['correct'] False None"  # graded by the early child; this process never imported Math-Verify
    assert later == "['timeout', 'wrong answer']"  # children forked from here after that
    assert _gone(int(pid))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "unused"])
def test_prestarted_child_ends_when_not_needed(mode):
    """Plain numbers need no child (it is killed at once); a parent that exits without
    grading (a usage error) leaves no child behind."""
    out = subprocess.run([sys.executable, "-c", _PRESTART, mode], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    if mode == "plain":
        assert lines[1] == "['correct'] None"
    assert _gone(int(lines[0]))


def _help(build) -> str:
    from typer.testing import CliRunner

    return CliRunner(env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"}).invoke(build, ["--help"], prog_name="vigor").output


def test_the_listing_says_what_each_commands_own_help_says():
    """`vigor --help` lists the commands from SUMMARIES without importing them: the same screen as
    the app built from the commands themselves."""
    assert sorted(cli.SUMMARIES) == sorted(cli.COMMANDS)
    assert _help(cli.build_app(listing=True)) == _help(cli.app)


def test_version_and_help_import_no_command(capsys):
    """`vigor --version` loads no command line framework; `vigor --help` no command module (a new
    interpreter: what one run of `vigor` imports)."""
    code = ("import sys\nfrom vigor_cli.cli import main\n"
            "main(['--version'])\n"
            "assert 'typer' not in sys.modules and 'numpy' not in sys.modules, 'version'\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('vigor_cli.commands') or m in ('numpy', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("vigor ") and out.strip().endswith("[]"), out
