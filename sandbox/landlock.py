"""Landlock, through three raw system calls (no dependency): the file-system allow-list every
sandboxed child runs under.

Details: docs/modules.md.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
import sysconfig

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
              5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2

READ = READ_FILE | READ_DIR | EXECUTE
"""Read and execute, on a directory and everything below it."""
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ_WRITE = READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_FIFO | \
    MAKE_SYM | REFER | TRUNCATE
"""The job directory: everything but device nodes (and sockets: bind is denied anyway)."""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

PRELOADED_PACKAGES = ("numpy", "sortedcontainers")
"""Third-party packages programs may import (the fork server preloads them); their folders,
and a wheel's ``<name>.libs`` beside them, are readable. Nothing else of site-packages is."""

SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/usr/share/zoneinfo", "/dev/urandom",
                "/dev/random")
DEVICES_RW = ("/dev/null", "/dev/zero", "/dev/full")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def abi_version() -> int:
    """The kernel's Landlock ABI (0: none, or disabled at boot)."""
    version = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))


def _handled_fs(abi: int) -> int:
    return _FS_BY_ABI.get(abi, (1 << 16) - 1)


class Ruleset:
    """An open Landlock ruleset (a file descriptor); enforce it with :func:`restrict_self`."""

    def __init__(self, abi: int):
        self.abi = abi
        attr = _RulesetAttr(_handled_fs(abi), 0, 0)
        size = 8
        if abi >= 4:
            attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
            size = 16
        if abi >= 6:
            attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            size = 24
        fd = _libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
        if fd < 0:
            raise _error("landlock_create_ruleset")
        self.fd = int(fd)
        self.rules: list[tuple[str, int]] = []

    def allow(self, path: str, access: int) -> bool:
        """Allow ``access`` on ``path`` (and below it, for a directory). False if it does not
        exist; raises OSError if the kernel refuses the rule."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                access &= FILE_RIGHTS
            access &= _handled_fs(self.abi)
            rule = _PathBeneathAttr(access, fd)
            if _libc.syscall(_SYS_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH),
                             ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                raise _error(f"landlock_add_rule {path}")
        finally:
            os.close(fd)
        self.rules.append((path, access))
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def restrict_self(ruleset_fd: int) -> None:
    """Enforce the ruleset on the calling thread (and everything it starts from now on)."""
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _error("PR_SET_NO_NEW_PRIVS")
    if _libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)) != 0:
        raise _error("landlock_restrict_self")


# --------------------------------------------------------------------------- the allow-list
def _stdlib_dirs() -> list[str]:
    found = []
    for path in (os.path.dirname(os.__file__), sysconfig.get_path("stdlib"),
                 sysconfig.get_path("platstdlib")):
        if path and os.path.isdir(path):
            real = os.path.realpath(path)
            if real not in found:
                found.append(real)
    return found


def _is_packages_dir(name: str) -> bool:
    return name in ("site-packages", "dist-packages")


def _mapped_libraries() -> list[str]:
    """Shared objects this process has mapped (the interpreter, libpython, libc, numpy's
    BLAS, ...), except any below a site-packages folder that is not a preloaded package."""
    found = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    path = fields[5].strip()
                    if path.endswith(" (deleted)"):
                        continue
                    found.add(path)
    except OSError:
        pass
    return sorted(found)


def _library_dirs() -> list[str]:
    """System library folders (for libraries an extension module loads later, e.g. sqlite3's)."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    candidates = ["/lib64", "/usr/lib64"]
    if multiarch:
        candidates += [f"/lib/{multiarch}", f"/usr/lib/{multiarch}"]
    dirs = []
    for path in candidates:
        if os.path.isdir(path):
            real = os.path.realpath(path)
            if real not in dirs and not _is_packages_dir(os.path.basename(real)):
                dirs.append(real)
    return dirs


def allow_list(job_root: str, proc: str | None = "/proc",
               forbidden: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """(path, access) pairs for a child whose job directories live in ``job_root``.

    ``forbidden``: folders that must stay unreadable even if a rule would cover them (the
    project's own checkout); a rule that would is dropped.
    """
    rules: list[tuple[str, int]] = []
    packages_dirs = set()
    for stdlib in _stdlib_dirs():
        rules.append((stdlib, READ_DIR))  # listing, for the import system's directory caches
        for entry in sorted(os.listdir(stdlib)):
            if _is_packages_dir(entry):
                packages_dirs.add(os.path.join(stdlib, entry))
                continue
            rules.append((os.path.join(stdlib, entry), READ))
    for name in PRELOADED_PACKAGES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if not path:
            continue
        folder = os.path.dirname(os.path.realpath(path))
        rules.append((folder, READ))
        libs = folder + ".libs"
        if os.path.isdir(libs):
            rules.append((libs, READ))
    for path in _mapped_libraries():
        rules.append((path, READ_FILE | EXECUTE))
    for folder in _library_dirs():
        rules.append((folder, READ))
    executable = os.path.realpath(sys.executable)
    if os.path.isfile(executable):
        rules.append((executable, READ_FILE | EXECUTE))
    for path in SYSTEM_FILES:
        rules.append((path, READ))
    for path in DEVICES_RW:
        rules.append((path, READ_FILE | WRITE_FILE))
    if proc:
        rules.append((proc, READ_FILE | READ_DIR))
    rules.append((job_root, READ_WRITE))

    allowed_packages = _allowed_package_dirs()
    blocked = tuple(os.path.realpath(f) for f in forbidden) + tuple(packages_dirs)
    kept = []
    for path, access in rules:
        real = os.path.realpath(path)
        if any(real == p or real.startswith(p + os.sep) for p in allowed_packages):
            kept.append((path, access))
        elif any(real == f or real.startswith(f + os.sep) for f in blocked):
            continue  # inside site-packages or the project: never readable
        elif any(f.startswith(real.rstrip(os.sep) + os.sep) for f in blocked):
            if access & READ_DIR:  # an ancestor of a forbidden folder: listing only
                kept.append((path, READ_DIR))
        else:
            kept.append((path, access))
    return kept


def _allowed_package_dirs() -> list[str]:
    dirs = []
    for name in PRELOADED_PACKAGES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            folder = os.path.dirname(os.path.realpath(path))
            dirs += [folder, folder + ".libs"]
    return dirs


def build_ruleset(rules: list[tuple[str, int]]) -> Ruleset:
    """A ruleset holding ``rules`` (paths that do not exist are skipped)."""
    abi = abi_version()
    if abi < 1:
        raise OSError("Landlock is not supported by this kernel (or disabled at boot)")
    ruleset = Ruleset(abi)
    try:
        for path, access in rules:
            ruleset.allow(path, access)
    except BaseException:
        ruleset.close()
        raise
    return ruleset
