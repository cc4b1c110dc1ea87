"""Make the Python installation visible to the sandbox uid without changing the host.

When the interpreter lives below a directory the unprivileged uid cannot
enter (a pyenv or venv under ``/root``, mode 0700), a dropped child can import
nothing that the fork server has not already imported. If the fork server runs
as root and may create a mount namespace, it fixes that for itself and every
child it forks, once, at start:

  1. ``unshare(CLONE_NEWNS)`` and mark every mount private (nothing propagates
     back to the host);
  2. bind each needed ``sys.path`` directory to a staging point;
  3. mount a small empty tmpfs over the blocking ancestor (e.g. ``/root``), which
     also hides everything else in it from the children;
  4. move the staged binds back to their original paths inside that tmpfs.

Paths stay the same, so already-imported modules and tracebacks are unchanged.
"""

from __future__ import annotations

import ctypes
import os
import sys

_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 8192, 16384, 1 << 18


def _enterable_by(path: str, uid: int) -> bool:
    """Whether ``uid`` (not root, no shared groups) may search every directory down to ``path``."""
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
    """The directories imports read from (``sys.path``), outermost only."""
    dirs = sorted({os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)})
    kept: list[str] = []
    for d in dirs:
        if not any(d.startswith(k + os.sep) for k in kept):
            kept.append(d)
    return kept


def expose_python_to(uid: int, staging_root: str) -> list[str]:
    """Remount so that ``uid`` can read the import directories; returns what was exposed.

    Does nothing (returns []) when every import directory is already reachable.
    Raises ``OSError`` when a mount step fails (no CAP_SYS_ADMIN, no namespaces).
    """
    blocked = [d for d in import_dirs() if not _enterable_by(d, uid)]
    if not blocked:
        return []
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def mount(source: str | None, target: str, fstype: str | None, flags: int,
              data: str | None = None) -> None:
        enc = (lambda s: None if s is None else s.encode())
        check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
              f"mount {target}")

    check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    ancestors: dict[str, list[str]] = {}
    for d in blocked:
        ancestor = _blocking_ancestor(d, uid)
        if ancestor is not None:
            ancestors.setdefault(ancestor, []).append(d)
    exposed = []
    for index, (ancestor, dirs) in enumerate(sorted(ancestors.items())):
        staged = []
        for j, d in enumerate(dirs):
            stage = os.path.join(staging_root, f"stage-{index}-{j}")
            os.mkdir(stage, 0o700)
            mount(d, stage, None, _MS_BIND | _MS_REC)
            staged.append((stage, d))
        mount("tmpfs", ancestor, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
        for stage, d in staged:
            os.makedirs(d, mode=0o755, exist_ok=True)
            mount(stage, d, None, _MS_MOVE)
            os.rmdir(stage)
            exposed.append(d)
    return exposed


def expose_python_in_own_namespace(uid: int) -> list[str]:
    """:func:`expose_python_to` with a staging dir that is removed afterwards."""
    import tempfile

    staging = tempfile.mkdtemp(prefix="vigor-stage-",
                               dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        return expose_python_to(uid, staging)
    finally:
        os.rmdir(staging)
