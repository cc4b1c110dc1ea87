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


_DISTRIBUTED_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")


@pytest.fixture(autouse=True)
def _no_leaked_distributed_env():
    """torchrun's variables set by a test (or by the vLLM engine's start, which restores them
    itself: rollout/vllm.py) would outlive it and make later tests (TRL's, accelerate's) start
    a process group on a stale port. Restore them after each test."""
    import os

    before = {k: os.environ.get(k) for k in _DISTRIBUTED_ENV}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
