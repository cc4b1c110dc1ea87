"""Sandbox isolation, continued: nothing a program starts outlives its job (process trees, SysV IPC), no amplification of the grader, no state carried from one job to the next."""

from __future__ import annotations
import json
import os
import subprocess
import sys
import time
from pathlib import Path
import pytest
from test_sandbox import _job_leftovers
from vigor_cli.sandbox import Job, Limits, SandboxPool
from vigor_cli.verifiers.code import CodeVerifier, load_problem

from test_sandbox_isolation import LIMITS, ROOT, SECRET, SECRET_TESTS, TOKEN, VICTIM, VICTIM_SOLUTION, _assert_nothing_left, _grade_beside_victim, _record, pool, verifier  # noqa: F401  (helpers and fixtures shared with test_sandbox_isolation.py)


# --------------------------------------------------------------------------- outliving the run
DEEP_TREE = f"""
import os, sys
n = int(input())
for folder in ('/run/lock', '/var/tmp', '/dev/shm', '/tmp'):
    try:
        with open(f'{{folder}}/{TOKEN}-left', 'w') as f:
            f.write('x' * 4096)
    except OSError:
        pass
for _ in range(3000):
    os.mkdir('d')
    os.chdir('d')
open('deepest', 'w').write('x')
print(f'{{(n * 7919 + 104729) % 1000003}}-{TOKEN}')
"""


def test_deep_tree_and_host_folders_leave_nothing(verifier):
    """A correct program that leaves a 3000-deep directory chain and files in the host's
    writable folders: graded as usual (pass), the pool keeps its workers, nothing remains."""
    workers_before = [w.process.pid for w in verifier.pool._workers]
    verdict = _grade_beside_victim(verifier, DEEP_TREE)
    assert verdict.full == 1.0, ("cleanup broke the grading", verdict.reason)
    assert [w.process.pid for w in verifier.pool._workers] == workers_before, "a worker died"
    _assert_nothing_left(verifier.pool, tuple(f"{d}/{TOKEN}-left"
                                              for d in ("/run/lock", "/var/tmp", "/dev/shm")))


IPC_WRITER = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
n = int(input())
message = f'{{(n * 7919 + 104729) % 1000003}}-{TOKEN}'.encode()
made = []
shm = libc.shmget(0x766967, 4096, 0o1000 | 0o666)
if shm >= 0:
    address = libc.shmat(shm, None, 0)
    ctypes.memmove(address, message + b'\\0', len(message) + 1)
    made.append('shm')
queue = libc.msgget(0x766968, 0o1000 | 0o666)
if queue >= 0:
    buffer = ctypes.create_string_buffer(ctypes.sizeof(ctypes.c_long) + 64)
    ctypes.memmove(ctypes.addressof(buffer) + ctypes.sizeof(ctypes.c_long), message, len(message))
    ctypes.c_long.from_buffer(buffer).value = 1
    if libc.msgsnd(queue, buffer, len(message), 0) == 0:
        made.append('msg')
mq = libc.mq_open(b'/{TOKEN}-mq', os.O_CREAT | os.O_RDWR, 0o666, None)
if mq >= 0 and libc.mq_send(mq, message, len(message), 0) == 0:
    made.append('mq')
print(made)
"""

IPC_READER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
input()
found = []
shm = libc.shmget(0x766967, 0, 0)
if shm >= 0:
    address = libc.shmat(shm, None, 0)
    if address not in (None, ctypes.c_void_p(-1).value):
        found.append(ctypes.string_at(address).decode())
queue = libc.msgget(0x766968, 0)
if queue >= 0:
    buffer = ctypes.create_string_buffer(ctypes.sizeof(ctypes.c_long) + 64)
    got = libc.msgrcv(queue, buffer, 64, 0, 0o4000)       # IPC_NOWAIT
    if got > 0:
        found.append(buffer.raw[ctypes.sizeof(ctypes.c_long):ctypes.sizeof(ctypes.c_long) + got].decode())
mq = libc.mq_open(b'/MQNAME', os.O_RDONLY | os.O_NONBLOCK)
if mq >= 0:
    buffer = ctypes.create_string_buffer(8192)
    got = libc.mq_receive(mq, buffer, 8192, None)
    if got > 0:
        found.append(buffer.raw[:got].decode())
print(found[0] if found else 'nothing')
""".replace("MQNAME", f"{TOKEN}-mq")


