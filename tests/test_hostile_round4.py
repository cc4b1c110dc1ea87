"""Issue 34, the fourth hostile round: what held before and what did not.

1. Memory that counts everything: each slot runs its programs under a memory cgroup whose
   limit counts System V shared memory, tmpfs files and page tables (RLIMIT_AS counted none of
   them); where the host allows no cgroup (forced here with ``disable``) the rlimits stay and
   the isolation level says ``memory: rlimit only``. Thread stacks need no address-space
   headroom any more: ``threading.stack_size(2**29)`` runs under the default limit.
2. No machine-wide effects: the AIO family, ``sync``/``syncfs`` and every file lock are
   refused (AIO took the machine's whole quota; a lock on a file two slots can open is a
   channel between them).
3. The zygote's answers name their job: a report that comes after the server stopped waiting
   is dropped, never taken for a later job's (a slow reap left the worker off by one for good).

Real programs in a real pool; the isolation this machine gives (root, cgroup v1 memory
controller) is asserted, never skipped.
"""

from __future__ import annotations

import json
import os
import re
import socket
import textwrap
import time

import pytest

from vigor_cli.sandbox import Job, Limits, SandboxPool
from vigor_cli.sandbox import memory_cgroup, pool as pool_module, zygote
from vigor_cli.sandbox.pool import _classify, isolation_level

LIMITS = Limits(timeout_s=10.0, memory_mb=128)

SPARSE_MAPPINGS = """
    import ctypes, mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    FIXED_NOREPLACE, FAILED = 0x100000, ctypes.c_void_p(-1).value
    held = 0
    for i in range(30000):  # one page in each 2 MiB: a page of page table apiece, 117 MiB of them
        at = libc.mmap(0x200000000000 + (i << 21), 4096, mmap.PROT_READ | mmap.PROT_WRITE,
                       mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | FIXED_NOREPLACE, -1, 0)
        if at in (None, FAILED):
            break
        ctypes.memset(at, 1, 1)
        held += 1
    print(held)
    """
"""30 000 one-page mappings: 117 MiB of address space (under a 128 MiB limit), as much again in
page tables."""

SYSV_SHARED_MEMORY = """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    held = []
    for _ in range(7):  # 112 MiB of segments, within the IPC namespace's 128 MiB
        shmid = libc.shmget(0, ctypes.c_size_t(16 << 20), 0o1000 | 0o600)
        at = libc.shmat(shmid, None, 0)
        ctypes.memset(at, 1, 16 << 20)
        held.append(at)
    block = bytearray(64 << 20)  # and memory of its own on top
    print(len(held), len(block))
    """

TMPFS_FILES = """
    import os
    for name in ("/dev/shm/a", "/dev/shm/b", "/dev/shm/c", os.path.join(os.environ["TMPDIR"], "d")):
        with open(name, "wb") as f:  # 4 x 15 MiB in the job's tmpfs (its disk, 64 MiB)
            f.write(b"x" * (15 << 20))
    block = bytearray(100 << 20)
    print(len(block))
    """
"""60 MiB of tmpfs files plus 100 MiB of its own: over 128 MiB only if the files count."""

BIG_THREAD_STACK = """
    import threading
    threading.stack_size(2 ** 29)
    out = []
    t = threading.Thread(target=lambda: out.append(sum(range(10 ** 5))))
    t.start()
    t.join()
    print(out[0])
    """

MACHINE_WIDE = """
    import ctypes, fcntl, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    context = ctypes.c_ulong(0)
    found = {}
    for name, number, args in (("io_setup", 206, (65536, ctypes.addressof(context))),
                               ("io_destroy", 207, (0,)), ("io_submit", 209, (0, 0, 0)),
                               ("io_cancel", 210, (0, 0, 0)), ("io_getevents", 208, (0, 0, 0, 0, 0)),
                               ("io_pgetevents", 333, (0, 0, 0, 0, 0, 0)), ("sync", 162, ()),
                               ("syncfs", 306, (1,))):
        rc = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
        found[name] = "refused" if rc == -1 and ctypes.get_errno() == 1 else f"allowed ({rc})"
    shared = open(os.__file__, "rb")  # a file every slot can open
    own = open("own", "w")
    for name, lock in (("flock", lambda: fcntl.flock(shared, fcntl.LOCK_EX | fcntl.LOCK_NB)),
                       ("lockf", lambda: fcntl.lockf(own, fcntl.LOCK_EX | fcntl.LOCK_NB)),
                       ("fcntl F_SETLK", lambda: fcntl.fcntl(shared, 6, bytes(32))),
                       ("fcntl F_GETLK", lambda: fcntl.fcntl(shared, 5, bytes(32))),
                       ("fcntl F_OFD_SETLK", lambda: fcntl.fcntl(own, 37, bytes(32))),
                       ("fcntl F_OFD_GETLK", lambda: fcntl.fcntl(shared, 36, bytes(32))),
                       ("fcntl F_SETLEASE", lambda: fcntl.fcntl(own, 1024, fcntl.F_RDLCK))):
        try:
            lock()
            found[name] = "allowed"
        except PermissionError:
            found[name] = "refused"
        except OSError as exc:
            found[name] = f"failed otherwise ({exc})"
    print(json.dumps(found))
    """

