"""Runs untrusted Python programs: the sandbox behind the code verifier.

    from vigor_cli.sandbox import Job, Limits, SandboxPool
    with SandboxPool(workers=2) as pool:
        result = pool.run_one(Job("print(input()[::-1])", stdin=b"abc\\n"))
        result.outcome, result.stdout        # ('ok', b'cba\\n')

Details: docs/modules.md.
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
