"""The boundary around the user's own code: a reward function's call, and the import of its file.

Details: docs/modules.md.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any, Callable, Iterator

from vigor_cli.errors import EXIT_USER, UserError
from vigor_cli import interrupt
from vigor_cli.interrupt import TrainingInterrupted

STOP_GRACE_S = 10.0
"""Seconds a call past its time limit may ignore being stopped before the process exits."""
RESEND_S = 1.0
"""Seconds between stops sent to a call that caught the previous one."""


class CallTimedOut(BaseException):
    """Raised inside a call that ran past its time limit."""


class ExitCalled(BaseException):
    """``os._exit(code)`` called by the user's code inside a call: raised instead of ending the
    process (``sys.exit`` raises SystemExit itself)."""

    def __init__(self, code: Any):
        self.code = code
        super().__init__(code)


_REAL_EXIT = os._exit
_PID = os.getpid()
_USER_THREADS: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
"""Threads the user's code started and left running: an ``os._exit`` from one is named."""


def _exit_after_call(code: Any) -> None:
    """``os._exit`` once a call left threads of the user's running: from one of those, the
    line naming it first (vigor's own calls, and forked children, exit as usual)."""
    if os.getpid() == _PID and threading.current_thread() in _USER_THREADS:
        named_exit(code, sys._getframe(1))
    _REAL_EXIT(code)


_LEFT: list[tuple[threading.Thread, str]] = []
"""Non-daemon threads the user's code started and left running, with who started them."""


def private_copy(value: Any) -> Any:
    """``value`` for one function alone: lists, tuples and dicts (prompts, completions,
    columns) deep-copied; any other object (a callback, a state object) passed as it is."""
    return copy.deepcopy(value) if isinstance(value, (list, tuple, dict)) else value


def call(fn: Callable[[], Any], *, describe: Callable[[BaseException], str], timeout: float | None = None,
         timeout_line: Callable[[float, str], str] | None = None, label: str = "the user's code") -> Any:
    """``fn()`` behind the boundary (module docstring). ``describe(exc)`` is the line for what
    it raised; ``timeout_line(seconds, where)`` the line for a call past ``timeout`` seconds
    (``where``: the user's file and line it was stopped at); ``label`` names it in the
    threads it leaves."""
    line = timeout_line or _timeout_line
    value, error, timed_out = attempt(fn, timeout=timeout, label=label, timeout_line=line)
    if timed_out:
        raise UserError(line(timeout or 0.0, user_frame(error) if error is not None else "")) from None
    if error is None:
        return value
    raise UserError(describe(error)) from None


def attempt(fn: Callable[[], Any], *, timeout: float | None = None, label: str = "the user's code",
            timeout_line: Callable[[float, str], str] | None = None) -> tuple[Any, BaseException | None, bool]:
    """``fn()`` behind the boundary, its outcome returned: ``(value, what it raised, timed
    out)``; a Ctrl-C or the trainer's stop signal is raised on, as an outer call's limit."""
    guard = _Guard(timeout, timeout_line or _timeout_line)
    guard.enter()
    try:
        try:
            value, error = fn(), None
        except BaseException as e:  # noqa: BLE001 (the boundary: every kind is decided below)
            value, error = None, e
        guard.leaving = True
    except CallTimedOut as e:  # the stop landed just after fn returned or raised
        value, error = None, e
        guard.leaving = True
    guard.exit(label)
    if guard.timed_out:
        return None, error, True
    if error is None:
        return value, None, False
    if isinstance(error, TrainingInterrupted) or (isinstance(error, KeyboardInterrupt) and guard.user_sigint):
        raise error  # the user's Ctrl-C, the trainer's stop signal
    if isinstance(error, CallTimedOut):  # an outer call's limit (a call inside a call)
        raise error
    return None, error, False


