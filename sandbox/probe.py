"""The zygote's check, before any job, that each confinement layer bites.

:func:`probe` forks a throw-away child, confines it exactly as a job's child is confined
(``child.confine``) and has it test each layer from the inside: the uid switch, the PID
namespace, Landlock (a read of the project and a write outside the job refused, the
standard library still readable), seccomp (a socket and a fork refused) and the slot's memory
cgroup (the child is in it). :func:`job_ipc_fails` checks that a child can have an IPC
namespace of its own, :func:`shared_memory_charges` that the slot's cgroup is charged for
System V and tmpfs memory. What a layer's probe does not confirm is reported missing, and
the pool's isolation level says so.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import socket
from typing import Callable

from vigor_cli.sandbox.child import confine
from vigor_cli.sandbox.limits import Limits


def probe(settings: dict, workdir: str) -> dict:
    """Fork a throw-away child, confine it as a job's child is confined, and check that each
    layer bites. Runs in the zygote."""
    report: dict = {"uid_switch": False, "seccomp": False, "landlock": False,
                    "pid_namespace": False, "memory_cgroup": False, "detail": []}
    read_fd, write_fd = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    pid = os.fork()
    if pid == 0:
        try:
            _probe_child(settings, workdir, null, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    os.close(null)
    try:
        found = json.loads(_collect(read_fd, pid))
    except ValueError:
        found = {"detail": ["probe child crashed"]}
    report["detail"] += found.pop("detail", [])
    report.update(found)
    return report


def _probe_child(settings: dict, workdir: str, null: int, write_fd: int) -> None:
    """The probe's child: confine, test each layer, write what it found (as JSON) to fd 3."""
    found: dict = {"detail": []}
    pipe_inode = os.fstat(write_fd).st_ino
    fds = {"stdin": null, "stdout": null, "stderr": null, "status": write_fd}
    limits = {"cpu_limit_s": 5, "file_size_mb": 1, "open_files": 64, "stack_mb": 64,
              "memory_mb": 256}
    try:
        confine(fds, workdir, limits, settings)
    except BaseException as exc:
        found["detail"].append(f"confinement failed: {type(exc).__name__}: {exc}")
        for fd in (3, write_fd):
            try:
                if os.fstat(fd).st_ino == pipe_inode:
                    os.write(fd, json.dumps(found).encode())
                    break
            except OSError:
                pass
        return
    if settings["drop_uid"]:
        found["uid_switch"] = os.getuid() == settings["uid"] == os.geteuid()
    found["stdlib_readable"] = os.access(os.path.dirname(os.__file__), os.R_OK | os.X_OK)
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        found["pid_namespace"] = os.getppid() == 1 and pids == [str(os.getpid())]
    except OSError as exc:
        found["detail"].append(f"cannot list /proc: {exc}")
    if settings.get("landlock_fd") is not None:
        _probe_landlock(settings, workdir, found)
    if settings.get("memory_cgroup"):
        _probe_memory_cgroup(settings, found)
    if settings["seccomp"]:
        _probe_seccomp(found)
    os.write(3, json.dumps(found).encode())


def _probe_landlock(settings: dict, workdir: str, found: dict) -> None:
    """Landlock must deny reading the project and writing outside the job, and allow the rest."""
    denied = 0
    for path, mode in ((settings["landlock_probe"], "rb"), (settings["landlock_probe_write"], "wb")):
        try:
            open(path, mode).close()
            if mode == "wb":
                os.unlink(path)
        except PermissionError:
            denied += 1
        except OSError:
            pass
    try:
        open(os.__file__, "rb").close()
        open(os.path.join(workdir, "probe"), "wb").close()
        readable = True
    except OSError as exc:
        readable = False
        found["detail"].append(f"Landlock hides what programs need: {exc}")
    found["landlock"] = denied == 2 and readable
    if denied != 2:
        found["detail"].append("Landlock loaded but did not deny a read or a write")


