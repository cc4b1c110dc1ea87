"""The seccomp filter loaded in every sandboxed child before user code runs.

Details: docs/modules.md.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
import tempfile

CLONE_THREAD = 0x00010000

_DENIED_OUTRIGHT = (
    "connect",
    "bind",
    "sendmsg",
    "sendmmsg",
    "fork",
    "vfork",
    "execve",
    "execveat",
    "tkill",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_open",
    "pidfd_send_signal",
    "pidfd_getfd",
    "mount",
    "umount2",
    "unshare",
    "setns",
    "reboot",
    "swapon",
    "swapoff",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "io_uring_setup",
    "process_madvise",
    "migrate_pages",
    "move_pages",
    "kcmp",
    "memfd_create",
    "memfd_secret",
    "inotify_init",
    "inotify_init1",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    # machine-wide effects: the AIO family takes from one quota the whole machine shares
    # (io_setup(65536) left the host none), sync/syncfs start writeback of every file system,
    # and a lock on a file two programs can both open is a channel between them
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",
    "sync",
    "syncfs",
    "flock",
)

_UNIFIED_NUMBERS = {
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "landlock_create_ruleset": 444,
    "landlock_add_rule": 445, "landlock_restrict_self": 446, "memfd_secret": 447,
}
"""Syscalls from 424 on have one number on every architecture: the rule is added by number
where an older libseccomp does not know the name (a missing rule is never silently skipped)."""

_SELF_ONLY_ARG0 = (
    "prlimit64",
    "sched_setaffinity",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
)
"""Syscalls whose first argument names a target pid: allowed only with 0 (the caller), so a
program cannot lower a sibling's limits or starve it (glibc's setrlimit is prlimit64(0, …))."""

_SELF_ONLY_ARG1 = ("setpriority", "ioprio_set")
"""Syscalls whose second argument names the target (who): allowed only with 0 (the caller)."""
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1
"""...and whose first argument says what kind of target: only a process (never a process
group or a whole uid, which ``who == 0`` would make every program of the same uid)."""
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _F_SETPIPE_SZ = 8, 10, 15, 1031
_FCNTL_LOCKS = (5, 6, 7, 36, 37, 38, 1024)
"""F_GETLK, F_SETLK, F_SETLKW (record locks: ``lockf``), F_OFD_GETLK, F_OFD_SETLK,
F_OFD_SETLKW (open file description locks) and F_SETLEASE: with ``flock``, every lock."""
_SOL_SOCKET = 1
_SOCKET_BUFFER_OPTIONS = (7, 8, 32, 33)
"""SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE."""
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902
_POSIX_FADV_DONTNEED = 4
"""``fadvise64``'s advice (its fourth argument) that drops a file's clean pages from the
host's page cache for everyone: any file the program can read (the standard library's)."""
_MADV_COLD, _MADV_PAGEOUT = 20, 21
"""``madvise`` advice that deactivates or reclaims the pages of a mapping, file pages shared
with the host's cache included; the other advice (``MADV_DONTNEED`` unmaps, the cache stays)
is allowed."""
_LOW_32_BITS = 0xFFFFFFFF
"""fcntl's and ioctl's command argument (like fadvise64's and madvise's advice) is a 32-bit
number to the kernel: compare only it."""


def build_filter(own_pid: int):
    """The filter as a ``pyseccomp.SyscallFilter`` (not loaded). ``own_pid``: the one pid
    the signal-sending calls may target, so a program can still signal itself."""
    import pyseccomp as sc

    deny = sc.ERRNO(errno.EPERM)
    filt = sc.SyscallFilter(defaction=sc.ALLOW)
    filt.add_rule(deny, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    filt.add_rule(deny, "sendto", sc.Arg(4, sc.NE, 0))
    filt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        filt.add_rule(deny, name, sc.Arg(0, sc.NE, own_pid))
    for name in _SELF_ONLY_ARG0:
        filt.add_rule(deny, name, sc.Arg(0, sc.NE, 0))
    for name in _SELF_ONLY_ARG1:
        filt.add_rule(deny, name, sc.Arg(1, sc.NE, 0))
    filt.add_rule(deny, "setpriority", sc.Arg(0, sc.NE, _PRIO_PROCESS))
    filt.add_rule(deny, "ioprio_set", sc.Arg(0, sc.NE, _IOPRIO_WHO_PROCESS))
    for command in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _F_SETPIPE_SZ, *_FCNTL_LOCKS):
        filt.add_rule(deny, "fcntl", sc.Arg(1, sc.MASKED_EQ, _LOW_32_BITS, command))
    for option in _SOCKET_BUFFER_OPTIONS:
        filt.add_rule(deny, "setsockopt", sc.Arg(1, sc.MASKED_EQ, _LOW_32_BITS, _SOL_SOCKET),
                      sc.Arg(2, sc.MASKED_EQ, _LOW_32_BITS, option))
    filt.add_rule(deny, "fadvise64", sc.Arg(3, sc.MASKED_EQ, _LOW_32_BITS, _POSIX_FADV_DONTNEED))
    for advice in (_MADV_COLD, _MADV_PAGEOUT):
        filt.add_rule(deny, "madvise", sc.Arg(2, sc.MASKED_EQ, _LOW_32_BITS, advice))
    for request in (_FIOSETOWN, _SIOCSPGRP):
        filt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, _LOW_32_BITS, request))
    for name in _DENIED_OUTRIGHT:
        known = sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0
        filt.add_rule(deny, name if known or name not in _UNIFIED_NUMBERS else _UNIFIED_NUMBERS[name])
    return filt


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


_PID_SENTINEL = 0x3ADC0FFE
"""A pid no process has: compiled into the BPF, then replaced by the child's real pid."""
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


class CompiledFilter:
    """The filter compiled to BPF once (in the fork server); each child patches in its pid
    and installs it with one ``prctl``, about 1 ms cheaper than building it per child."""

    def __init__(self) -> None:
        with tempfile.TemporaryFile() as f:
            build_filter(_PID_SENTINEL).export_bpf(f)
            f.seek(0)
            self.program = f.read()
        size = ctypes.sizeof(_SockFilter)
        self.pid_offsets = [
            offset + 4 for offset in range(0, len(self.program), size)
            if struct.unpack_from("=I", self.program, offset + 4)[0] == _PID_SENTINEL
        ]
        # kill and tgkill compare the pid (libseccomp may share one BPF block for both).
        if not self.pid_offsets:
            raise OSError("unexpected BPF layout: no pid comparison to patch")
        self._libc = ctypes.CDLL(None, use_errno=True)

    def load(self, own_pid: int) -> None:
        """Install the filter for ``own_pid`` in the calling process."""
        program = bytearray(self.program)
        for offset in self.pid_offsets:
            struct.pack_into("=I", program, offset, own_pid)
        buffer = (ctypes.c_char * len(program)).from_buffer(program)
        fprog = _SockFprog(len(program) // ctypes.sizeof(_SockFilter),
                           ctypes.cast(buffer, ctypes.POINTER(_SockFilter)))
        libc = self._libc
        for args, what in (((_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS"),
                           ((_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
                            "PR_SET_SECCOMP")):
            if libc.prctl(*args) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"{what}: {os.strerror(err)}")
