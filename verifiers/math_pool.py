"""Math grading under a time limit, in processes that can be killed.

Details: docs/modules.md.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Sequence

from vigor_cli.verifiers.math_grade import Gold, MathVerdict, fast_grade, grade_any
from vigor_cli.verifiers.math_latex import math_verify

DEFAULT_MAX_WORKERS = 16
"""``workers=0`` means one worker per core, at most this many."""

WORKER_EXTRA_MEMORY = 1 << 30
"""Address space a worker may grow by past its size at start (bytes): MemoryError, not swap."""

STARTUP_TIMEOUT_S = 120.0
"""How long a new worker may take to import Math-Verify and report ready."""


def _limit_memory(extra: int) -> None:
    import resource

    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, size + extra))


def _worker_main(conn, extra_memory: int, parent_pid: int | None = None) -> None:
    """Grade chunks of (index, gold, completion[, problem]) sent on ``conn``; one reply per item, in order.

    One reply per item (not per chunk) lets the parent time each item separately.
    ``parent_pid``: the process that owns this worker; when it dies (SIGKILL included) the
    worker dies too, even in the middle of a slow item (its real parent is the forkserver).
    """
    _child_setup(extra_memory, parent_pid)
    math_verify()
    conn.send("ready")
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for item in chunk:
            reply = _grade_reply(item)
            try:
                conn.send(reply)
            except (BrokenPipeError, OSError):
                return


def _child_setup(extra_memory: int, parent_pid: int | None) -> None:
    """A grading process's start (pool worker or one-shot child): Ctrl-C and a group's SIGTERM
    are the parent's to handle (it finishes the step, which needs this process); it dies with
    the parent (die_with) and under a memory cap."""
    import signal

    from vigor_cli.sandbox.lifeline import die_with

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if parent_pid is not None:
        die_with(parent_pid)
    try:
        _limit_memory(extra_memory)
    except (OSError, ValueError):
        pass  # no /proc or no rlimits: the time limit still holds


def _grade_reply(item: tuple) -> tuple:
    """(index, reward, reason, gold_parsed, pred_parsed) for one (index, gold, completion[, problem])."""
    index = item[0]
    try:
        gold, completion = item[1], item[2]
        problem = item[3] if len(item) > 3 else None
        v = grade_any(gold, completion, problem)
        return (index, v.reward, v.reason, v.gold_parsed, v.pred_parsed)
    except BaseException as e:  # noqa: BLE001 - RecursionError, MemoryError, sympy bugs
        try:
            detail = str(e)[:120]
        except Exception:  # noqa: BLE001 - str() of a sympy object can fail too
            detail = ""
        return (index, 0.0, f"error: {type(e).__name__}: {detail}", "", "")


def _forked_child(conn, items: list, extra_memory: int, parent_pid: int | None = None) -> None:
    _child_setup(extra_memory, parent_pid)
    for item in items:
        try:
            conn.send(_grade_reply(item))
        except (BrokenPipeError, OSError):
            return


def _plain_items(pairs: Sequence[tuple]) -> list[tuple]:
    items = []
    for i, pair in enumerate(pairs):
        gold = tuple(str(g) for g in pair[0]) if isinstance(pair[0], (list, tuple)) else str(pair[0])
        problem = pair[2] if len(pair) > 2 and pair[2] is not None else None
        items.append((i, gold, str(pair[1]), None if problem is None else str(problem)))
    return items


_prestarted: tuple[Connection, int] | None = None
"""A grading child started early by :func:`prestart` (its connection and pid), not yet used."""


def prestart(extra_memory: int = WORKER_EXTRA_MEMORY) -> None:
    """Fork the child that :func:`grade_forked` will use, now, so that it imports Math-Verify
    while this process goes on starting (``vigor verify math`` calls this before loading its
    command line framework: the two imports overlap). Does nothing where Math-Verify is already
    imported (a fork then is as quick later). The child dies with this process, and leaves
    when the connection closes unused."""
    global _prestarted
    if _prestarted is not None or "math_verify" in sys.modules:
        return
    _prestarted = _fork(lambda conn, parent_pid: _worker_main(conn, extra_memory, parent_pid))


def _fork(run) -> tuple[Connection, int]:
    """(our end of a connection, pid) of a child forked from this process that calls
    ``run(its end, our pid)`` and exits without running this process's exit handlers."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    parent_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            run(Connection(theirs.detach()), parent_pid)
        finally:
            os._exit(0)
    theirs.close()
    return Connection(ours.detach()), pid