def _probe_memory_cgroup(settings: dict, found: dict) -> None:
    """The child must be in its slot's memory cgroup (born there, as the zygote joined it)."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        found["detail"].append(f"cannot read /proc/self/cgroup: {exc}")
        return
    suffix = "/" + settings["cgroup_name"]
    version = settings["cgroup_version"]
    found["memory_cgroup"] = any(
        line.endswith(suffix) and (line.startswith("0::") if version == 2
                                   else "memory" in line.split(":")[1].split(","))
        for line in lines)
    if not found["memory_cgroup"]:
        found["detail"].append(f"the child is not in its memory cgroup ({'; '.join(lines)})")


def _probe_seccomp(found: dict) -> None:
    """The seccomp filter must deny a socket and a fork."""
    denied = 0
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    except PermissionError:
        denied += 1
    try:
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
    except PermissionError:
        denied += 1
    found["seccomp"] = denied == 2
    if denied != 2:
        found["detail"].append("seccomp filter loaded but did not deny socket/fork")


def job_ipc_fails() -> str | None:
    """Whether a child can enter an IPC namespace of its own and size it: None if it can, else
    why not. Runs in the zygote, after its procfs is mounted."""
    from vigor_cli.sandbox.namespace import enter_job_ipc_namespace

    return fork_fails(lambda: enter_job_ipc_namespace(Limits().memory_mb))


SHARED_PROBE_BYTES = 8 << 20
"""What :func:`shared_memory_charges` holds of each kind of shared memory."""
SHARED_COUNTED_SHARE = 0.75
"""The share of it the cgroup must be charged for (its per-CPU charge batches blur a few
pages either way) before shared memory counts as counted."""


def shared_memory_charges(usage_fd: int, size: int = SHARED_PROBE_BYTES) -> tuple[int, int] | str:
    """(System V bytes, tmpfs bytes) the cgroup whose usage file is open at ``usage_fd`` was
    charged while a forked child (in the caller's cgroup) held ``size`` of each: a System V
    segment it attached and touched, then a memfd (a tmpfs file) it filled through a mapping,
    so no buffer of the caller's own grows meanwhile. A string says why it could not
    measure. Runs in the zygote, which is in the slot's cgroup."""
    from vigor_cli.sandbox.memory_cgroup import read_usage

    def measure() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        before = read_usage(usage_fd)
        shmid = libc.shmget(0, ctypes.c_size_t(size), 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
        if shmid < 0:
            raise OSError(ctypes.get_errno(), "shmget")
        at = libc.shmat(shmid, None, 0)
        libc.shmctl(shmid, 0, None)  # IPC_RMID: gone once this child is
        if at in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "shmat")
        ctypes.memset(at, 1, size)
        middle = read_usage(usage_fd)
        fd = os.memfd_create("vigor-probe")
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as view:
            for offset in range(0, size, mmap.PAGESIZE):
                view[offset] = 1
            after = read_usage(usage_fd)
        raise _Measured(f"{middle - before} {after - middle}")

    why = fork_fails(measure)
    if why and why.startswith("_Measured: "):
        sysv, tmpfs = why.split(": ", 1)[1].split()
        return int(sysv), int(tmpfs)
    return why or "the measuring child reported nothing"


class _Measured(Exception):
    """How the measuring child reports its figures through :func:`fork_fails`."""


def fork_fails(action: Callable[[], None]) -> str | None:
    """Fork a child that runs ``action`` and exits: None if it did not raise, else why."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write_fd, f"{type(exc).__name__}: {exc}".encode()[:500])
        os._exit(0)
    os.close(write_fd)
    return _collect(read_fd, pid).decode("utf-8", "replace") or None


def _collect(read_fd: int, pid: int) -> bytes:
    """What a forked child wrote to the pipe until it closed it; then the child is reaped."""
    data = b""
    while chunk := os.read(read_fd, 4096):
        data += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    return data
