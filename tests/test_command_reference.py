"""docs/commands.md is generated from the command line (vigor_cli.reference.commands): it must
equal what the generator writes now, and each command's section must say what its `--help`
says (the same options, help text, bounds and defaults)."""

from __future__ import annotations

import re

import pytest

from tests.cli_runner import run_vigor
from vigor_cli.reference import commands as ref

WIDE = {"COLUMNS": "3000", "NO_COLOR": "1", "TERM": "dumb"}  # no wrapping, no colour: nothing to normalise but boxes


@pytest.fixture(scope="module")
def page() -> str:
    return ref.render()


def flat(text: str) -> str:
    """--help output as one line: the panels' box drawing gone, whitespace collapsed."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_the_committed_page_is_what_the_generator_writes(page):
    assert ref.PAGE.read_text(encoding="utf-8") == page, \
        "docs/commands.md is stale: run python -m vigor_cli.reference.commands"


def test_every_command_and_verify_subcommand_has_a_section(page):
    names = [name for name, _, _ in ref.commands()]
    assert {"vigor train", "vigor eval", "vigor report", "vigor verify math", "vigor verify code"} <= set(names)
    for name in names:
        assert re.search(rf"^#+ `{re.escape(name)}`$", page, re.M), name


@pytest.mark.parametrize("name", [name for name, _, _ in ref.commands()])
def test_each_section_says_what_help_says(name, page):
    cmd, ctx = next((c, x) for n, c, x in ref.commands() if n == name)
    done = run_vigor(*name.split()[1:], "--help", env=WIDE)
    assert done.returncode == 0, done.stderr
    shown = flat(done.stdout)
    assert flat(cmd.get_usage(ctx)) in shown
    rows = ref.option_rows(cmd, ctx)
    assert rows and any(names == "--help" for _, names, _ in rows)
    for _, names, text in rows:
        for option in re.findall(r"--?[\w-]+", names.split(" <")[0]):
            assert option in shown, (name, option)
        assert text in shown, (name, names, text)
        assert f"| `{ref.cell(names)}` | {ref.md(text)} |" in page


def test_help_text_is_shown_as_written_in_markdown():
    assert ref.md("runs/<date>-s<seed>, task.* keys, 20\\%") == "runs/&lt;date>-s&lt;seed>, task.\\* keys, 20\\\\%"
    assert ref.md("vigor_cli/tasks/__init__.py") == "vigor_cli/tasks/\\_\\_init\\_\\_.py"
    assert ref.md("a `--set a.b=<v>` and a|b") == "a `--set a.b=<v>` and a\\|b"  # code spans as they are


def test_the_check_mode_reports_a_stale_page(tmp_path, monkeypatch, capsys, page):
    monkeypatch.setattr(ref, "render", lambda: page)
    written = tmp_path / "commands.md"
    monkeypatch.setattr(ref, "PAGE", written)
    assert ref.main(["--check"]) == 1
    assert ref.main([]) == 0 and ref.main(["--check"]) == 0
    written.write_text(written.read_text().replace("--steps", "--stpes", 1))
    assert ref.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().out