HONEST = "n = int(input())\nprint(sum(i * i for i in range(n)))"

PROGRAMS = {"sparse": SPARSE_MAPPINGS, "sysv": SYSV_SHARED_MEMORY, "tmpfs": TMPFS_FILES,
            "stack": BIG_THREAD_STACK, "machine_wide": MACHINE_WIDE, "honest": HONEST}


def _jobs(names):
    return [Job(textwrap.dedent(PROGRAMS[n]), b"1000\n",
                Limits(timeout_s=10.0) if n == "stack" else LIMITS) for n in names]


@pytest.fixture(scope="module")
def cgroup_runs():
    with SandboxPool(workers=2) as pool:
        names = sorted(PROGRAMS)
        yield pool, dict(zip(names, pool.run(_jobs(names))))


# =========================================================================== 1. memory
def test_each_slot_runs_under_a_memory_cgroup_here(cgroup_runs):
    pool, _ = cgroup_runs
    assert pool.capabilities["memory_cgroup"] and pool.isolation == "full", pool.capabilities["detail"]


@pytest.mark.parametrize("name", ["sparse", "sysv", "tmpfs"])
def test_memory_outside_the_address_space_fails_with_the_limit_named(cgroup_runs, name):
    """Page tables, System V segments and tmpfs files count against the limit: each program
    is stopped as a memory outcome that names the limit (the sparse mappings and the tmpfs
    files passed under the address-space limit alone)."""
    run = cgroup_runs[1][name]
    assert run.outcome == "memory", (name, run.outcome, run.detail, run.stdout[:100], run.stderr_head)
    assert "memory limit 128 MiB" in run.detail


def test_the_kernel_kills_the_program_never_its_zygote(cgroup_runs):
    """The zygote lives in the slot's cgroup (its children are born there); each child makes
    itself the first the kernel kills for the limit, so after the kills above the zygotes are
    the ones the workers started with, and the next programs run."""
    pool, _ = cgroup_runs
    assert all(os.path.exists(f"/proc/{w.capabilities['zygote_pid']}") for w in pool._workers)
    after = pool.run([Job(HONEST, b"10\n", LIMITS)] * 2)
    assert [r.stdout for r in after] == [b"285\n"] * 2


def test_a_thread_stack_of_half_a_gigabyte_runs_under_the_default_limit(cgroup_runs):
    run = cgroup_runs[1]["stack"]
    assert (run.outcome, run.stdout) == ("ok", b"4999950000\n"), (run.detail, run.stderr_head)


def test_honest_programs_in_the_same_batch_pass(cgroup_runs):
    run = cgroup_runs[1]["honest"]
    assert (run.outcome, run.stdout) == ("ok", f"{sum(i * i for i in range(1000))}\n".encode())


def test_without_a_cgroup_the_rlimits_stay_and_the_level_says_so():
    """Forced here; where the host allows no cgroup (not root on cgroup v1, a v2 cgroup that
    holds processes) it is the same: the level says so, the address-space limit binds."""
    names = ["honest", "stack"]
    with SandboxPool(workers=1, disable=("memory_cgroup",)) as pool:
        runs = dict(zip(names, pool.run(_jobs(names))))
        bomb = pool.run_one(Job("x = [0] * (10 ** 9)", b"", LIMITS))
        assert pool.isolated and pool.isolation == "full, memory: rlimit only"
        assert any("memory: rlimit only (turned off)" in d for d in pool.capabilities["detail"])
    assert runs["honest"].outcome == "ok" and runs["honest"].isolation == pool.isolation
    assert bomb.outcome == "memory" and bomb.detail == "memory limit 128 MiB"
    # the reason the cgroup matters: a reserved 512 MiB stack does not fit the address space
    assert runs["stack"].outcome == "exit" and "can't start new thread" in runs["stack"].detail