def _take_prestarted(timeout_s: float) -> tuple[Connection, int] | None:
    """The prestarted child once it is ready (None when there is none, or it failed)."""
    global _prestarted
    started, _prestarted = _prestarted, None
    if started is None:
        return None
    conn, pid = started
    try:
        if conn.poll(max(timeout_s, STARTUP_TIMEOUT_S)) and conn.recv() == "ready":
            return started
    except (EOFError, OSError):
        pass
    _end_child(started)
    return None


def _end_child(started: tuple[Connection, int]) -> None:
    conn, pid = started
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    conn.close()


def _fork_child(items: list, extra_memory: int) -> tuple[Connection, int]:
    """A child forked from this process (Math-Verify imported first) grading ``items``."""
    math_verify()  # the child inherits it
    return _fork(lambda conn, parent_pid: _forked_child(conn, items, extra_memory, parent_pid))


def grade_forked(pairs: Sequence[tuple], timeout_s: float = 5.0, extra_memory: int = WORKER_EXTRA_MEMORY) -> list[MathVerdict]:
    """Grade a few (gold, completion[, problem]) cases without a worker pool: a child (the one
    :func:`prestart` started, or one forked from this process after importing Math-Verify)
    grades the cases one after another.

    The limit is enforced: a case that takes longer than ``timeout_s`` gets reason
    ``timeout``, its child is killed, and a fresh child goes on with the cases after it.
    No forkserver and no pool start, so one case costs the import plus milliseconds. For
    single-threaded callers (the CLI); a threaded program should use :class:`MathVerifier`.
    """
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    items = _plain_items(pairs)
    quick = [fast_grade(gold, completion, problem) if isinstance(gold, str) else None
             for _, gold, completion, problem in items]
    if all(v is not None for v in quick):
        if _prestarted is not None:
            _end_child(_prestarted)  # not needed: stop its import
            globals()["_prestarted"] = None
        return quick  # type: ignore[return-value]  # plain numbers: no import, no child
    results: list[MathVerdict] = []
    started = _take_prestarted(timeout_s)
    while len(results) < len(items):
        if started is not None:
            child, started = started, None
            child[0].send(items[len(results) :])
        else:
            child = _fork_child(items[len(results) :], extra_memory)
        try:
            while len(results) < len(items):
                if not child[0].poll(timeout_s):
                    results.append(MathVerdict(0.0, "timeout"))
                    break
                try:
                    _, reward, reason, gp, pp = child[0].recv()
                except (EOFError, OSError):
                    results.append(MathVerdict(0.0, "error: worker process died"))
                    break
                results.append(MathVerdict(reward, reason, gp, pp))
        finally:
            _end_child(child)
    return results


_ZYGOTE_BOOT = "from vigor_cli.verifiers.math_pool import _zygote_main; _zygote_main()"


def _zygote_main() -> None:
    """The zygote's life (``python -c _ZYGOTE_BOOT SOCKET_FD PARENT_PID EXTRA_MEMORY``): import
    Math-Verify once, then fork a worker for each descriptor the verifier sends and send back
    the worker's pidfd. Ends the moment its parent does (no interpreter shutdown)."""
    from vigor_cli.sandbox.lifeline import _exists, die_with, pidfd

    sock_fd, parent_pid, extra_memory = (int(arg) for arg in sys.argv[1:4])
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C and a group's SIGTERM are the
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # parent's to handle (it needs us to finish)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    die_with(parent_pid)  # also during the second or two of importing Math-Verify
    sock = socket.socket(fileno=sock_fd)
    parent = pidfd(parent_pid)
    math_verify()
    sock.send(b"ready")
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if parent is not None:
        poller.register(parent, select.POLLIN)
    while True:
        events = poller.poll(None if parent is not None else 200)
        if any(fd == parent for fd, _ in events) or (parent is None and not _exists(parent_pid)):
            os._exit(0)
        if not events:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(sock, 16, 1)
        except OSError:
            os._exit(0)
        if not message:  # the verifier closed
            os._exit(0)
        if not fds:
            continue
        try:
            pid = os.fork()
        except OSError:
            os.close(fds[0])
            sock.send(b"failed")
            continue
        if pid == 0:
            try:
                sock.close()
                if parent is not None:
                    os.close(parent)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _worker_main(Connection(fds[0]), extra_memory, parent_pid)
            finally:
                os._exit(0)
        os.close(fds[0])
        child = os.pidfd_open(pid)
        socket.send_fds(sock, [b"started"], [child])
        os.close(child)


