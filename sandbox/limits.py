"""Resource limits for one sandboxed run, and the defaults they take."""

from __future__ import annotations

from dataclasses import asdict, dataclass

NOBODY_UID = 65534
"""The system's shared unprivileged uid: no longer used for programs (services run as it)."""
SANDBOX_UID_BASE = 2_000_000_000
"""When the sandbox runs as root, each pool claims a block of 256 uids from here on (a lock
per block under /run/vigor-sandbox) and slot ``i`` runs its programs as the block's uid
``i`` (gid the same): no login user, no service and no container range (systemd's map
leaves 1879048192-2147352575 unassigned) owns them, and no two slots of any two pools
running at once share one."""


@dataclass(frozen=True)
class Limits:
    """What one run of an untrusted program may use.

    The memory limit is *headroom*: what the program may add to what it starts with, so a
    large fork server never leaves the program with no room (the upstream harness's
    absolute limit did). Where the slot has a memory cgroup (``sandbox.memory_cgroup``) it
    counts everything the program holds (shared memory, tmpfs files, page tables); elsewhere
    it is the address-space limit (RLIMIT_AS) over the child's size right after the fork.
    """

    timeout_s: float = 6.0
    """Wall-clock limit; the whole process group is killed when it passes."""
    cpu_s: float | None = None
    """CPU-time limit (RLIMIT_CPU); None: the wall-clock limit rounded up, plus one second."""
    memory_mb: int = 512
    """Memory the program may add on top of the child's size at fork: counted by its memory
    cgroup where there is one, else as address space (RLIMIT_AS)."""
    reserve_mb: int = 1024
    """With a memory cgroup: address space the program may reserve beyond ``memory_mb``
    without using it (thread stacks, sparse arrays); past it an allocation fails at once
    (MemoryError) instead of filling the cgroup until the kernel kills the program."""
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
    disk_mb: int = 64
    """Size of the job directory (a tmpfs of its own, with at most 4096 entries)."""

    def cpu_limit_s(self) -> int:
        """The RLIMIT_CPU soft limit in whole seconds."""
        if self.cpu_s is not None:
            return max(1, int(self.cpu_s + 0.999))
        return int(self.timeout_s + 0.999) + 1

    def to_dict(self) -> dict:
        return asdict(self)