def test_isolation_level_names_memory_rlimit_only():
    full = {layer: True for layer in pool_module.ISOLATION_LAYERS}
    assert isolation_level({**full, "memory_cgroup": True}) == "full"
    assert isolation_level(full) == "full, memory: rlimit only"
    assert isolation_level({**full, "landlock": False}) == "weak (no landlock), memory: rlimit only"


def test_an_oom_kill_is_a_memory_outcome_naming_the_limit():
    reply = {"confined": True, "exit_code": None, "signal": 9, "timed_out": False,
             "output_limited": False, "wall_s": 0.3, "cpu_s": 0.2, "max_rss_kb": 1, "oom_killed": True,
             "stdout": b"", "stderr": b"", "status": b""}
    result = _classify(reply, Limits(memory_mb=77))
    assert result.outcome == "memory" and result.detail.startswith("memory limit 77 MiB")
    assert _classify({**reply, "oom_killed": False}, Limits()).outcome == "signal"


# --------------------------------------------------------------------------- the cgroup files
def _fake_host(tmp_path, version: int, procs: str = "") -> tuple[str, str, str]:
    """A /proc/self/cgroup, a mountinfo and a cgroup tree of the given version, as files."""
    root = tmp_path / "cgroup"
    own = root / "user.slice" / "job"
    own.mkdir(parents=True)
    if version == 1:
        line = "4:memory:/user.slice/job\n0::/\n"
        mount = f"35 31 0:32 / {root} rw - cgroup cgroup rw,memory\n"
    else:
        line = "0::/user.slice/job\n"
        mount = f"35 31 0:32 / {root} rw - cgroup2 cgroup2 rw\n"
        (own / "cgroup.controllers").write_text("cpu memory pids\n")
        (own / "cgroup.subtree_control").write_text(procs)
    (tmp_path / "cgroup.txt").write_text(line)
    (tmp_path / "mountinfo").write_text("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" + mount)
    return str(tmp_path / "cgroup.txt"), str(tmp_path / "mountinfo"), str(own)


def _fill(path: str, version: int) -> None:
    """What the kernel would show in a new cgroup folder."""
    files = {"cgroup.procs": "", "memory.limit_in_bytes": str((1 << 63) - 4096),
             "memory.memsw.limit_in_bytes": str((1 << 63) - 4096), "memory.oom_control": "oom_kill 0\n",
             "memory.usage_in_bytes": "0\n"}
    if version == 2:
        files = {"cgroup.procs": "", "memory.max": "max", "memory.swap.max": "max",
                 "memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
                 "cgroup.subtree_control": "", "cgroup.controllers": "memory", "memory.current": "0\n"}
    os.makedirs(path, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(path, name), "w") as f:
            f.write(text)


@pytest.mark.parametrize("version", [1, 2])
def test_the_slot_cgroup_goes_below_the_callers_own_and_sets_its_limit(tmp_path, version):
    proc_cgroup, mountinfo, own = _fake_host(tmp_path, version, procs="memory\n")
    parent, why = memory_cgroup.find_parent(proc_cgroup, mountinfo)
    assert parent == memory_cgroup.Parent(version, own) and why == ""
    _fill(os.path.join(own, "vigor-sandbox", "slot-7"), version)
    if version == 2:
        with open(os.path.join(own, "vigor-sandbox", "cgroup.subtree_control"), "w") as f:
            f.write("memory")
    slot = memory_cgroup.SlotCgroup(parent, "slot-7")
    slot.set_limit(200 << 20)
    limit, swap = ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes") if version == 1 else \
        ("memory.max", "memory.swap.max")
    read = lambda name: open(os.path.join(slot.path, name)).read()  # noqa: E731
    assert read(limit) == str(200 << 20)
    assert read(swap) == (str(200 << 20) if version == 1 else "0")  # swap never adds room
    assert slot.oom_kills() == (0 if version == 1 else 1)
    assert memory_cgroup.read_usage(slot.usage_fd) == 0  # what the zygote measures shared memory with
    slot.close()


