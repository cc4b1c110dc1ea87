"""A worker's lifeline to the process that started it: when that process dies, the worker dies.

``PR_SET_PDEATHSIG`` is not enough on its own: it fires when the *thread* that started the
worker ends, and it follows the direct parent, which for a multiprocessing forkserver worker
is the forkserver, not the trainer. A pipe the worker reads only helps while it is reading;
a worker busy with a job (a program under test with a 60 s limit, a sympy expansion) would
outlive a SIGKILLed parent by that long.

Details: docs/modules.md.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time

POLL_FALLBACK_S = 0.2
"""How often to look for the parent where there is no pidfd (kernels before 5.3)."""


def die_with(parent_pid: int) -> None:
    """Start a daemon thread that SIGKILLs this process as soon as ``parent_pid`` exits (a
    parent already gone counts as dead at once)."""
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
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="vigor-lifeline", daemon=True).start()


def pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (readable once it exits), or None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here, or already gone (the fallback sees that)
        return None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, under another uid
        pass
    return True
