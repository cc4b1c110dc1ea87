"""Crash-safe writes of run files, and the one line for a full disk.

A file is written under a temporary name, synced and renamed over its place, so a reader
(or a resume after a kill) sees the old file or the new one, never half of one. A write
that fills the disk becomes one :class:`DiskFullError` line (exit 2) naming the path, the
file system's mount point and its free space.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

from vigor_cli.errors import UserError

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(UserError):
    """No space left while writing a run file (exit 2; earlier checkpoints are intact)."""


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


RESUME_HINT = "continue with --resume (earlier checkpoints are intact)"
"""What to do after a full disk stopped training."""


def disk_full(path: Path, then: str = RESUME_HINT) -> DiskFullError:
    """The one line for a full disk: the path written, the file system's mount point, free
    space, and ``then``: what to do once space is freed."""
    mount = _existing(Path(path).absolute())
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        free = f"{shutil.disk_usage(mount).free / 2**20:.0f} MiB free"
    except OSError:
        free = "free space unknown"
    return DiskFullError(f"{path}: no space left on the disk mounted at {mount} ({free}); free some space and {then}")


@contextlib.contextmanager
def disk_errors(path: Path) -> Iterator[None]:
    """Turn ENOSPC/EDQUOT raised while writing ``path`` into one :class:`DiskFullError` line."""
    try:
        yield
    except OSError as e:
        if e.errno in _NO_SPACE:
            raise disk_full(path) from None
        raise


def is_disk_full(error: BaseException, path: Path) -> bool:
    """Whether ``error`` (raised while writing under ``path``) came from a full disk.

    Libraries wrap the OSError (torch: ``RuntimeError ... unexpected pos`` with the ENOSPC
    as its context), so the chain is searched, and a disk with under 1 MiB free counts too.
    """
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _NO_SPACE:
            return True
        if "No space left on device" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        return shutil.disk_usage(_existing(Path(path))).free < 2**20
    except OSError:
        return False


def fsync_dir(path: Path) -> None:
    """Make the renames inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path``, sync it and rename it over ``path``.
    However it fails (a full disk, an interrupt), no temporary file is left and ``path`` is
    as it was; the error is raised as it came."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str | bytes) -> None:
    """:func:`replace_atomic` of ``text`` (UTF-8), a full disk as one line."""
    data = text.encode("utf-8", "backslashreplace") if isinstance(text, str) else text
    with disk_errors(path):
        replace_atomic(path, data)


def json_bytes(obj: Any, indent: int | None = 1) -> bytes:
    """``obj`` as UTF-8 JSON text that any text can reach: a lone surrogate (which UTF-8
    cannot encode, and which a program's output can carry) becomes its JSON escape
    (``\\ud800``), so the file is valid JSON and reads back to the same strings."""
    return json.dumps(obj, indent=indent, ensure_ascii=False).encode("utf-8", "backslashreplace")


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json_bytes(obj))