def test_a_v2_cgroup_that_cannot_give_its_children_memory_means_no_slot_cgroup(tmp_path):
    """The "no internal processes" rule: the kernel refuses the controller below a cgroup that
    holds processes (EBUSY); any refusal to write ``cgroup.subtree_control`` (here the file is
    a folder) means no slot cgroup, with the reason."""
    proc_cgroup, mountinfo, own = _fake_host(tmp_path, 2)
    parent, _ = memory_cgroup.find_parent(proc_cgroup, mountinfo)
    control = os.path.join(own, "cgroup.subtree_control")
    os.remove(control)
    os.mkdir(control)
    with pytest.raises(OSError, match="cannot enable the memory controller below"):
        memory_cgroup.SlotCgroup(parent, "slot-1")


def test_no_memory_controller_is_said(tmp_path):
    (tmp_path / "cgroup.txt").write_text("1:cpu:/\n")
    (tmp_path / "mountinfo").write_text("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")
    parent, why = memory_cgroup.find_parent(str(tmp_path / "cgroup.txt"), str(tmp_path / "mountinfo"))
    assert parent is None and "memory" in why


# =========================================================================== 2. machine-wide
def test_aio_sync_and_file_locks_are_refused(cgroup_runs):
    run = cgroup_runs[1]["machine_wide"]
    assert run.outcome == "ok", (run.detail, run.stderr_head)
    found = json.loads(run.stdout)
    assert found == {name: "refused" for name in found}, found
    assert len(found) == 15


def test_the_syscall_table_in_the_docs_names_every_refused_call():
    from vigor_cli.sandbox import seccomp_filter

    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "verifiers.md")) as f:
        table = f.read().split("### The seccomp filter")[1].split("\n## ")[0]
    named = set(re.findall(r"`([a-z_0-9]+)`", table))
    refused = {*seccomp_filter._DENIED_OUTRIGHT, *seccomp_filter._SELF_ONLY_ARG0, *seccomp_filter._SELF_ONLY_ARG1}
    assert refused <= named, sorted(refused - named)
    assert {"F_GETLK", "F_SETLK", "F_SETLKW", "F_OFD_GETLK", "F_OFD_SETLK", "F_OFD_SETLKW",
            "F_SETLEASE"} <= set(re.findall(r"`(F_[A-Z_]+)`", table))


# =========================================================================== 3. the zygote
def _slow_first_reap(delay_s: float, wait_s: float) -> str:
    """A worker boot whose zygote's first reap takes ``delay_s`` while the server waits
    ``wait_s`` for each answer: the fault the off-by-one came from."""
    return ("import sys, time; sys.path.insert(0, sys.argv[1]); "
            "import vigor_cli.sandbox.worker as w, vigor_cli.sandbox.zygote as z; "
            f"z.REPORT_WAIT_S = {wait_s}; reap = z.reap; "
            f"z.reap = lambda pid, n=[]: (n.append(pid), time.sleep({delay_s} if len(n) == 1 else 0), "
            "reap(pid))[2]; w.main()")


@pytest.mark.slow
def test_a_slow_reap_costs_its_own_job_and_every_later_job_is_graded_right(monkeypatch):
    monkeypatch.setattr(pool_module, "_WORKER_BOOT", _slow_first_reap(delay_s=2.0, wait_s=0.5))
    with SandboxPool(workers=1) as pool:
        runs = [pool.run_one(Job(f"import sys\nprint(input() * {k})\nsys.exit({k})", f"{k}\n".encode(),
                                 Limits(timeout_s=5.0)))
                for k in range(1, 7)]
    assert runs[0].outcome == "sandbox_error" and "did not report the child's exit" in runs[0].detail
    for k, run in enumerate(runs[1:], start=2):
        assert (run.outcome, run.exit_code, run.stdout) == ("exit", k, f"{k}".encode() * k + b"\n"), (k, run)


