"""Namespaces for a fork server, set up once at its start and inherited by every child.

Details: docs/modules.md.
"""

from __future__ import annotations

import ctypes
import os
import sys

_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 4096, 8192, 16384, 1 << 18
_MNT_DETACH = 2

PRIVATE_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
PRIVATE_TMP_SIZE = "512m"
"""Cap of each private tmpfs: what all of one worker's programs may leave in it at once."""
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
DEV_NODES = ("null", "zero", "full", "random", "urandom")
"""Device nodes of the private /dev (the only ones the Landlock allow-list opens anyway)."""
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}
SYSTEM_V_FIXED = {
    "shm_rmid_forced": "1",      # a detached segment is freed at once: it belongs to no process
    "shmmni": "64",
    "msgmni": "16",              # 16 queues x 64 KiB: at most 1 MiB queued
    "msgmnb": "65536",
    "msgmax": "8192",
    "sem": "250 4096 32 128",    # at most 4096 semaphores (a few hundred KiB of kernel memory)
}
"""System V limits of a worker's IPC namespace (``/proc/sys/kernel``): none of this memory is
counted by RLIMIT_AS, so the namespace allows little of it; shared memory is sized per job by
:func:`limit_system_v`."""

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _enterable_by(path: str, uid: int) -> bool:
    """Whether ``uid`` (no shared groups) may search every directory down to ``path``."""
    parts = os.path.abspath(path).split(os.sep)
    for depth in range(1, len(parts) + 1):
        directory = os.sep.join(parts[:depth]) or os.sep
        try:
            info = os.stat(directory)
        except OSError:
            return False
        bit = 0o100 if info.st_uid == uid else 0o001
        if not info.st_mode & bit:
            return False
    return True


def _blocking_ancestor(path: str, uid: int) -> str | None:
    parts = os.path.abspath(path).split(os.sep)
    for depth in range(2, len(parts) + 1):
        directory = os.sep.join(parts[:depth])
        if not _enterable_by(directory, uid):
            return directory
    return None


def import_dirs() -> list[str]:
    """The directories imports read from (``sys.path`` and the folders of imported
    top-level packages), outermost only."""
    found = {p for p in sys.path if p and os.path.isdir(p)}
    # An editable install maps its packages with an import hook, not a sys.path entry:
    # add the folder holding each imported top-level package or module.
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if "." in name or not path:
            continue
        folder = os.path.dirname(path)
        found.add(os.path.dirname(folder) if os.path.basename(path) == "__init__.py" else folder)
    dirs = sorted({os.path.realpath(p) for p in found if os.path.isdir(p)})
    kept: list[str] = []
    for d in dirs:
        if not any(d.startswith(k + os.sep) for k in kept):
            kept.append(d)
    return kept