@pytest.mark.slow
def test_system_v_and_posix_queues_die_with_each_job():
    """One job leaves a shared-memory segment, a message queue and a POSIX queue holding its
    answer; the next job on the same worker (and one on the other) finds none of them."""
    with CodeVerifier(workers=2, timeout_s=6.0, memory_mb=256) as two:
        problem = load_problem(SECRET)
        writer = two.pool.run_one(Job(IPC_WRITER, SECRET_TESTS[0][0].encode(), LIMITS))
        # System V objects can be made (they die with the job's IPC namespace); a POSIX queue
        # is a file of the mqueue file system, which Landlock refuses to open at all.
        assert writer.outcome == "ok" and writer.stdout.startswith(b"['shm', 'msg'"), (
            writer.stdout, writer.stderr_head)
        # Both workers get a reader: whichever ran the writer must hold nothing either.
        readers = two.grade_many([(problem, IPC_READER, "public"),
                                  (load_problem(_record("r2", SECRET_TESTS[:1])), IPC_READER,
                                   "public")])
        for verdict in readers:
            assert verdict.tests[0].status == "wrong_answer", (
                "a job read what an earlier job left in IPC", verdict.reason)
        victim = two.grade(load_problem(VICTIM), VICTIM_SOLUTION)
        assert victim.full == 1.0
        _assert_nothing_left(two.pool)


# --------------------------------------------------------------------------- amplifying the grader
AMPLIFY = """
import json, os, resource, sys
from vigor_cli.verifiers.code import CodeVerifier, load_problem
record = json.loads(sys.argv[1])
flood = "import sys\\ninput()\\nsys.stdout.write('x' * (32 * 1024 * 1024 - 4096))\\n"
with CodeVerifier(workers=2, timeout_s=20.0, memory_mb=256) as verifier:
    problem = load_problem(record)
    verifier.grade(problem, "print(1)", "public")           # warm: the harness is loaded
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    victim = load_problem(json.loads(sys.argv[2]))
    verdict, beside = verifier.grade_many([(problem, flood, "public"),
                                           (victim, sys.argv[3], "public")])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = []
    for w in verifier.pool._workers:
        for line in open(f"/proc/{w.process.pid}/status"):
            if line.startswith("VmHWM:"):
                workers.append(int(line.split()[1]))
print(json.dumps({"before_kb": before, "after_kb": after, "workers_kb": workers,
                  "statuses": [t.status for t in verdict.tests], "victim": beside.full}))
"""