def raised(e: BaseException) -> str:
    """What the user's code raised, in words: ``ValueError: bad``, ``SystemExit: sys.exit(3)
    called``, ``KeyboardInterrupt (raised by the code itself, not a Ctrl-C)``."""
    if isinstance(e, SystemExit):
        return f"SystemExit: sys.exit({'' if e.code is None else repr(e.code)}) called"
    if isinstance(e, ExitCalled):
        return f"os._exit({e.code!r}) called (it would have ended the process)"
    if type(e) is KeyboardInterrupt:
        return "KeyboardInterrupt (raised by the code itself, not a Ctrl-C)"
    text = str(e).strip()
    first = (text.splitlines()[0] if text else "")[:300]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def user_frame(e: BaseException, path: Any = None) -> str:
    """' (file.py, line N)' for the innermost traceback frame in the user's file ``path`` (or,
    without one, in any file outside vigor and the installed packages); '' when none."""
    from pathlib import Path

    tb, found = e.__traceback__, None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if (path is not None and Path(filename) == Path(path)) or (
                path is None and not _library_file(filename)):
            found = (filename, tb.tb_lineno)
        tb = tb.tb_next
    if isinstance(e, SyntaxError) and e.lineno:
        return f" ({Path(e.filename or '').name}, line {e.lineno})"
    return f" ({Path(found[0]).name}, line {found[1]})" if found else ""


def left_running() -> list[str]:
    """One line per function whose non-daemon threads are still running (the process waits
    for them at exit), naming them; each is said once."""
    by_label: dict[str, list[str]] = {}
    pooled: dict[str, list[str]] = {}
    workers = _pool_workers()
    for thread, label in _LEFT:
        if thread in workers:  # joined at exit whatever its flag: let go, named if it was busy
            if _pool_worker_busy(thread):
                pooled.setdefault(label, []).append(thread.name)
            workers.pop(thread, None)
        elif thread.is_alive():
            by_label.setdefault(label, []).append(thread.name)
    _LEFT.clear()
    lines = [f"{label} left work running in a thread pool ({', '.join(map(repr, dict.fromkeys(names)))}): it is "
             "not waited for at exit; shut the pool down (shutdown(wait=True)) before returning"
             for label, names in pooled.items()]
    for label, names in by_label.items():
        shown = ", ".join(f"'{n}'" for n in dict.fromkeys(names))
        count = f"{len(names)} threads" if len(names) > 1 else "a thread"
        lines.append(f"{label} left {count} running ({shown}, started with daemon=False): the process "
                     "ends only when they do; join them before returning, or make them daemon threads")
    return lines


# --------------------------------------------------------------------------- internals
def _pool_workers() -> Any:
    """{thread: work queue} of the live ``concurrent.futures`` thread-pool workers, which the
    interpreter joins at exit even when they are daemon threads ({} if never imported)."""
    pool = sys.modules.get("concurrent.futures.thread")
    return getattr(pool, "_threads_queues", {})


def _pool_worker_busy(thread: threading.Thread) -> bool:
    """Whether a pool worker is running a job (its innermost Python frame is not the idle loop)."""
    frame = sys._current_frames().get(thread.ident) if thread.is_alive() else None
    return frame is not None and frame.f_code.co_name != "_worker"


def _timeout_line(seconds: float, where: str) -> str:
    return f"the user's code did not return within {seconds:g} s{where}"


