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
def cache_runs():
    with SandboxPool(workers=1) as pool:
        assert pool.isolation == "full", pool.capabilities["detail"]
        _read_whole(STDLIB_FILE)
        before = resident_pages(STDLIB_FILE)
        hostile, honest = pool.run([Job(textwrap.dedent(HOSTILE_CACHE), f"{STDLIB_FILE}\n".encode(), LIMITS),
                                    Job(textwrap.dedent(HONEST_CACHE), f"{STDLIB_FILE}\n".encode(), LIMITS)])
        yield {"before": before, "after": resident_pages(STDLIB_FILE), "hostile": hostile,
               "honest": honest}


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
