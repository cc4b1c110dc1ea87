"""Runs untrusted Python programs: the sandbox behind the code verifier.

    from vigor_cli.sandbox import Job, Limits, SandboxPool
    with SandboxPool(workers=2) as pool:
        result = pool.run_one(Job("print(input()[::-1])", stdin=b"abc\\n"))
        result.outcome, result.stdout        # ('ok', b'cba\\n')

Layers, outermost first:

* ``pool``: ``SandboxPool`` starts one fresh interpreter per worker (never a fork
  of the caller) and keeps every worker busy; results come back as plain data,
  each with the isolation level it ran under (``isolation_level``: "full" or
  "weak (no ...)"). Slot ``i`` runs programs as uid ``SANDBOX_UID_BASE + i``.
* ``worker``: the fork server. Imported once: the harness, LiveCodeBench's
  prelude modules, numpy. At start it enters its own network, IPC and mount
  namespaces (private tmpfs ``/tmp``, ``/var/tmp``, ``/dev/shm``; the Python
  installation made reachable by the sandbox uid), see ``namespace``, computes the
  Landlock allow-list (``landlock``), compiles the seccomp filter, and forks the
  **zygote**: the init of a PID namespace of its own, which never holds a job's
  data and forks one child per test. Per test the server writes the program to the
  job directory (a capped tmpfs), passes stdin through a memfd, reads
  stdout/stderr/status into fixed buffers, kills the child at the wall-clock
  limit, empties the job directory without recursion and removes the System V
  objects the job made.
* ``child``: new session, fds 0-3 only, scrubbed environment, rlimits (CPU,
  address space relative to its own size, stack, file size, open files,
  processes), the slot's unprivileged uid (when root), non-dumpable, dies with the
  zygote, Landlock, seccomp (``seccomp_filter``); then the program runs as a real
  ``__main__`` script.
"""

from vigor_cli.sandbox.limits import NOBODY_UID, SANDBOX_UID_BASE, Limits
from vigor_cli.sandbox.pool import (Job, RunResult, SandboxError, SandboxPool, WeakSandboxError,
                                    isolation_level)

__all__ = ["Job", "Limits", "NOBODY_UID", "RunResult", "SANDBOX_UID_BASE", "SandboxError",
           "SandboxPool", "WeakSandboxError", "isolation_level"]