class _Child:
    """A worker process (the zygote's child) seen through its pidfd: no pid reuse, no waiting
    on a process that is not ours."""

    def __init__(self, pidfd: int):
        self.pidfd = pidfd
        self.pid = int(next((line.split()[1] for line in open(f"/proc/self/fdinfo/{pidfd}")
                             if line.startswith("Pid:")), "-1"))

    def kill(self) -> None:
        if self.pidfd >= 0:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def join(self, timeout: float | None = None) -> None:
        if self.pidfd >= 0:
            select.select([self.pidfd], [], [], timeout)

    def is_alive(self) -> bool:
        return self.pidfd >= 0 and not select.select([self.pidfd], [], [], 0)[0]

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


class _Zygote:
    """A fresh interpreter (never a fork of the caller, which may hold GPUs and threads) that
    has imported Math-Verify and forks workers on request, in milliseconds."""

    def __init__(self, extra_memory: int):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path
                                            if p and os.path.isdir(p))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE_BOOT, str(theirs.fileno()), str(os.getpid()),
                 str(extra_memory)],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, cwd="/")
        finally:
            theirs.close()
        self.sock = ours
        if self._reply(STARTUP_TIMEOUT_S)[0] != b"ready":
            self.close()
            raise RuntimeError("the math verifier's zygote did not start (see its stderr above)")

    def _reply(self, timeout: float) -> tuple[bytes, list[int]]:
        if not select.select([self.sock], [], [], timeout)[0]:
            return b"", []
        try:
            message, fds, _, _ = socket.recv_fds(self.sock, 16, 1)
        except OSError:
            return b"", []
        return message, fds

    def fork(self) -> tuple[Connection, _Child]:
        """A new worker: (the connection to it, its handle). Raises RuntimeError."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(self.sock, [b"fork"], [theirs.fileno()])
        except OSError as exc:
            ours.close()
            raise RuntimeError(f"the math verifier's zygote is gone: {exc}") from None
        finally:
            theirs.close()
        message, fds = self._reply(STARTUP_TIMEOUT_S)
        if message != b"started" or not fds:
            ours.close()
            raise RuntimeError("the math verifier's zygote could not start a worker")
        return Connection(ours.detach()), _Child(fds[0])

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self.sock.close()  # the zygote sees the end of file and leaves
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Worker:
    def __init__(self, zygote: _Zygote):
        self.conn, self.proc = zygote.fork()
        ready = self.conn.poll(STARTUP_TIMEOUT_S)
        try:
            ok = ready and self.conn.recv() == "ready"
        except (EOFError, OSError):
            ok = False
        if not ok:
            self.kill()
            raise RuntimeError("a math verifier worker did not start")
        self.items: deque = deque()  # (index, gold, completion, problem) sent and not yet answered
        self.item_started = 0.0

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(timeout=5)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self.proc.close()
        self.conn.close()


class MathVerifier:
    """Time-bounded math rewards over a pool of worker processes kept alive across calls.

    ``timeout_s`` bounds each item; ``workers=0`` means one per CPU core (at most 16). Use as a
    context manager or call :meth:`close`. Safe to call from any thread (calls are
    serialised).
    """

    def __init__(self, timeout_s: float = 5.0, workers: int = 0, extra_memory: int = WORKER_EXTRA_MEMORY):
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.timeout_s = float(timeout_s)
        self.workers = workers if workers > 0 else min(os.cpu_count() or 1, DEFAULT_MAX_WORKERS)
        self._extra_memory = extra_memory
        self._zygote: _Zygote | None = None
        self._pool: list[_Worker] = []
        self._dying: list = []  # killed worker processes not yet seen to exit
        self._lock = threading.Lock()
        self.restarts = 0
        """Workers killed and replaced so far (timeouts and crashes)."""

    # -- public API ---------------------------------------------------------------------

    def score(self, gold: Gold, completion: str, problem: str | None = None, *, question: str | None = None) -> MathVerdict:
        return self.score_many([(gold, completion, problem if problem is not None else question)])[0]

    def score_many(self, pairs: Sequence[tuple]) -> list[MathVerdict]:
        """Verdicts for (gold, completion) or (gold, completion, problem) tuples, in order,
        graded in parallel (``problem``: the question's text, or None; see :func:`grade`)."""
        items = []
        for i, pair in enumerate(pairs):
            gold, completion = pair[0], pair[1]
            problem = pair[2] if len(pair) > 2 and pair[2] is not None else None
            if isinstance(gold, (list, tuple)):
                gold = tuple(str(g) for g in gold)
            else:
                gold = str(gold)
            items.append((i, gold, str(completion), None if problem is None else str(problem)))
        if not items:
            return []
        with self._lock:
            return self._run(items)

    def close(self) -> None:
        with self._lock:
            for w in self._pool:
                try:
                    w.conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
            for w in self._pool:
                w.proc.join(timeout=1)
                w.kill()
            for proc in self._dying:
                proc.join(timeout=5)
                proc.close()
            self._pool, self._dying = [], []
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    def __enter__(self) -> "MathVerifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- scheduling ---------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        if self._zygote is not None and not self._zygote.alive():
            self._zygote.close()
            self._zygote = None
        if self._zygote is None:
            self._zygote = _Zygote(self._extra_memory)
        return _Worker(self._zygote)

    def _run(self, items: list) -> list[MathVerdict]:
        results: list[MathVerdict | None] = [None] * len(items)
        # Same gold next to each other: one worker parses it once and reuses it.
        items.sort(key=lambda it: (str(it[1]), it[0]))
        n_workers = min(self.workers, len(items))
        size = max(1, min(64, -(-len(items) // (n_workers * 4))))
        pending = deque(items[k : k + size] for k in range(0, len(items), size))
        left = len(items)
        while left:
            self._reap()
            while len(self._pool) < n_workers:
                self._pool.append(self._spawn())
            now = time.monotonic()
            for w in list(self._pool):
                if not w.items and pending:
                    chunk = pending.popleft()
                    try:
                        w.conn.send(chunk)
                    except (BrokenPipeError, OSError):
                        pending.appendleft(chunk)
                        self._retire(w)
                        continue
                    w.items.extend(chunk)
                    w.item_started = now
            busy = [w for w in self._pool if w.items]
            if not busy:
                continue  # a send failed: start a replacement and try again
            deadline = min(w.item_started for w in busy) + self.timeout_s
            ready = wait([w.conn for w in busy], timeout=max(0.0, deadline - time.monotonic()))
            for w in busy:
                if w.conn in ready:
                    while w.items and w.conn.poll():
                        try:
                            index, reward, reason, gp, pp = w.conn.recv()
                        except (EOFError, OSError):
                            left -= self._fail(w, results, pending, "error: worker process died")
                            break
                        results[index] = MathVerdict(reward, reason, gp, pp)
                        w.items.popleft()
                        w.item_started = time.monotonic()
                        left -= 1
                elif time.monotonic() - w.item_started >= self.timeout_s:
                    left -= self._fail(w, results, pending, "timeout")
        return results  # type: ignore[return-value]

    def _fail(self, w: _Worker, results: list, pending: deque, reason: str) -> int:
        """Score the worker's current item 0 with ``reason``, hand its other items back, retire it."""
        index = w.items.popleft()[0]
        results[index] = MathVerdict(0.0, reason)
        if w.items:
            pending.appendleft(list(w.items))
            w.items.clear()
        self._retire(w)
        return 1

    def _retire(self, w: _Worker) -> None:
        """SIGKILL a worker and drop it from the pool without waiting for it to exit (a worker
        that holds gigabytes can take a second to die); _reap and close collect it."""
        try:
            w.proc.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass
        w.conn.close()
        self._pool.remove(w)
        self._dying.append(w.proc)
        self.restarts += 1

    def _reap(self) -> None:
        alive = []
        for proc in self._dying:
            if proc.is_alive():
                alive.append(proc)
            else:
                proc.close()
        self._dying = alive