def test_answers_of_another_job_are_dropped_and_a_stale_child_is_killed():
    server, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # a stale job's child: it would run on unsupervised
        time.sleep(60)
        os._exit(0)
    pidfd = os.pidfd_open(pid)
    try:
        zygote_end.send(json.dumps({"job": 3, "kind": "exit", "status": 0}).encode())  # late report
        socket.send_fds(zygote_end, [json.dumps({"job": 4, "kind": "started"}).encode()], [pidfd])
        zygote_end.send(json.dumps({"job": 5, "kind": "exit", "status": 256}).encode())
        reply, fds = zygote.await_reply(server, 5, "exit", wait_s=5)
        assert reply["status"] == 256 and fds == []
        assert os.waitpid(pid, 0)[1] == 9  # SIGKILLed when its "started" was dropped
        assert zygote.await_reply(server, 6, "exit", wait_s=0.05) == (None, [])
        zygote_end.close()
        with pytest.raises(OSError, match="the zygote died"):
            zygote.await_reply(server, 6, "exit", wait_s=5)
    finally:
        os.close(pidfd)
        server.close()


# =========================================================================== 4. the writers
LCB_FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "lcb")
SURROGATE_STATUS = ("import os\n"
                    "os.write(3, b'{\"unserialisable\": \"\\\\ud800 from the program\"}\\n')\n"
                    "class Solution:\n"
                    "    def twoSum(self, nums, target):\n"
                    "        return {1}\n")
"""Writes its own status line first: a field holding a lone surrogate (JSON's ``\\ud800``)."""
TWO_SUM = ("```python\nclass Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
           "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
           "                return [seen[target - x], i]\n            seen[x] = i\n```")


@pytest.fixture
def two_sum_dir(tmp_path):
    """A local LiveCodeBench folder (code.jsonl) holding the two-sum record (contest date
    2024-08-03: a held-out problem of the default split)."""
    with open(os.path.join(LCB_FIXTURES, "functional_problem.json")) as f:
        record = json.load(f)
    (tmp_path / "lcb").mkdir()
    (tmp_path / "lcb" / "code.jsonl").write_text(json.dumps(record) + "\n")
    return tmp_path


@pytest.mark.slow
def test_a_surrogate_in_the_status_reaches_eval_output_intact(vigor, two_sum_dir):
    """`vigor eval --rescore ... --output` died with UnicodeEncodeError, writing nothing (the
    honest sample's grade lost, an empty temp file left)."""
    results = {"sets": {"lcb-v6": {"samples": [
        {"uid": "code/test/3999", "sample": 0, "completion": TWO_SUM, "reward": 0.0},
        {"uid": "code/test/3999", "sample": 1, "completion": f"```python\n{SURROGATE_STATUS}```", "reward": 0.0},
    ]}}}
    source, target = two_sum_dir / "results.json", two_sum_dir / "out" / "rescored.json"
    source.write_text(json.dumps(results))
    code, out, err = vigor("eval", "--rescore", str(source), "--data-dir", str(two_sum_dir / "lcb"),
                           "--output", str(target))
    assert code == 0, err
    honest, hostile = json.loads(target.read_bytes())["sets"]["lcb-v6"]["samples"]
    assert honest["reward"] == 1.0 and honest["test_fraction"] == 1.0
    assert hostile["reward"] == 0.0 and "returned a \\ud800 from the program" in hostile["reason"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["rescored.json"]


@pytest.mark.slow
def test_a_surrogate_in_the_status_reaches_verify_json_and_the_table(vigor, two_sum_dir):
    problem, solution = two_sum_dir / "lcb" / "code.jsonl", two_sum_dir / "hostile.py"
    solution.write_text(SURROGATE_STATUS)
    code, out, err = vigor("verify", "code", "--problem", str(problem), "--solution", str(solution), "--json")
    assert code == 0, err
    verdict = json.loads(out)
    assert verdict["full"] == 0.0 and "returned a \\ud800 from the program" in verdict["reason"]
    code, out, err = vigor("verify", "code", "--problem", str(problem), "--solution", str(solution))
    assert code == 0 and "\\ud800 from the program" in out, err


@pytest.mark.slow
def test_the_results_writer_takes_any_text_and_leaves_nothing_when_it_fails(tmp_path, monkeypatch):
    from vigor_cli.errors import UserError
    from vigor_cli.report.eval_results import write_results

    path = tmp_path / "results.json"
    results = {"sets": {"x\ud800": {"samples": [{"reason": "lone \udfff and ü"}]}}}
    write_results(results, path)
    assert json.loads(path.read_bytes()) == results  # valid JSON, the same strings read back
    before = path.read_bytes()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(UserError, match="results.json: no space left"):
        write_results({"sets": {}}, path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
