"""Runs untrusted Python programs: the sandbox behind the code verifier.

    from vigor_cli.sandbox import Job, Limits, SandboxPool
    with SandboxPool(workers=2) as pool:
        result = pool.run_one(Job("print(input()[::-1])", stdin=b"abc\\n"))
        result.outcome, result.stdout        # ('ok', b'cba\\n')

Layers, outermost first:

* ``pool``: ``SandboxPool`` starts one fresh interpreter per worker (never a fork
  of the caller) and keeps every worker busy; results come back as plain data,
  each with the isolation level it ran under (``isolation_level``: "full" or
  "weak (no ...)", followed by ", memory: rlimit only" where no memory cgroup bounds
  the programs). Slot ``i`` runs programs as uid ``SANDBOX_UID_BASE + i``.
* ``worker``: the fork server. Imported once: the harness, LiveCodeBench's
  prelude modules, numpy. At start it enters its own network, IPC and mount
  namespaces (private tmpfs ``/tmp``, ``/var/tmp``; a private ``/dev``; the Python
  installation made reachable by the sandbox uid), see ``namespace``, computes the
  Landlock allow-list (``landlock``), compiles the seccomp filter, makes the slot's
  memory cgroup where the host allows it (``memory_cgroup``), and forks the
  **zygote** (``zygote``): the init of a PID namespace of its own, which never holds a
  job's data, checks each layer once (``probe``) and forks one child per test, every
  message naming its job. Per test the server mounts a fresh capped tmpfs
  as the job directory (``work/``, ``tmp/`` for TMPDIR, ``shm/`` behind the slot's
  ``/dev/shm``), writes the program there, passes stdin through a memfd, reads
  stdout/stderr/status into fixed buffers (``capture``), kills the child at the wall-clock limit,
  detaches the tmpfs and removes any System V object left in the slot's IPC namespace.
* ``child``: joins the slot's memory cgroup, new session, fds 0-3 only, scrubbed
  environment, rlimits (CPU, address space relative to its own size, stack, file size, open files,
  processes), the slot's unprivileged uid (when root), non-dumpable, dies with the
  zygote, an IPC namespace of its own sized to its memory limit, Landlock, seccomp
  (``seccomp_filter``); one byte on the ready pipe (closed
  before user code: the only way the server learns the child is confined); then the
  program runs as a real ``__main__`` script.
* ``values``: what a program produced (status line, returned value) is read with
  bounded nesting and compared without recursion; ``pool.clean_stderr`` cuts the
  harness's frames and paths from its stderr.
"""

_FROM_POOL = ("Job", "RunResult", "SandboxError", "SandboxPool", "WeakSandboxError", "isolation_level")
_FROM_LIMITS = ("Limits", "NOBODY_UID", "SANDBOX_UID_BASE")
__all__ = sorted(_FROM_POOL + _FROM_LIMITS)


def __getattr__(name: str):
    """The package's names, imported on first use: a process that needs only
    ``vigor_cli.sandbox.lifeline`` (a math grading child) does not load the pool."""
    if name in _FROM_POOL:
        from vigor_cli.sandbox import pool
        return getattr(pool, name)
    if name in _FROM_LIMITS:
        from vigor_cli.sandbox import limits
        return getattr(limits, name)
    raise AttributeError(f"module 'vigor_cli.sandbox' has no attribute {name!r}")
