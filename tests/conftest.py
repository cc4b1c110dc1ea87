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


class TrainedRuns:
    """Tiny-model runs trained once per test session and shared: training is the slow part of
    many tests that then only read a run (an uninterrupted run to compare a resumed one with)
    or damage a copy of one. Runs are keyed by their resolved config, less train.output_dir
    and train.run_name, so two tests asking for the same settings share one training."""

    def __init__(self, root):
        self.root = root
        self.runs = {}

    def get(self, sets):
        """The finished run trained with ``sets`` (``build_config`` overrides): its directory,
        shared by every test that asks for the same settings, so read it, never change it."""
        import os

        from rich.console import Console

        from vigor_cli.config import dump_config
        from vigor_cli.settings import build_config
        from vigor_cli.train.trainer import train

        cfg = build_config(sets=list(sets))
        cfg.train.output_dir, cfg.train.run_name = str(self.root), "shared"
        key = dump_config(cfg)
        if key not in self.runs:
            cfg.train.run_name = f"run-{len(self.runs)}"
            with open(os.devnull, "w") as devnull:
                train(cfg, out=Console(file=devnull))
            self.runs[key] = self.root / cfg.train.run_name
        return self.runs[key]

    def copy(self, sets, dest):
        """A copy of that run at ``dest``, the test's own to change or resume (a run's files
        hold no path of their own that a resume trusts: train.output_dir and run_name may differ)."""
        import shutil

        shutil.copytree(self.get(sets), dest)
        return dest


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """:class:`TrainedRuns` for the session (tests/test_checkpoints.py, test_interrupt.py, ...)."""
    return TrainedRuns(tmp_path_factory.mktemp("trained"))
