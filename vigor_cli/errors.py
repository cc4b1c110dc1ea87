"""Errors a user can fix: printed as one line, exit code 2, nothing written is lost.

:func:`user_message` is the one rule that decides, for any exception that reaches the
command line, whether it is the user's to fix (one line, exit 2) or a bug (a traceback,
exit 1). The entry point (:func:`vigor_cli.cli.main`) applies it to every command.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from types import TracebackType
from typing import Any, Optional


class UserError(Exception):
    """Bad input (key, file, record, flag). The message names it and says what to do."""


EXIT_OK = 0
EXIT_BUG = 1
"""An internal error: Python prints the traceback (please report it)."""
EXIT_USER = 2
"""A user error: one line on stderr naming the flag, key, file or record."""
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


def user_message(exc: BaseException) -> Optional[str]:
    """The one-line message for an error the user can fix, or None for a bug (a ConfigError
    is a UserError: this module imports nothing of vigor_cli's)."""
    if isinstance(exc, UserError):
        return _one_line(str(exc))
    if _is_usage_error(exc):
        return _usage_message(exc)
    if isinstance(exc, UnicodeDecodeError):
        path = _file_in_traceback(exc.__traceback__)
        where = f"{path}: " if path else ""
        # exc.start counts from the chunk being decoded, not the file's start: not shown
        return f"{where}not UTF-8 text (it holds byte 0x{exc.object[exc.start]:02x}); give a text file"
    if isinstance(exc, OSError) and (exc.filename is not None or exc.errno == errno.ENOSPC):
        return os_error_message(exc)
    return None


def os_error_message(exc: OSError, path: Any = None) -> str:
    """'PATH: reason' for a failed read or write; for a full disk, the disk and its free space."""
    path = path if path is not None else exc.filename
    reason = exc.strerror or type(exc).__name__
    if exc.errno == errno.ENOSPC:
        return f"{path}: no space left on the disk{_disk_note(path)}; free some space and run again"
    if exc.errno == errno.ENOTDIR or (exc.errno == errno.EEXIST and path is not None
                                      and Path(path).is_file()):
        blocker = file_in_the_way(Path(path)) if path is not None else None
        if blocker is not None:
            return f"{path}: {blocker} is a file, not a directory"
    if exc.filename2 is not None:
        return f"{path} -> {exc.filename2}: {reason}"
    return f"{path}: {reason}"


def file_in_the_way(path: Path) -> Optional[Path]:
    """The existing regular file at ``path`` or above it that stops ``path`` being a directory."""
    for p in (path, *path.parents):
        if p.is_file():
            return p
        if p.exists():
            return None
    return None


def _disk_note(path: Any) -> str:
    if path is None:
        return ""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        free = shutil.disk_usage(p).free
    except OSError:
        return ""
    return f" holding {p} ({free / 2**20:.0f} MiB free)"


def _is_usage_error(exc: BaseException) -> bool:
    """Click's usage errors (an unknown flag or command, a bad or missing value). Typer
    vendors its own click, so the class is matched by shape, not by identity."""
    return hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)


def _usage_message(exc: Any) -> str:
    """'what was wrong (see 'vigor CMD --help')'; empty when click already printed the help
    (a command group called with nothing after it)."""
    if not exc.format_message().strip():
        return ""
    ctx = getattr(exc, "ctx", None)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return _one_line(exc.format_message()) + where


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _file_in_traceback(tb: Optional[TracebackType]) -> Optional[str]:
    """The file a failed decode was reading: the innermost frame that holds an open file or
    a path to an existing regular file (decoding errors do not carry the file's name). A
    file that ships with vigor or Python (a bundled config an outer frame holds) is never
    the one: a decode of the user's data failed, and that file would be named instead."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            name = getattr(value, "name", None) if hasattr(value, "read") else value
            if isinstance(name, (str, os.PathLike)):
                try:
                    if Path(name).is_file() and not _shipped(Path(name)):
                        return str(name)
                except (OSError, ValueError):
                    continue
    return None


def _shipped(path: Path) -> bool:
    """A file of vigor's package (its bundled configs, data and model) or of Python's. The
    configs are found as vigor_cli/package_data.py finds them (this module imports nothing
    of the package's)."""
    import importlib.util
    import sys

    roots = {Path(__file__).resolve().parent, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    spec = importlib.util.find_spec("vigor_cli.configs")
    if spec is not None:
        roots.update(Path(p).resolve() for p in spec.submodule_search_locations or [])
    resolved = path.resolve()
    return any(resolved.is_relative_to(root) for root in roots)
