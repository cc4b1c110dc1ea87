"""Stopping a training run on SIGINT (Ctrl-C) or SIGTERM.

While :class:`StopSignals` is installed (``vigor_cli.train.trainer.train`` installs it), the
first signal that arrives while a step runs is only recorded: the loop finishes the
step (and the evaluation and checkpoint due with it), then stops. A signal outside a
step (loading, the first evaluation) or a second signal stops at once. Either way the
stop is a :class:`TrainingInterrupted` raised through the loop's ``finally`` (engine and
reward workers closed); ``vigor train`` prints its one-line :attr:`status` (where the
run stands and the command that resumes it) and exits with :attr:`exit_code`: 130 for
SIGINT, 143 for SIGTERM (128 + the signal's number, the shell's convention). A second
signal that Python cannot act on within :data:`FORCE_AFTER_S` (the main thread inside a
long C call) ends the process there, naming what the run was waiting for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORCE_AFTER_S = 5.0
"""Seconds a second signal waits for the run to act on it before the process ends."""
OWN_STOPS = 0
_EXIT = os._exit
"""SIGINTs a user-code call's time limit has sent (vigor_cli.user.code): not a person's."""


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
        self._handled = 0
        """Signals the Python handler acted on (the watcher compares them with those received)."""
        self._write_fd: int | None = None
        self._previous_fd = -1
        self._closed = threading.Event()

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            self._watch_start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closed.set()
        if self._write_fd is not None:
            with contextlib.suppress(ValueError, OSError):
                signal.set_wakeup_fd(self._previous_fd)
            os.close(self._write_fd)  # the watcher reads the end of its pipe and closes it
            self._write_fd = None
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def _watch_start(self) -> None:
        """The watcher: a thread reading the signals as they arrive (Python's wakeup
        descriptor), even while the main thread cannot run a handler."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(read_fd)
            os.close(write_fd)
            return
        self._write_fd = write_fd
        threading.Thread(target=self._watch, args=(read_fd, threading.main_thread().ident),
                         name="vigor-stop-watch", daemon=True).start()

    def _watch(self, read_fd: int, main_ident: int) -> None:
        received, own_seen = 0, OWN_STOPS
        try:
            while data := os.read(read_fd, 64):
                for signum in data:
                    if signum == signal.SIGINT and own_seen < OWN_STOPS:  # a call's time limit, not a person
                        own_seen += 1
                        continue
                    if signum in SIGNALS:
                        received += 1
                        if received >= 2 and not self._closed.wait(FORCE_AFTER_S) and self._handled < received:
                            _force_stop(signum, main_ident)
        except OSError:
            pass
        finally:
            os.close(read_fd)

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
        self._handled += 1
        if self.signum is not None or not self._deferring:
            if self.signum is not None:  # the second: said, with where the run was
                with contextlib.suppress(OSError, ValueError):
                    os.write(2, f"{signal.Signals(signum).name} again: stopping now; the run was waiting for "
                                f"{waiting_for(frame)}\n".encode())
            self.signum = self.signum or signum
            raise TrainingInterrupted(self.signum)
        self.signum = signum
        if sys.stderr is not None and sys.stderr.isatty():  # a person at a terminal: say it was heard
            name = signal.Signals(signum).name
            os.write(2, f"\n{name}: finishing this step, then stopping (send it again to stop now)\n".encode())


def waiting_for(frame: Any) -> str:
    """Where a frame's thread was, in words: its innermost function (file, line), and the
    innermost of vigor's own functions that led there."""
    if frame is None:
        return "(unknown)"
    here = os.path.dirname(os.path.abspath(__file__))
    inner = f"{frame.f_code.co_name}() ({os.path.basename(frame.f_code.co_filename)}, line {frame.f_lineno})"
    f = frame
    while f is not None and not f.f_code.co_filename.startswith(here):
        f = f.f_back
    if f is None or f is frame:
        return inner
    return f"{inner}, called from {f.f_code.co_name}() (vigor_cli/{os.path.relpath(f.f_code.co_filename, here)}, " \
           f"line {f.f_lineno})"


def _force_stop(signum: int, main_ident: int | None) -> None:
    """A second signal the run could not act on: one line naming what it waited for, then the
    process ends with the signal's exit code (its checkpoints stay sealed: --resume works)."""
    frame = sys._current_frames().get(main_ident) if main_ident is not None else None
    name = signal.Signals(signum).name
    with contextlib.suppress(OSError, ValueError):
        os.write(2, f"{name} again, and the run could not stop within {FORCE_AFTER_S:g} s: it was waiting for "
                    f"{waiting_for(frame)}; stopped now (vigor train --resume RUN continues from the last "
                    "checkpoint)\n".encode())
    _EXIT(128 + signum)