@pytest.mark.slow
def test_output_just_under_the_cap_does_not_grow_the_grader():
    """Four tests printing just under 32 MiB each: the grader's peak memory grows by at most
    its stated bound (docs/sandbox.md, the threat table), not by the sum of the outputs."""
    record = _record("flood", [(f"{i}\n", "1\n") for i in range(4)])
    out = subprocess.run([sys.executable, "-c", AMPLIFY, json.dumps(record), json.dumps(VICTIM),
                          VICTIM_SOLUTION], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    numbers = json.loads(out.stdout.strip().splitlines()[-1])
    assert numbers["statuses"] == ["wrong_answer"] * 4
    assert numbers["victim"] == 1.0, "the concurrent correct program failed"
    grown_mb = (numbers["after_kb"] - numbers["before_kb"]) / 1024
    assert grown_mb < 24, f"the grader grew by {grown_mb:.0f} MiB reading program output"
    assert max(numbers["workers_kb"]) / 1024 < 120, numbers["workers_kb"]


# --------------------------------------------------------------------------- no state between jobs
# (issue 24, part 2) Each program below was run against the sandbox before the fix and the test
# failed there: the job directory's root kept its extended attributes and default ACL between
# jobs, System V objects were bounded by the host's limits only, the seccomp rules on fcntl and
# ioctl compared 64 bits where the kernel reads 32, and tracebacks showed the harness's paths.
MARK_ROOTS = r"""
import os
roots = [os.getcwd(), os.path.dirname(os.getcwd()), os.environ.get("TMPDIR", "")]
acl = bytes.fromhex("02000000" "0100070000000000" "0400070000000000" "2000070000000000")
done, secret = [], input().encode()
for n in range(50):
    open(f"f{n}", "w").close()
for root in roots:
    for name, value in (("user.vigor_leak", secret), ("system.posix_acl_default", acl)):
        try:
            os.setxattr(root, name, value)
            done.append(name)
        except OSError:
            pass
print(sorted(set(done)))
"""

READ_ROOTS = r"""
import os
roots = [os.getcwd(), os.path.dirname(os.getcwd()), os.environ.get("TMPDIR", "")]
found = []
for root in roots:
    try:
        found += [(name, os.getxattr(root, name)) for name in os.listxattr(root)]
    except OSError:
        pass
os.umask(0o022)
with open("made", "w") as f:
    f.write("x")
info = os.stat("made")
print(found, oct(info.st_mode & 0o777), info.st_ino)
"""


@pytest.mark.slow
def test_no_attribute_acl_or_inode_count_survives_a_job():
    """One job marks every directory it can write above its files (user xattr, default ACL) and
    makes 50 files; the next job on the same worker finds no mark, creates files with the
    mode its umask says, and its first file has the inode number a first job's file has."""
    with SandboxPool(workers=1) as one:
        baseline = one.run_one(Job(READ_ROOTS, b"", LIMITS))
        marker = one.run_one(Job(MARK_ROOTS, f"{TOKEN}-secret\n".encode(), LIMITS))
        after = one.run_one(Job(READ_ROOTS, b"", LIMITS))
    assert marker.outcome == "ok" and b"user.vigor_leak" in marker.stdout, marker.stderr_head
    assert baseline.outcome == after.outcome == "ok", (baseline.stderr_head, after.stderr_head)
    found, mode, inode = after.stdout.decode().rsplit(" ", 2)
    assert found == "[]", f"a job read what the previous job left on its directory: {found}"
    assert mode == "0o644", "the previous job's default ACL decided this job's file mode"
    assert inode.strip() == baseline.stdout.decode().rsplit(" ", 1)[1].strip(), (
        "the job's tmpfs counted the previous job's inodes")


SYSTEM_V_IDS = r"""
import ctypes
libc = ctypes.CDLL(None)
ids = [libc.shmget(0, 4096, 0o1600), libc.msgget(0, 0o1600), libc.semget(0, 1, 0o1600)]
for n in range(int(input())):          # make and remove objects: their ids count up
    libc.shmctl(libc.shmget(0, 4096, 0o1600), 0, None)
print(ids)
"""


def test_system_v_ids_start_afresh_in_each_job():
    """Ids of System V objects count up within an IPC namespace: a job that made 500 would
    tell the next one on the worker (a channel between jobs). Each job has its own."""
    with SandboxPool(workers=1) as one:
        first = one.run_one(Job(SYSTEM_V_IDS, b"500\n", LIMITS))
        second = one.run_one(Job(SYSTEM_V_IDS, b"0\n", LIMITS))
    assert first.outcome == second.outcome == "ok", (first.stderr_head, second.stderr_head)
    assert second.stdout == first.stdout, (first.stdout, second.stdout)


SYSTEM_V_HOARD = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
libc.shmdt.argtypes = (ctypes.c_void_p,)
MiB = 1 << 20
segments = []
for _ in range(16):                      # 16 x 32 MiB, each touched, then detached
    sid = libc.shmget(0, 32 * MiB, 0o1600)
    if sid < 0:
        break
    address = libc.shmat(sid, None, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(address, 1, 32 * MiB)
    libc.shmdt(address)
    segments.append(sid)
buffer = (ctypes.c_char * 256)()
shm_held = sum(32 * MiB for sid in segments if libc.shmctl(sid, 2, buffer) == 0)  # IPC_STAT
queued = 0
message = ctypes.create_string_buffer(8 + 8192)
for _ in range(4000):                    # message queues, each filled until it is full
    qid = libc.msgget(0, 0o1600)
    if qid < 0:
        break
    while libc.msgsnd(qid, message, 8192, 0o4000) == 0:   # IPC_NOWAIT
        queued += 8192
        ctypes.c_long.from_buffer(message).value = 1
    if ctypes.get_errno() != 11:
        break
    ctypes.c_long.from_buffer(message).value = 1
semaphores = 0
for _ in range(200):                     # semaphore sets of up to 32000 semaphores
    for size in (32000, 250):
        if libc.semget(0, size, 0o1600) >= 0:
            semaphores += size
            break
    else:
        break
memfd = 0
libc.syscall.restype = ctypes.c_long
for n in range(40):                      # memfd files are no mapping: RLIMIT_AS misses them
    fd = libc.syscall(319, b"hoard", 0)
    if fd < 0:
        break
    try:
        import os
        os.write(fd, b"x" * (8 * MiB))
        memfd += 8 * MiB
    except OSError:
        break
import fcntl, os, socket
piped = 0
for _ in range(12):                      # pipes grown to 1 MiB and filled
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, 1031, 1 << 20)    # F_SETPIPE_SZ
    except OSError:
        pass
    os.set_blocking(w, False)
    try:
        while True:
            piped += os.write(w, b"p" * 65536)
    except BlockingIOError:
        pass
buffered = 0
for _ in range(12):                      # socket pairs with the largest buffers, filled
    a, b = socket.socketpair()
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        for end in (a, b):
            try:
                end.setsockopt(socket.SOL_SOCKET, option, 64 << 20)
            except OSError:
                pass
    a.setblocking(False)
    try:
        while True:
            buffered += a.send(b"s" * 65536)
    except BlockingIOError:
        pass
print(shm_held // MiB, queued // MiB, semaphores * 64 // MiB, memfd // MiB, piped // MiB,
      buffered // MiB)
"""


@pytest.mark.slow
def test_memory_outside_the_address_space_is_bounded_by_the_limit():
    """System V segments (detached ones belong to no process), message queues, semaphore sets,
    memfd files, pipe and socket buffers: none is counted by RLIMIT_AS. What a job can hold in
    them stays within its memory limit (here 64 MiB; one job held 3.6 GiB at 512 MiB before)."""
    limits = Limits(timeout_s=20.0, memory_mb=64)
    with SandboxPool(workers=1) as one:
        run = one.run_one(Job(SYSTEM_V_HOARD, b"", limits))
        assert run.outcome == "ok", (run.outcome, run.detail, run.stderr_head)
        shm, queues, semaphores, memfd, piped, buffered = map(int, run.stdout.split())
        assert shm <= 64, f"{shm} MiB of detached System V shared memory held at a 64 MiB limit"
        assert queues <= 64, f"{queues} MiB queued in System V message queues"
        assert semaphores <= 64, f"about {semaphores} MiB of kernel memory in semaphores"
        assert memfd <= 64, f"{memfd} MiB in memfd files"
        assert shm + queues + semaphores + memfd + piped + buffered <= 64, run.stdout
        _assert_nothing_left(one)


HIGH_BITS = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
r, w = os.pipe()
high = 1 << 32
out = []
for cmd, arg in ((8, os.getpid()), (10, 9), (15, 0)):            # F_SETOWN, F_SETSIG, F_SETOWN_EX
    owner = (ctypes.c_int * 2)(0, os.getpid())
    value = ctypes.addressof(owner) if cmd == 15 else arg
    rc = libc.syscall(72, r, ctypes.c_ulong(cmd | high), ctypes.c_ulong(value))
    out.append('refused' if rc == -1 else 'allowed')
pid = ctypes.c_int(os.getpid())
for request in (0x8901, 0x8902):                                  # FIOSETOWN, SIOCSPGRP
    rc = libc.syscall(16, r, ctypes.c_ulong(request | high), ctypes.byref(pid))
    out.append('refused' if rc == -1 and ctypes.get_errno() == 1 else 'allowed')
print(out)
"""


def test_fcntl_and_ioctl_rules_compare_the_32_bits_the_kernel_reads(pool):
    run = pool.run_one(Job(HIGH_BITS, b"", LIMITS))
    assert run.outcome == "ok", run.stderr_head
    assert run.stdout == b"['refused', 'refused', 'refused', 'refused', 'refused']\n", run.stdout


HARNESS_SHOWING = r"""
import traceback, warnings
class Solution:
    def nest(self, n):
        traceback.print_stack()
        warnings.warn("careful", stacklevel=3)
        return helper(n)
def helper(n):
    raise ValueError("boom in helper")
"""


@pytest.mark.slow
def test_a_programs_stderr_carries_no_path_of_the_grader(verifier):
    import vigor_cli.sandbox.child as child

    record = {**_record("trace", []), "metadata": json.dumps({"func_name": "nest"}),
              "public_test_cases": json.dumps([{"input": "2", "output": "[]",
                                                "testtype": "functional"}])}
    verdict = verifier.grade(load_problem(record), HARNESS_SHOWING)
    test = verdict.tests[0]
    assert test.status == "runtime_error", test
    shown = test.stderr_head + test.detail
    assert "boom in helper" in shown and "solution.py" in shown and "in helper" in shown
    for path in {str(ROOT), os.path.dirname(child.__file__), os.path.realpath(child.__file__),
                 "vigor_cli", "child.py", "vigor-sandbox"}:
        assert path not in shown, (path, shown)