def _library_file(filename: str) -> bool:
    """A frame of vigor's own code, of an installed package or of Python itself."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package, not this folder
    return (filename.startswith(here) or "site-packages" in filename or "dist-packages" in filename
            or filename.startswith("<") or filename.startswith(os.path.dirname(os.__file__)))


class _Guard:
    """One call's state: what to put back, the SIGINT handler, the watchdog."""

    def __init__(self, timeout: float | None, timeout_line: Callable[[float, str], str]):
        self.timeout, self.timeout_line = timeout, timeout_line
        self.main = threading.current_thread() is threading.main_thread()
        self.timed_out = False
        self.user_sigint = False
        self.leaving = False
        self.pending = False
        """A stop of ours was sent and its handler has not run yet."""
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._watchdog: threading.Thread | None = None

    # ---- entering and leaving
    def enter(self) -> None:
        self.cwd = _cwd()
        self.settings = _Settings()
        self.stdio = [_Stream("stdout", 1), _Stream("stderr", 2)]
        self.threads = set(threading.enumerate())
        self.daemonic = _mark_daemon(threading.current_thread(), True)
        self.handlers: dict[int, Any] = {}
        self.others: dict[int, Any] = {}
        self.timer: tuple[float, float] | None = None
        if self.main:
            self.handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
            self.others = _other_handlers()
            self.timer = signal.getitimer(signal.ITIMER_REAL) if hasattr(signal, "getitimer") else None
            signal.signal(signal.SIGINT, self._on_sigint)
            if self.timeout:
                self._watchdog = threading.Thread(target=self._watch, args=(threading.main_thread().ident,),
                                                  name="vigor-call-limit", daemon=True)
                self._watchdog.start()

    def exit(self, label: str) -> None:
        with self._lock:
            self._done.set()  # no stop is sent after this
        if self._watchdog is not None:
            self._watchdog.join()
        deadline = time.monotonic() + 2.0
        while self.pending and time.monotonic() < deadline:  # one in flight: let it land here
            time.sleep(0.005)
        for sig, handler in self.handlers.items():
            with contextlib.suppress(TypeError, ValueError):  # a handler not installed from Python
                signal.signal(sig, handler)
        for sig, handler in self.others.items():  # any other handler the call replaced
            if handler is not None and signal.getsignal(sig) != handler:
                with contextlib.suppress(TypeError, ValueError, OSError):
                    signal.signal(sig, handler)
        if self.main and self.timer == (0.0, 0.0) and signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
            signal.setitimer(signal.ITIMER_REAL, 0)  # an alarm it set, due after its handler is gone
        _mark_daemon(threading.current_thread(), self.daemonic)
        if self.cwd is not None and _cwd() != self.cwd:
            with contextlib.suppress(OSError):
                os.chdir(self.cwd)
        _USER_THREADS.update(t for t in threading.enumerate() if t not in self.threads and t.is_alive())
        self.settings.restore()
        for stream in self.stdio:
            stream.restore()
        _LEFT.extend((t, label) for t in threading.enumerate()
                     if t not in self.threads and t.is_alive() and (not t.daemon or t in _pool_workers()))

    # ---- the stop
    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.pending:  # ours (a Ctrl-C at the same moment is folded into it)
            self.pending = False
            if not (self.leaving or self._done.is_set()):
                raise CallTimedOut()
            return
        self.user_sigint = True
        previous = self.handlers.get(signal.SIGINT)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.default_int_handler(signum, frame)

    def _watch(self, main_ident: int) -> None:
        if self._done.wait(self.timeout):
            return
        self.timed_out = True
        deadline = time.monotonic() + STOP_GRACE_S
        while True:
            with self._lock:
                if self._done.is_set():
                    return
                if not self.pending:
                    self.pending = True
                    interrupt.OWN_STOPS += 1  # (before the signal: the stop watcher reads it when it arrives)
                    signal.pthread_kill(main_ident, signal.SIGINT)
            if self._done.wait(RESEND_S):
                return
            if time.monotonic() > deadline:
                self._abandon()

    def _abandon(self) -> None:
        """The call ignored every stop: the one line, and the process ends (as a kill would)."""
        line = self.timeout_line(self.timeout or 0.0, "")
        with contextlib.suppress(OSError):
            os.write(2, f"error: {line}, and ignored being stopped for {STOP_GRACE_S:g} s; exiting\n".encode())
        _REAL_EXIT(EXIT_USER)


