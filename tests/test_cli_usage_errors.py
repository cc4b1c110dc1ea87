"""Usage errors from the command line (an unknown flag, a bad value, an unknown command): one
line naming what was wrong, exit code 2, never a traceback."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("args, needle", [
    (["train", "--bogus"], "--bogus"),
    (["train", "--steps", "many"], "--steps"),
    (["eval", "tiny", "--n", "abc"], "--n"),
    (["simulate", "--no-such-flag"], "--no-such-flag"),
    (["inspect-allocation", "runs/x", "--last", "two"], "--last"),
    (["verify", "math", "--frobnicate"], "--frobnicate"),
    (["nosuch"], "nosuch"),
])
def test_usage_error_is_one_line_and_exit_2(vigor, args, needle):
    code, out, err = vigor(*args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and needle in lines[0]
    assert "Traceback" not in err
