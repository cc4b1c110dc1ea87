"""Resource limits for one sandboxed run, and the defaults they take."""

from __future__ import annotations

from dataclasses import asdict, dataclass

NOBODY_UID = 65534
"""The unprivileged uid (and gid) a child drops to when the sandbox runs as root."""


@dataclass(frozen=True)
class Limits:
    """What one run of an untrusted program may use.

    The memory limit is *headroom*: the child's address-space limit is its own
    size right after the fork plus this many MiB, so a large fork server never
    leaves the program with no room (the upstream harness's absolute limit did).
    """

    timeout_s: float = 6.0
    """Wall-clock limit; the whole process group is killed when it passes."""
    cpu_s: float | None = None
    """CPU-time limit (RLIMIT_CPU); None: the wall-clock limit rounded up, plus one second."""
    memory_mb: int = 512
    """Address space the program may add on top of the child's size at fork (RLIMIT_AS)."""
    stack_mb: int = 256
    """Stack limit (RLIMIT_STACK) for deep recursion; counted inside the address space."""
    file_size_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE)."""
    open_files: int = 64
    """Open file descriptors (RLIMIT_NOFILE)."""
    stdout_cap: int = 32 * 1024 * 1024
    """Bytes of standard output kept; past this the program is killed (output limit)."""
    stderr_cap: int = 64 * 1024
    """Bytes of standard error kept; the rest is read and dropped (the program goes on)."""

    def cpu_limit_s(self) -> int:
        """The RLIMIT_CPU soft limit in whole seconds."""
        if self.cpu_s is not None:
            return max(1, int(self.cpu_s + 0.999))
        return int(self.timeout_s + 0.999) + 1

    def to_dict(self) -> dict:
        return asdict(self)
