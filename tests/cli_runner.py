"""`vigor ...` in the test's own process, for tests that check what a command prints and its
exit code: the real entry point (``vigor_cli.cli.main``: its one-line errors and exit codes)
inside Typer's test runner, which swaps stdout, stderr and the environment for the call.

A new interpreter costs seconds of CPU (torch and transformers import again); keep those for
what needs a real process (signals, kills, what a fresh import prints) and mark them slow.
The ``vigor`` fixture (conftest.py) is the same for tests that take fixtures.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

from typer.testing import CliRunner


def run_vigor(*args: str, env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """Run ``vigor ARGS`` here; the result looks like ``subprocess.run``'s (returncode,
    stdout, stderr as text). ``env``: variables set (None: unset) for the call only."""
    from vigor_cli.cli import main

    with CliRunner().isolation(env=env) as (out, err, _):
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(["vigor", *args], code, stdout, stderr)
