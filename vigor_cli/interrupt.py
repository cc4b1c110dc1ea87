"""Stopping a training run on SIGINT (Ctrl-C) or SIGTERM.

While :class:`StopSignals` is installed (``vigor_cli.trainer.train`` installs it), the
first signal that arrives while a step runs is only recorded: the loop finishes the
step (and the evaluation and checkpoint due with it), then stops. A signal outside a
step (loading, the first evaluation) or a second signal stops at once. Either way the
stop is a :class:`TrainingInterrupted` raised through the loop's ``finally`` (engine and
reward workers closed); ``vigor train`` prints its one-line :attr:`status` (where the
run stands and the command that resumes it) and exits with :attr:`exit_code`: 130 for
SIGINT, 143 for SIGTERM (128 + the signal's number, the shell's convention).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by a signal. A KeyboardInterrupt, so that ``except Exception``
    handlers on the way up let it through, as they do Ctrl-C's own."""

    def __init__(self, signum: int, status: str | None = None):
        self.signum = int(signum)
        self.status = status or f"training stopped by {self.signal_name}"
        """One line: where the run stands and how to resume it (filled in by the trainer)."""
        super().__init__(self.status)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return self.status


class StopSignals:
    """SIGINT/SIGTERM handlers for a training run; a context manager that restores the
    previous handlers on exit. Outside the main thread (where Python cannot install
    handlers) it installs nothing and never reports a signal."""

    def __init__(self) -> None:
        self.signum: int | None = None
        """The first signal received (None: none yet)."""
        self._deferring = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    @property
    def requested(self) -> bool:
        """A signal arrived: the loop stops at the end of the current step."""
        return self.signum is not None

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block a first signal lets finish (a step, with its evaluation and checkpoint)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1

    def interruption(self) -> TrainingInterrupted:
        assert self.signum is not None
        return TrainingInterrupted(self.signum)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None or not self._deferring:
            self.signum = self.signum or signum
            raise TrainingInterrupted(self.signum)
        self.signum = signum
        if sys.stderr is not None and sys.stderr.isatty():  # a person at a terminal: say it was heard
            name = signal.Signals(signum).name
            os.write(2, f"\n{name}: finishing this step, then stopping (send it again to stop now)\n".encode())
