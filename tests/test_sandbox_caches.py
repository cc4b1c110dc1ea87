"""The sandbox and the host's caches and memory: what a job cannot touch or hold uncounted.

1. No host-cache effects: ``posix_fadvise(POSIX_FADV_DONTNEED)`` (which drops a file's clean
   pages from the page cache for every process, for any file the job can read) and
   ``madvise`` ``MADV_COLD``/``MADV_PAGEOUT`` are refused with EPERM; the other advice still
   works for honest programs. The page cache is measured from outside with ``mincore``.
2. System V and tmpfs memory beyond the job's memory limit fails as a ``memory`` outcome
   under this machine's cgroup v1 (as under v2), counted from what the slot held before the
   job, not from the server's size.

Real programs in a real pool; the isolation this machine gives is asserted, never skipped.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import platform
import shutil
import textwrap
import threading

import pytest

from vigor_cli.sandbox import Job, Limits, SandboxPool

_FADVISE64 = {"x86_64": 221, "aarch64": 223}.get(platform.machine(), 221)
STDLIB_FILE = os.path.join(os.path.dirname(os.__file__), "pydoc_data", "topics.py")
"""A large standard-library file every job may read (its pages are the host's cache)."""

HOSTILE_CACHE = """
    import ctypes, json, mmap, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    path = input().strip()
    found = {}
    fd = os.open(path, os.O_RDONLY)
    while os.read(fd, 1 << 20):
        pass
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        found["DONTNEED"] = "allowed"
    except PermissionError:
        found["DONTNEED"] = "refused"
    for name, advice in (("DONTNEED, bit 32 set", (1 << 32) | 4), ("DONTNEED, one range", 4)):
        rc = libc.syscall(ctypes.c_long(NR), ctypes.c_long(fd), ctypes.c_long(4096),
                          ctypes.c_long(1 << 16), ctypes.c_long(advice))
        found[name] = "refused" if rc == -1 and ctypes.get_errno() == 1 else f"allowed ({rc})"
    view = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    for name, advice in (("MADV_COLD", 20), ("MADV_PAGEOUT", 21)):
        try:
            view.madvise(advice)
            found[name] = "allowed"
        except PermissionError:
            found[name] = "refused"
    print(json.dumps(found))
    """.replace("NR", str(_FADVISE64))

HONEST_CACHE = """
    import json, mmap, os
    path = input().strip()
    found = {}
    with open("own.bin", "wb") as f:
        f.write(os.urandom(1 << 18))
    for label, name in (("stdlib", path), ("own", "own.bin")):
        fd = os.open(name, os.O_RDONLY)
        for advice in ("NORMAL", "SEQUENTIAL", "RANDOM", "WILLNEED", "NOREUSE"):
            os.posix_fadvise(fd, 0, 0, getattr(os, "POSIX_FADV_" + advice))
            found[f"{label} {advice}"] = "ok"
        view = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        for advice in ("MADV_NORMAL", "MADV_SEQUENTIAL", "MADV_WILLNEED", "MADV_DONTNEED"):
            view.madvise(getattr(mmap, advice))
            found[f"{label} {advice}"] = "ok"
        found[f"{label} bytes"] = len(view[:])
        view.close()
        os.close(fd)
    buffer = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buffer.write(b"x" * (1 << 20))
    buffer.madvise(mmap.MADV_DONTNEED)  # anonymous memory: honest programs free with it
    found["anonymous MADV_DONTNEED"] = buffer[:1].hex()  # private: its pages read as zeros again
    print(json.dumps(found))
    """

LIMITS = Limits(timeout_s=10.0, memory_mb=64)


def resident_pages(path: str) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages in all): ``mincore`` on a mapping of it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY)
    try:
        at = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if at in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            if libc.mincore(at, size, vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            libc.munmap(at, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vector), pages


def _read_whole(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def test_the_measure_sees_a_dropped_cache(tmp_path):
    """The probe the sandbox tests rely on can fail: ``DONTNEED`` outside the sandbox (on a
    copy of the file, so the host's own cache is left alone) empties its cached pages."""
    copy = tmp_path / "topics.py"
    shutil.copyfile(STDLIB_FILE, copy)
    _read_whole(str(copy))
    cached, pages = resident_pages(str(copy))
    assert pages > 50 and cached > pages // 2, (cached, pages)
    fd = os.open(copy, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    assert resident_pages(str(copy))[0] < cached // 2


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=1) as pool:
        yield pool


@pytest.fixture(scope="module")
def cache_runs(pool):
    assert pool.isolation == "full", pool.capabilities["detail"]
    _read_whole(STDLIB_FILE)
    before = resident_pages(STDLIB_FILE)
    hostile, honest = pool.run([Job(textwrap.dedent(HOSTILE_CACHE), f"{STDLIB_FILE}\n".encode(), LIMITS),
                                Job(textwrap.dedent(HONEST_CACHE), f"{STDLIB_FILE}\n".encode(), LIMITS)])
    return {"before": before, "after": resident_pages(STDLIB_FILE), "hostile": hostile, "honest": honest}


def test_a_job_cannot_drop_the_hosts_page_cache(cache_runs):
    """``posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`` on a standard-library file it can read
    (6,607 cached pages fell to 1,674 before), a range of it, bit 32 set on the advice, and
    ``madvise`` ``MADV_COLD``/``MADV_PAGEOUT`` on a mapping of it: each an EPERM the program
    sees, and the file's pages stay cached."""
    run = cache_runs["hostile"]
    assert run.outcome == "ok", (run.outcome, run.detail, run.stderr_head)
    found = json.loads(run.stdout)
    assert found == {name: "refused" for name in ("DONTNEED", "DONTNEED, bit 32 set", "DONTNEED, one range",
                                                  "MADV_COLD", "MADV_PAGEOUT")}, found
    (cached_before, pages), (cached_after, _) = cache_runs["before"], cache_runs["after"]
    assert cached_before > pages // 2, cache_runs
    assert cached_after >= cached_before * 9 // 10, cache_runs


def test_honest_advice_still_works(cache_runs):
    """Sequential, random, normal, will-need and no-reuse advice on a standard-library file
    and on the job's own file, ``madvise`` with the common advice on file and anonymous
    mappings: an honest program sees no error."""
    run = cache_runs["honest"]
    assert run.outcome == "ok", (run.outcome, run.detail, run.stderr_head)
    found = json.loads(run.stdout)
    expected = {f"{label} {advice}": "ok" for label in ("stdlib", "own")
                for advice in ("NORMAL", "SEQUENTIAL", "RANDOM", "WILLNEED", "NOREUSE", "MADV_NORMAL",
                               "MADV_SEQUENTIAL", "MADV_WILLNEED", "MADV_DONTNEED")}
    expected.update({"stdlib bytes": os.path.getsize(STDLIB_FILE), "own bytes": 1 << 18,
                     "anonymous MADV_DONTNEED": "00"})
    assert found == expected, found


def test_the_filter_names_the_advice_it_refuses():
    """The rules compare only the advice the kernel reads (32 bits), and the docs' table
    names them."""
    from vigor_cli.sandbox import seccomp_filter

    assert (seccomp_filter._POSIX_FADV_DONTNEED, seccomp_filter._MADV_COLD, seccomp_filter._MADV_PAGEOUT) == (
        os.POSIX_FADV_DONTNEED, getattr(mmap, "MADV_COLD", 20), getattr(mmap, "MADV_PAGEOUT", 21))
    docs = os.path.join(os.path.dirname(__file__), "..", "docs")
    with open(os.path.join(docs, "verifiers.md")) as f:
        table = f.read().split("### The seccomp filter")[1].split("\n## ")[0]
    assert all(word in table for word in ("`fadvise64` `POSIX_FADV_DONTNEED`", "`MADV_COLD`", "`MADV_PAGEOUT`"))


# =========================================================================== 2. shared memory
SYSV = """
    import ctypes, mmap, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]

    def segment(mb):
        shmid = libc.shmget(0, ctypes.c_size_t(mb << 20), 0o1000 | 0o600)
        if shmid < 0:
            return None
        at = libc.shmat(shmid, None, 0)
        assert at not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        return at

    def tmpfs_file(name, mb):  # filled through mappings: no buffer of the program's own grows
        views = []
        for part in range(0, mb, 16):  # files of at most 16 MiB (RLIMIT_FSIZE)
            size = min(16, mb - part) << 20
            fd = os.open(f"{name}.{part}", os.O_RDWR | os.O_CREAT)
            os.ftruncate(fd, size)
            views.append(mmap.mmap(fd, size))
            for offset in range(0, size, mmap.PAGESIZE):
                views[-1][offset] = 1
        return views
    """
"""Helpers every shared-memory program starts with."""

MEMORY_PROGRAMS = {
    # System V segments and /dev/shm files together: 96 MiB at a 64 MiB limit
    "sysv_and_tmpfs": (64, """
        at = segment(48)
        ctypes.memset(at, 1, 48 << 20)
        held = tmpfs_file("/dev/shm/held", 48)
        print("held 96 MiB")
        """),
    # the segment filled by the kernel (read() from /dev/zero into it), then memory of its own
    "sysv_filled_by_the_kernel": (64, """
        at = segment(64)
        fd = os.open("/dev/zero", os.O_RDONLY)
        done = 0
        while done < 64 << 20:
            done += libc.read(fd, ctypes.c_void_p(at + done), ctypes.c_size_t(1 << 20))
        block = bytearray(48 << 20)
        print("held", done >> 20, "+ 48 MiB")
        """),
    # tmpfs alone, within the job's 64 MiB disk, beyond a 32 MiB limit
    "tmpfs_beyond_the_limit": (32, """
        held = tmpfs_file(os.path.join(os.environ["TMPDIR"], "held"), 56)
        print("held 56 MiB")
        """),
    # shared anonymous memory is tmpfs memory too
    "shared_anonymous": (64, """
        view = mmap.mmap(-1, 100 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        for offset in range(0, 100 << 20, mmap.PAGESIZE):
            view[offset] = 1
        print("held 100 MiB")
        """),
    # many segments and files written with write(): 112 MiB
    "many_segments_and_files": (64, """
        for _ in range(4):
            ctypes.memset(segment(16), 1, 16 << 20)
        chunk = b"x" * (1 << 20)
        for i in range(4):
            with open(f"/dev/shm/f{i}", "wb") as f:
                for _ in range(12):
                    f.write(chunk)
        print("held 112 MiB")
        """),
    # System V alone never passes the limit: the job's IPC namespace is sized to it
    "sysv_beyond_the_namespace": (64, """
        held = 0
        while (at := segment(16)) is not None:
            ctypes.memset(at, 1, 16 << 20)
            held += 16
        print(held, ctypes.get_errno())
        """),
    # an honest program with a little of each
    "honest_shared": (64, """
        at = segment(8)
        ctypes.memset(at, 7, 8 << 20)
        files = [tmpfs_file("/dev/shm/a", 8), tmpfs_file(os.path.join(os.environ["TMPDIR"], "b"), 4)]
        view = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        view[:4] = b"abcd"
        print(ctypes.string_at(at, 3) == bytes([7] * 3), files[0][0][0], view[:4].decode())
        """),
}
HOLD_AND_WAIT = """
    at = segment(24)
    ctypes.memset(at, 1, 24 << 20)
    held = tmpfs_file("/dev/shm/held", 16)
    import time
    time.sleep(1.5)
    print("held 40 MiB")
    """


def _memory_job(name: str) -> Job:
    memory_mb, body = MEMORY_PROGRAMS[name]
    return Job(textwrap.dedent(SYSV) + textwrap.dedent(body), b"", Limits(timeout_s=15.0, memory_mb=memory_mb))


@pytest.fixture(scope="module")
def memory_runs(pool):
    names = sorted(MEMORY_PROGRAMS)
    return dict(zip(names, pool.run([_memory_job(n) for n in names])))


def test_the_slot_cgroup_was_measured_to_count_shared_memory(pool):
    """Never assumed: the zygote held 8 MiB of System V memory and 8 MiB in a tmpfs file and
    the slot's cgroup (cgroup v1 here) was charged for both, so the level says ``full``."""
    from vigor_cli.sandbox.probe import SHARED_PROBE_BYTES

    caps = pool.capabilities
    assert caps["memory_cgroup"] and caps["shared_memory_counted"] is True, caps["detail"]
    assert all(charged >= SHARED_PROBE_BYTES * 3 // 4 for charged in caps["shared_memory_charged"]), caps
    assert pool.isolation == "full"


@pytest.mark.parametrize("name", ["sysv_and_tmpfs", "sysv_filled_by_the_kernel", "tmpfs_beyond_the_limit",
                                  "shared_anonymous", "many_segments_and_files"])
def test_shared_memory_beyond_the_limit_fails_naming_it(memory_runs, name):
    run = memory_runs[name]
    limit = MEMORY_PROGRAMS[name][0]
    assert run.outcome == "memory", (name, run.outcome, run.detail, run.stdout[:100], run.stderr_head)
    assert f"memory limit {limit} MiB" in run.detail and run.stdout == b""


def test_system_v_alone_stops_at_the_limit(memory_runs):
    """The job's IPC namespace allows segments up to its memory limit (ENOSPC past it)."""
    run = memory_runs["sysv_beyond_the_namespace"]
    assert (run.outcome, run.stdout) == ("ok", b"64 28\n"), (run.detail, run.stderr_head)


def test_honest_shared_memory_within_the_limit_passes(memory_runs):
    run = memory_runs["honest_shared"]
    assert (run.outcome, run.stdout) == ("ok", b"True 1 abcd\n"), (run.detail, run.stderr_head)


def test_the_slot_is_charged_for_what_a_job_holds(pool):
    """Read from outside while the program holds 24 MiB of System V memory and a 16 MiB
    /dev/shm file: the slot cgroup's ``shmem`` counts all of it."""
    from vigor_cli.sandbox.memory_cgroup import FOLDER, find_parent

    parent, why = find_parent()
    assert parent is not None, why
    stat = os.path.join(parent.path, FOLDER, f"slot-{pool.capabilities['uids'][0]}", "memory.stat")
    peak, done = [0], threading.Event()

    def watch():
        while not done.is_set():
            try:
                with open(stat) as f:
                    fields = dict(line.split() for line in f)
                peak[0] = max(peak[0], int(fields.get("shmem", 0)))
            except OSError:
                pass
            done.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run = pool.run_one(Job(textwrap.dedent(SYSV) + textwrap.dedent(HOLD_AND_WAIT), b"",
                               Limits(timeout_s=15.0, memory_mb=64)))
    finally:
        done.set()
        watcher.join()
    assert (run.outcome, run.stdout) == ("ok", b"held 40 MiB\n"), (run.detail, run.stderr_head)
    assert peak[0] >= 38 << 20, peak


def test_the_measure_of_shared_memory_charges(tmp_path):
    """Measured in a fresh memory cgroup of its own (this machine's cgroup v1), by a process
    that joined it, it sees both kinds charged; against a usage file that never moves,
    nothing: that is what makes the level say ``memory: shared memory not counted``."""
    from vigor_cli.sandbox.memory_cgroup import SlotCgroup, find_parent, join
    from vigor_cli.sandbox.probe import SHARED_PROBE_BYTES, shared_memory_charges

    parent, why = find_parent()
    assert parent is not None, why
    slot = SlotCgroup(parent, f"test-caches-{os.getpid()}")
    try:
        slot.set_limit(256 << 20)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # joins the cgroup, so nothing else charged there blurs the figures
            try:
                join(slot.procs_fd)
                os.write(write_fd, json.dumps(shared_memory_charges(slot.usage_fd)).encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as f:
            charged = json.loads(f.read() or b"null")
        os.waitpid(pid, 0)
    finally:
        slot.close()
    assert isinstance(charged, list) and min(charged) >= SHARED_PROBE_BYTES * 3 // 4, charged
    still = tmp_path / "usage"
    still.write_text("1048576\n")
    fd = os.open(still, os.O_RDONLY)
    try:
        assert shared_memory_charges(fd) == (0, 0)
    finally:
        os.close(fd)


def test_the_level_says_when_shared_memory_is_not_counted():
    from vigor_cli.sandbox import pool as pool_module

    full = {layer: True for layer in pool_module.ISOLATION_LAYERS}
    assert pool_module.isolation_level({**full, "memory_cgroup": True, "shared_memory_counted": True}) == "full"
    assert pool_module.isolation_level({**full, "memory_cgroup": True, "shared_memory_counted": False}) == (
        "full, memory: shared memory not counted")
    assert pool_module.isolation_level({**full, "shared_memory_counted": False}) == "full, memory: rlimit only"
