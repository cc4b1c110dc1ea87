"""The seccomp filter loaded in every sandboxed child before user code runs.

Built with ``pyseccomp`` (ctypes over the system's libseccomp). The default
action is ALLOW; the rules deny, with an errno the program sees as an
``OSError``, what a test program never needs and an attacker would:

* network: ``socket`` for every family but AF_UNIX, ``connect``, ``bind``,
  ``sendto`` with an address, ``sendmsg`` (its address hides behind a pointer);
* new processes: ``fork``, ``vfork``, ``clone`` without CLONE_THREAD (threads
  still work), ``clone3`` answered with ENOSYS so glibc falls back to ``clone``,
  ``execve``/``execveat`` (the program is Python; nothing else may run);
* other processes: ``kill`` and ``tgkill`` of any pid but the child's own,
  ``tkill``, ``ptrace``, ``process_vm_readv``/``writev``, ``pidfd_open``,
  ``pidfd_send_signal``;
* the machine: ``mount``, ``umount2``, ``unshare``, ``setns``, ``reboot``,
  ``swapon``, ``swapoff``, ``init_module``, ``finit_module``, ``delete_module``,
  ``kexec_load``, ``bpf``, ``perf_event_open``, ``keyctl``, ``add_key``,
  ``request_key``, ``userfaultfd``, ``io_uring_setup``.

Syscalls of a foreign ABI (32-bit ``int 0x80``, x32) kill the process:
libseccomp's default bad-architecture action.
"""

from __future__ import annotations

import errno
import socket

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
)


def load_filter(own_pid: int) -> None:
    """Install the filter in the calling process (irreversible; inherited by threads).

    ``own_pid`` is the process's pid: ``kill``/``tgkill`` stay allowed for it
    alone, so a program can still signal itself. Raises ``OSError`` or
    ``ImportError`` when seccomp is unavailable.
    """
    import pyseccomp as sc

    deny = sc.ERRNO(errno.EPERM)
    filt = sc.SyscallFilter(defaction=sc.ALLOW)
    filt.add_rule(deny, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    filt.add_rule(deny, "sendto", sc.Arg(4, sc.NE, 0))
    filt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    filt.add_rule(deny, "kill", sc.Arg(0, sc.NE, own_pid))
    filt.add_rule(deny, "tgkill", sc.Arg(0, sc.NE, own_pid))
    for name in _DENIED_OUTRIGHT:
        filt.add_rule(deny, name)
    filt.load()
