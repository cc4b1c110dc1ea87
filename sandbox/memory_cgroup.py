"""A memory cgroup per sandbox slot: a limit that counts everything a program holds.

Details: docs/modules.md.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

FOLDER = "vigor-sandbox"
"""The folder below the caller's own cgroup that holds the slots' cgroups."""

_FILES = {
    1: {"limit": "memory.limit_in_bytes", "swap": "memory.memsw.limit_in_bytes",
        "events": "memory.oom_control", "usage": "memory.usage_in_bytes"},
    2: {"limit": "memory.max", "swap": "memory.swap.max", "events": "memory.events",
        "usage": "memory.current"},
}
"""Per cgroup version: the limit, the limit with swap, the file counting OOM kills
(``oom_kill N`` in both) and the bytes charged now."""
_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Parent:
    """Where slot cgroups can be made: a directory of a hierarchy with the memory controller."""

    version: int
    path: str


def _own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """Controller (``memory``; ``""`` for v2's unified line) -> the caller's cgroup path."""
    found: dict[str, str] = {}
    with open(proc_cgroup) as f:
        for line in f:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3:
                for controller in parts[1].split(",") if parts[1] else [""]:
                    found[controller] = parts[2]
    return found


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, file system type, super options) of each cgroup mount."""
    mounts = []
    with open(mountinfo) as f:
        for line in f:
            fields = line.split()
            if "-" not in fields:
                continue
            dash = fields.index("-")
            kind = fields[dash + 1] if len(fields) > dash + 1 else ""
            if kind in ("cgroup", "cgroup2"):
                options = set(fields[dash + 3].split(",")) if len(fields) > dash + 3 else set()
                mounts.append((_unescape(fields[3]), _unescape(fields[4]), kind, options))
    return mounts


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def _below(mount_root: str, mount_point: str, cgroup_path: str) -> str | None:
    """The folder of ``cgroup_path`` under a mount of ``mount_root`` at ``mount_point``."""
    root = mount_root.rstrip("/")
    if cgroup_path != root and not cgroup_path.startswith(root + "/"):
        return None
    return mount_point.rstrip("/") + cgroup_path[len(root):]


def find_parent(proc_cgroup: str = "/proc/self/cgroup",
                mountinfo: str = "/proc/self/mountinfo") -> tuple[Parent | None, str]:
    """Where the caller's slot cgroups would go, or (None, why there is no memory cgroup).
    Reads only; :class:`SlotCgroup` checks that it may create them."""
    try:
        own, mounts = _own_cgroups(proc_cgroup), _mounts(mountinfo)
    except OSError as exc:
        return None, f"cannot read the process's cgroups: {exc}"
    if "memory" in own:
        for root, point, kind, options in mounts:
            if kind == "cgroup" and "memory" in options:
                path = _below(root, point, own["memory"])
                if path is not None and os.path.isdir(path):
                    return Parent(1, path), ""
        return None, "the cgroup v1 memory controller is not mounted where this process sees it"
    if "" in own:
        for root, point, kind, _ in mounts:
            path = _below(root, point, own[""]) if kind == "cgroup2" else None
            if path is None or not os.path.isdir(path):
                continue
            if "memory" not in _words(os.path.join(path, "cgroup.controllers")):
                return None, f"cgroup v2 offers no memory controller at {path}"
            return Parent(2, path), ""
    return None, "no cgroup hierarchy with the memory controller"


def _words(path: str) -> set[str]:
    try:
        with open(path) as f:
            return set(f.read().split())
    except OSError:
        return set()


def _enable_memory(path: str) -> None:
    """Give the children of the v2 cgroup at ``path`` the memory controller. Raises OSError
    (EBUSY: it holds processes; EACCES: not delegated)."""
    control = os.path.join(path, "cgroup.subtree_control")
    if "memory" in _words(control):
        return
    try:
        _write(control, "+memory")
    except OSError as exc:
        why = "it holds processes" if exc.errno == errno.EBUSY else exc.strerror
        raise OSError(exc.errno, f"cannot enable the memory controller below {path} ({why})") from None


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)  # as `echo X > file` opens it
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def anonymous_bytes() -> int:
    """The calling process's resident anonymous memory (``RssAnon``): what a child forked from it
    shares and may copy on write, which its slot's limit adds to the job's memory."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) << 10
    raise ValueError("/proc/self/status has no RssAnon")


def _read_limit(path: str) -> int | None:
    with open(path) as f:
        text = f.read().strip()
    return None if text == "max" or int(text) >= 1 << 62 else int(text)  # v1's "none" is near 2**63


def read_usage(usage_fd: int) -> int:
    """Bytes charged to a cgroup now, from its usage file open at ``usage_fd``."""
    return int(os.pread(usage_fd, 64, 0).split()[0])


def join(procs_fd: int) -> None:
    """Move the calling process into the cgroup whose ``cgroup.procs`` is open at
    ``procs_fd`` ("0" names the writer in both versions). Raises OSError."""
    os.write(procs_fd, b"0")


class SlotCgroup:
    """One slot's memory cgroup, ``<parent>/vigor-sandbox/<name>``: made (or taken over from a
    dead worker of the same slot) at the worker's start, its limit set per job, removed at
    its end. Raises OSError when the host does not allow it."""

    def __init__(self, parent: Parent, name: str):
        self.version = parent.version
        self.files = _FILES[parent.version]
        folder = os.path.join(parent.path, FOLDER)
        self.path = os.path.join(folder, name)
        if self.version == 2:
            _enable_memory(parent.path)
        for attempt in range(3):  # another pool's last slot may remove the folder meanwhile
            try:
                os.makedirs(folder, exist_ok=True)
                if self.version == 2:
                    _enable_memory(folder)
                os.makedirs(self.path, exist_ok=True)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        self.procs_fd = -1
        self.limit = _read_limit(os.path.join(self.path, self.files["limit"]))
        """The limit in force (None: none), which a dead worker of the slot may have set."""
        self.usage_fd = -1
        """The slot's charge now (``read_usage``): the zygote measures with it that shared
        memory is charged (``probe.shared_memory_charges``)."""
        try:
            self.procs_fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
            self._events_fd = os.open(os.path.join(self.path, self.files["events"]), os.O_RDONLY | os.O_CLOEXEC)
            self.usage_fd = os.open(os.path.join(self.path, self.files["usage"]), os.O_RDONLY | os.O_CLOEXEC)
            self._swap = os.path.exists(os.path.join(self.path, self.files["swap"]))
            if self.version == 2 and self._swap:
                _write(os.path.join(self.path, self.files["swap"]), "0")
        except OSError:
            self.close()
            raise

    def set_limit(self, limit_bytes: int) -> None:
        """The most the slot's program may hold (rounded to pages by the kernel); swap adds
        nothing. Only written when it changes."""
        if limit_bytes == self.limit:
            return
        limit = os.path.join(self.path, self.files["limit"])
        if self.version == 2 or not self._swap:
            _write(limit, str(limit_bytes))
        else:  # v1: memory+swap is never below memory, so the order follows the direction
            swap = os.path.join(self.path, self.files["swap"])
            growing = self.limit is not None and limit_bytes > self.limit
            for path in ((swap, limit) if growing else (limit, swap)):
                _write(path, str(limit_bytes))
        self.limit = limit_bytes

    def oom_kills(self) -> int:
        """How many processes the kernel has killed for this cgroup's limit so far."""
        text = os.pread(self._events_fd, 4096, 0).decode()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def close(self) -> None:
        """Close its files and remove it (left for the next worker of the slot if a process
        is still in it)."""
        for name in ("procs_fd", "_events_fd", "usage_fd"):
            fd = getattr(self, name, -1)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        for path in (self.path, os.path.dirname(self.path)):  # the folder: if it was the last slot
            try:
                os.rmdir(path)
            except OSError:
                break
