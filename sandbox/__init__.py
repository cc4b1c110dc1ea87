"""Runs untrusted Python programs: limits, seccomp, an unprivileged uid, a fork-server pool.

    from sandbox import Job, Limits, SandboxPool
    with SandboxPool(workers=2) as pool:
        result = pool.run_one(Job("print(input()[::-1])", stdin=b"abc\n"))
        result.outcome, result.stdout        # ('ok', b'cba\n')
"""

from sandbox.limits import NOBODY_UID, Limits
from sandbox.pool import Job, RunResult, SandboxError, SandboxPool

__all__ = ["Job", "Limits", "NOBODY_UID", "RunResult", "SandboxError", "SandboxPool"]
