"""A worker's lifeline to the process that started it: when that process dies, the worker dies.

``PR_SET_PDEATHSIG`` is not enough on its own: it fires when the *thread* that started the
worker ends, and it follows the direct parent, which for a multiprocessing forkserver worker
is the forkserver, not the trainer. A pipe the worker reads only helps while it is reading;
a worker busy with a job (a program under test with a 60 s limit, a sympy expansion) would
outlive a SIGKILLed parent by that long.

:func:`die_with` watches the parent's pidfd from a daemon thread, which wakes the moment the
parent exits, whatever killed it. It then runs the worker's own last step (the fork server
kills its zygote, which takes the program under test with it) and, if the process has not
ended by itself within ``grace_s``, SIGKILLs it.

A process that may not start threads (the sandbox's fork server runs under a thread limit)
polls :func:`pidfd` itself wherever it waits.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Callable

POLL_FALLBACK_S = 0.2
"""How often to look for the parent where there is no pidfd (kernels before 5.3)."""


def die_with(parent_pid: int, last_step: Callable[[], None] | None = None,
             grace_s: float = 1.0) -> threading.Thread:
    """Start a daemon thread that ends this process soon after ``parent_pid`` exits.

    ``last_step`` runs first (errors ignored); then the process gets ``grace_s`` seconds to
    end on its own before SIGKILL. A parent already gone counts as dead at once."""
    fd = pidfd(parent_pid)

    def watch() -> None:
        if fd is not None:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while not poller.poll(None):
                pass
        else:
            while _exists(parent_pid):
                time.sleep(POLL_FALLBACK_S)
        if last_step is not None:
            try:
                last_step()
            except Exception:  # noqa: BLE001 - the process is going anyway
                pass
            time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="vigor-lifeline", daemon=True)
    thread.start()
    return thread


def pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (readable once it exits), or None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        # Already gone: a pidfd of our own pid never becomes readable, so use the fallback,
        # which finds the parent missing on its first look.
        return None
    except (AttributeError, OSError):
        return None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