class _Settings:
    """Process-wide settings a reward file may change as a script would (at its top:
    ``torch.set_grad_enabled(False)``, ``warnings.simplefilter("error")``) and that would
    break the trainer after it: saved before the call, put back after; ``os._exit`` on the
    calling thread raises :class:`ExitCalled` during the call (a child process it forks exits
    as usual)."""

    def __init__(self) -> None:
        import warnings

        self.filters = list(warnings.filters)
        torch = sys.modules.get("torch")
        self.torch = (torch.is_grad_enabled(), torch.get_default_dtype()) if torch is not None else (True, None)
        pid, thread = os.getpid(), threading.get_ident()

        def exit_called(code: int) -> None:
            if os.getpid() == pid and threading.get_ident() != thread:  # another thread: named on the way out
                named_exit(code, sys._getframe(1))
            if os.getpid() != pid or threading.get_ident() != thread:
                _REAL_EXIT(code)
            raise ExitCalled(code)

        os._exit = exit_called

    def restore(self) -> None:
        import warnings

        os._exit = _exit_after_call if _USER_THREADS else _REAL_EXIT
        if warnings.filters != self.filters:
            warnings.resetwarnings()  # (marks the filters changed, as warnings' own functions do)
            warnings.filters[:] = self.filters
        torch = sys.modules.get("torch")
        if torch is not None:
            grad, dtype = self.torch
            torch.set_grad_enabled(grad)
            if dtype is not None and torch.get_default_dtype() != dtype:
                torch.set_default_dtype(dtype)


def named_exit(code: Any, frame: Any) -> None:
    """One line on stderr naming the user's ``os._exit(code)`` (its file and line, its
    thread) before the process ends: a call from a thread the user's code started cannot be
    turned into an exception."""
    where = ""
    while frame is not None:
        if not _library_file(frame.f_code.co_filename):
            where = f" ({os.path.basename(frame.f_code.co_filename)}, line {frame.f_lineno})"
            break
        frame = frame.f_back
    with contextlib.suppress(OSError, ValueError):
        os.write(2, f"error: the user's code called os._exit({code!r}){where} in thread "
                    f"'{threading.current_thread().name}'; the process ends here, with exit code {code!r}\n".encode())


def _other_handlers() -> dict[int, Any]:
    """The handler of every signal a call could replace, but SIGINT and SIGTERM (restored apart)."""
    out = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(ValueError, OSError):
            out[sig] = signal.getsignal(sig)
    return out


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working directory was removed
        return None


def _mark_daemon(thread: threading.Thread, daemon: bool) -> bool:
    """Set the flag a thread started from ``thread`` inherits (``Thread(daemon=None)`` copies
    ``current_thread().daemon``); returns the previous value. A private attribute of the
    threading module, present in every supported Python; without it nothing changes."""
    old = getattr(thread, "_daemonic", None)
    if isinstance(old, bool):
        thread._daemonic = daemon  # type: ignore[attr-defined]
        return old
    return daemon


class _Stream:
    """``sys.<name>`` and the file descriptor under it, as they were before the call."""

    def __init__(self, name: str, fd: int):
        self.name, self.fd = name, fd
        self.obj = getattr(sys, name)
        self.identity = _identity(fd)
        self.saved = None
        if self.identity is not None:
            with contextlib.suppress(OSError):
                self.saved = os.dup(fd)

    def restore(self) -> None:
        try:
            if self.saved is not None and _identity(self.fd) != self.identity:  # closed or reused
                os.dup2(self.saved, self.fd)
        except OSError:
            pass
        finally:
            if self.saved is not None:
                os.close(self.saved)
        current = getattr(sys, self.name)
        if self.obj is None or (current is self.obj and not _closed(current)):
            return  # unchanged (or there was none: no console)
        replacement = self.obj if not _closed(self.obj) else self._reopened()
        setattr(sys, self.name, replacement)
        if _closed(getattr(sys, f"__{self.name}__", None)):
            setattr(sys, f"__{self.name}__", replacement)

    def _reopened(self) -> Any:
        """A new text stream on the descriptor the closed one wrote to."""
        real = getattr(sys, f"__{self.name}__", None)
        if real is not None and real is not self.obj and not _closed(real):
            return real
        obj = self.obj
        try:
            return open(self.fd, "w", encoding=getattr(obj, "encoding", None) or "utf-8",
                        errors=getattr(obj, "errors", None) or "strict", closefd=False,
                        buffering=1 if getattr(obj, "line_buffering", False) else -1)
        except OSError:  # the descriptor is gone too, and could not be put back
            return open(os.devnull, "w")


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _closed(stream: Any) -> bool:
    return stream is None or bool(getattr(stream, "closed", False))