def _expose_import_dirs(uid: int, staging_root: str) -> list[str]:
    blocked = [d for d in import_dirs() if not _enterable_by(d, uid)]
    by_ancestor: dict[str, list[str]] = {}
    for d in blocked:
        ancestor = _blocking_ancestor(d, uid)
        if ancestor is not None:
            by_ancestor.setdefault(ancestor, []).append(d)
    exposed = []
    for index, (ancestor, dirs) in enumerate(sorted(by_ancestor.items())):
        staged = []
        for j, d in enumerate(dirs):
            stage = os.path.join(staging_root, f"stage-{index}-{j}")
            os.mkdir(stage, 0o700)
            _mount(d, stage, None, _MS_BIND | _MS_REC)
            staged.append((stage, d))
        _mount("tmpfs", ancestor, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
        for stage, d in staged:
            os.makedirs(d, mode=0o755, exist_ok=True)
            _mount(stage, d, None, _MS_MOVE)
            os.rmdir(stage)
            exposed.append(d)
    return exposed


def _cover_with_tmpfs(path: str, keep: list[str]) -> None:
    """Mount a fresh tmpfs on ``path``, then bind the folders in ``keep`` (below ``path``:
    a checkout or virtualenv in /tmp that the harness imports from) back at their paths.

    The folders are held open by descriptor across the mount and bound from
    /proc/self/fd, so no staging folder outside ``path`` is needed.
    """
    fds = [os.open(d, os.O_PATH | os.O_DIRECTORY) for d in keep]
    try:
        _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={PRIVATE_TMP_SIZE}")
        for folder, fd in zip(keep, fds):
            os.makedirs(folder, mode=0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", folder, None, _MS_BIND | _MS_REC)
    finally:
        for fd in fds:
            os.close(fd)


def _private_dev() -> None:
    """Mount a small tmpfs over /dev holding :data:`DEV_NODES` (bound from the host's, held
    open across the mount) and :data:`DEV_LINKS`; /dev/shm is added by :func:`link_dev_shm`."""
    fds = {}
    for name in DEV_NODES:
        try:
            fds[name] = os.open(f"/dev/{name}", os.O_PATH)
        except OSError:
            pass
    try:
        _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64")
        for name, fd in fds.items():
            os.close(os.open(f"/dev/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
            _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, _MS_BIND)
        for name, target in DEV_LINKS.items():
            os.symlink(target, f"/dev/{name}")
    finally:
        for fd in fds.values():
            os.close(fd)


def link_dev_shm(target: str) -> None:
    """Point the private /dev's ``shm`` at ``target`` (a folder of each job's tmpfs)."""
    os.symlink(target, "/dev/shm")


def limit_system_v(memory_mb: int, fixed: bool = False) -> None:
    """Size the caller's IPC namespace to a job of ``memory_mb``: all shared memory segments
    together at most that, freed as soon as they are detached (``fixed``: also write the
    :data:`SYSTEM_V_FIXED` limits). Call as root in the worker's own IPC namespace, with a
    writable procfs. Raises OSError."""
    values = dict(SYSTEM_V_FIXED) if fixed else {}
    values.update({"shmmax": str(memory_mb << 20),
                   "shmall": str(max(1, (memory_mb << 20) // _PAGE_SIZE))})
    for name, value in values.items():  # raw descriptors: this runs once per job
        fd = os.open(f"/proc/sys/kernel/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)


def enter_job_ipc_namespace(memory_mb: int) -> None:
    """Give the calling process (one job's child, still root) an IPC namespace of its own,
    sized to ``memory_mb``: no System V object, id or queue of an earlier job is there, and
    all of its own go with it. Raises OSError."""
    _check(_libc.unshare(_CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
    limit_system_v(memory_mb, fixed=True)


def isolate_fork_server(uid: int) -> dict:
    """Enter new network, IPC and mount namespaces (see the module doc). Never raises: the
    returned report says what worked, with the reasons for what did not."""
    report: dict = {"network_namespace": False, "ipc_namespace": False, "mount_namespace": False,
                    "private_tmp": [],
                    "exposed_import_dirs": [], "namespace_detail": []}
    try:
        _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        report["network_namespace"] = True
    except OSError as exc:
        report["namespace_detail"].append(str(exc))
    try:  # System V shared memory, semaphores and queues die with the worker
        _check(_libc.unshare(_CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
        report["ipc_namespace"] = True
    except OSError as exc:
        report["namespace_detail"].append(str(exc))
    try:
        _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        report["mount_namespace"] = True
    except OSError as exc:
        report["namespace_detail"].append(str(exc))
        return report
    imports = import_dirs()
    try:
        if any(d.startswith("/dev" + os.sep) for d in imports):
            raise OSError("the harness imports from below /dev: /dev is kept")
        _private_dev()
        report["private_dev"] = True
    except OSError as exc:
        report["private_dev"] = False
        report["namespace_detail"].append(f"no private /dev (jobs get no /dev/shm): {exc}")
    for path in PRIVATE_TMP_DIRS:
        if path == "/dev/shm" and report["private_dev"]:
            report["private_tmp"].append(path)  # a link into each job's own tmpfs
            continue
        if os.path.isdir(path):
            try:
                keep = [d for d in imports if d.startswith(os.path.realpath(path) + os.sep)]
                _cover_with_tmpfs(path, keep)
                report["private_tmp"].append(path)
            except OSError as exc:
                report["namespace_detail"].append(str(exc))
    staging = None
    try:
        import tempfile

        staging = tempfile.mkdtemp(prefix="vigor-stage-")
        report["exposed_import_dirs"] = _expose_import_dirs(uid, staging)
    except OSError as exc:
        report["namespace_detail"].append(f"could not expose the Python installation: {exc}")
    finally:
        if staging is not None:
            try:
                os.rmdir(staging)
            except OSError:
                pass
    return report


# --------------------------------------------------------------------------- per worker, per job
def enter_pid_namespace() -> None:
    """Make the next child of this process the init (pid 1) of a new PID namespace: the
    zygote, whose children then see no process outside it. Raises OSError."""
    _check(_libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")


def mount_private_proc() -> None:
    """Mount, over /proc, a procfs of the caller's PID namespace that shows a process only to
    its own uid (hidepid=invisible). Call from the namespace's init. Raises OSError."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "hidepid=2")  # 2 = invisible (kernels before 5.8 know only the number)


def mount_job_tmpfs(path: str, uid: int, size_mb: int, inodes: int) -> None:
    """A fresh tmpfs at ``path`` owned by ``uid``, capped in bytes and entries: one job's
    directory (detached with :func:`unmount` after the job). Raises OSError."""
    _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
           f"size={size_mb}m,nr_inodes={inodes},mode=0700,uid={uid},gid={uid}")


def reset_attributes(path: str, uid: int | None, mode: int = 0o700) -> None:
    """Give a reused folder back its plain state: no extended attribute (user ones, a default
    or access ACL), ``mode``, owned by ``uid`` (None: leave the owner). Raises OSError."""
    for name in os.listxattr(path, follow_symlinks=False):
        try:
            os.removexattr(path, name, follow_symlinks=False)
        except OSError:
            if name.startswith(("user.", "system.posix_acl")):
                raise
    if uid is not None:
        os.chown(path, uid, uid)
    os.chmod(path, mode)


def unmount(path: str) -> None:
    """Detach the mount at ``path``: whatever a program left there (a directory chain
    thousands deep, a full disk) is freed at once, without walking it. Raises OSError."""
    _check(_libc.umount2(path.encode(), _MNT_DETACH), f"umount {path}")


def remove_tree(path: str, keep_top: bool = False) -> None:
    """Remove ``path`` and everything below it (``keep_top``: only what is below it) without
    recursion, in Python or in the kernel's path length: descend by directory descriptor,
    climb back through "..". Never follows symlinks. Only for trees no process is changing
    (the program that made it is dead)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        os.unlink(path)
        return
    names: list[str] = []
    try:
        while True:
            descended = False
            with os.scandir(fd) as entries:
                listing = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            for name, is_dir in listing:
                if is_dir:
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                    os.close(fd)
                    fd, descended = child, True
                    names.append(name)
                    break
                os.unlink(name, dir_fd=fd)
            if descended:
                continue
            if not names:
                break
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    if not keep_top:
        os.rmdir(path)


_libc_ipc = ctypes.CDLL(None, use_errno=True)
_IPC_RMID = 0


_SHM_INFO, _MSG_INFO, _SEM_INFO = 14, 12, 19


def _system_v_objects_exist() -> bool:
    """One syscall per kind (counts of existing objects), so the common case costs ~10 us."""
    buffer = (ctypes.c_int * 32)()
    _libc_ipc.shmctl(0, _SHM_INFO, buffer)
    if buffer[0]:  # shm_info.used_ids
        return True
    buffer = (ctypes.c_int * 32)()
    _libc_ipc.msgctl(0, _MSG_INFO, buffer)
    if buffer[0]:  # msginfo.msgpool: queues in use
        return True
    buffer = (ctypes.c_int * 32)()
    _libc_ipc.semctl(0, 0, _SEM_INFO, buffer)
    return bool(buffer[7])  # seminfo.semusz: sets in use


def remove_system_v_objects() -> int:
    """Remove every System V shared-memory segment, message queue and semaphore set of the
    caller's IPC namespace (the worker's own): what a finished job made dies with it.
    Returns how many were removed."""
    if not _system_v_objects_exist():
        return 0
    removed = 0
    for table, remove in (("shm", lambda i: _libc_ipc.shmctl(i, _IPC_RMID, None)),
                          ("msg", lambda i: _libc_ipc.msgctl(i, _IPC_RMID, None)),
                          ("sem", lambda i: _libc_ipc.semctl(i, 0, _IPC_RMID))):
        try:
            with open(f"/proc/sysvipc/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and remove(int(fields[1])) == 0:
                removed += 1
    return removed
