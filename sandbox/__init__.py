"""Runs untrusted Python programs: the sandbox behind the code verifier.

    from vigor_cli.sandbox import Job, Limits, SandboxPool
    with SandboxPool(workers=2) as pool:
        result = pool.run_one(Job("print(input()[::-1])", stdin=b"abc\\n"))
        result.outcome, result.stdout        # ('ok', b'cba\\n')

Layers, outermost first:

* ``pool``: ``SandboxPool`` starts one fresh interpreter per worker (never a fork
  of the caller) and keeps every worker busy; results come back as plain data.
* ``worker``: the fork server. Imported once: the harness, LiveCodeBench's
  prelude modules, numpy. At start it compiles the seccomp filter and, when root
  may, enters its own network namespace (no network) and mount namespace
  (private tmpfs ``/tmp``, ``/var/tmp``, ``/dev/shm``; the Python installation
  made readable to the sandbox uid), see ``namespace``. Per test it forks a
  child in a fresh temp dir, feeds stdin from a memfd, reads stdout/stderr with
  byte caps, kills the process group at the wall-clock limit, reaps it, removes
  the dir and sweeps what the child left in world-writable dirs.
* ``child``: new session, fds 0-3 only, scrubbed environment, rlimits (CPU,
  address space relative to its own size, stack, file size, open files,
  processes), unprivileged uid (when root), non-dumpable, dies with the fork
  server, seccomp (``seccomp_filter``); then the program runs as a real
  ``__main__`` script.
"""

from vigor_cli.sandbox.limits import NOBODY_UID, SANDBOX_UID_BASE, Limits
from vigor_cli.sandbox.pool import (Job, RunResult, SandboxError, SandboxPool, WeakSandboxError,
                                    isolation_level)

__all__ = ["Job", "Limits", "NOBODY_UID", "RunResult", "SANDBOX_UID_BASE", "SandboxError",
           "SandboxPool", "WeakSandboxError", "isolation_level"]
