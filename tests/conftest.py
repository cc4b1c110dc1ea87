"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest


@pytest.fixture
def vigor(capsys, monkeypatch):
    """Run a vigor command in this process: (exit code, stdout, stderr), wide tables."""
    from vigor_cli.cli import main
    from vigor_cli.console import console, err_console

    monkeypatch.setattr(console, "width", 200)
    monkeypatch.setattr(err_console, "width", 200)

    def call(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return call
