"""Hostile programs that try to earn reward without computing the answer, or to harm a
program running beside them (issue 12). Each test asserts the verdict, that a concurrent
correct program still passes, and that nothing is left behind.

Every attack here was run against the sandbox before the fix (fork server without a
zygote, no Landlock, one uid for every program, a shared IPC namespace per worker,
recursive ``rmtree`` cleanup, unbounded output buffers) and each test failed there.
"""

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

ROOT = Path(__file__).resolve().parents[1]
TOKEN = f"v{os.getpid() % 100000}"
"""Unique per test session: names of files and processes the attacks make or target, so an
attack run before the fix could never touch another user's sandbox."""
LIMITS = Limits(timeout_s=6.0, memory_mb=256)


def _record(qid: str, tests: list[tuple[str, str]], private: list[tuple[str, str]] = ()) -> dict:
    as_json = lambda pairs: json.dumps([{"input": i, "output": o, "testtype": "stdin"}  # noqa: E731
                                        for i, o in pairs])
    return {"question_id": qid, "question_title": qid, "question_content": "Print the answer.",
            "platform": "atcoder", "contest_id": "x", "contest_date": "2026-01-01T00:00:00",
            "difficulty": "easy", "starter_code": "", "metadata": "{}",
            "public_test_cases": as_json(tests), "private_test_cases": as_json(private)}


# The "secret" problem: its answers are no function a program could guess.
SECRET_TESTS = [(f"{n}\n", f"{(n * 7919 + 104729) % 1000003}-{TOKEN}\n") for n in (11, 23, 37)]
SECRET = _record(f"secret-{TOKEN}", SECRET_TESTS)
SECRET_SOLUTION = f"n = int(input())\nprint(f'{{(n * 7919 + 104729) % 1000003}}-{TOKEN}')\n"

# A correct program that runs beside each attack for about a second, then answers.
VICTIM = _record("victim", [("5\n", "10\n"), ("21\n", "42\n")])
VICTIM_SOLUTION = "import time\nn = int(input())\ntime.sleep(0.8)\nprint(2 * n)\n"


def _sandbox_uids(pool: SandboxPool) -> set[int]:
    caps = pool.capabilities
    return set(caps.get("uids") or []) | {caps.get("uid", 65534)}


def _processes_of(uids: set[int]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("Uid:") and int(line.split()[1]) in uids:
                        found.append(int(entry.name))
            except (OSError, ValueError):
                pass
    return found


def _assert_nothing_left(pool: SandboxPool, names: tuple[str, ...] = ()) -> None:
    """No sandboxed process alive, no run directory, no file in the host's writable folders,
    no System V object of a sandbox uid visible from the host."""
    uids = _sandbox_uids(pool)
    deadline = time.monotonic() + 2
    while _processes_of(uids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_of(uids) == [], "sandboxed processes still running"
    for worker in pool._workers:
        base = f"/proc/{worker.process.pid}/root{worker.capabilities['base_dir']}"
        assert _job_leftovers(base) == [], "run dirs left"
    for folder in ("/run/lock", "/var/tmp", "/dev/shm", "/tmp"):
        if os.path.isdir(folder):
            left = [p.name for p in Path(folder).iterdir()
                    if TOKEN in p.name or _owner(p) in uids]
            assert left == [], f"left in the host's {folder}: {left}"
    for table in ("shm", "msg", "sem"):
        rows = Path(f"/proc/sysvipc/{table}").read_text().splitlines()[1:]
        assert [r for r in rows if int(r.split()[7 if table != "sem" else 4]) in uids] == []
    for name in names:
        assert not os.path.exists(name), name


def _owner(path: Path) -> int:
    try:
        return path.lstat().st_uid
    except OSError:
        return -1


def _grade_beside_victim(verifier: CodeVerifier, attack: str, problem: dict = SECRET,
                         tests: str = "public"):
    """Grade ``attack`` on ``problem`` while the victim runs on the other worker."""
    attack_verdict, victim_verdict = verifier.grade_many([
        (load_problem(problem), attack, tests), (load_problem(VICTIM), VICTIM_SOLUTION, "public")])
    assert victim_verdict.full == 1.0, ("the concurrent correct program failed",
                                        victim_verdict.reason, victim_verdict.tests[0].stderr_head)
    return attack_verdict


@pytest.fixture(scope="module")
def verifier():
    with CodeVerifier(workers=2, timeout_s=6.0, memory_mb=256) as v:
        yield v


# --------------------------------------------------------------------------- reading the answer
CMDLINE_ATTACK = """
import json, os, sys
data = sys.stdin.read()
for pid in os.listdir('/proc'):
    if not pid.isdigit():
        continue
    try:
        argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')
    except OSError:
        continue
    for i, arg in enumerate(argv[:-1]):
        if arg == b'--problem':
            try:
                record = json.loads(open(argv[i + 1].decode()).read())
            except (OSError, ValueError):
                continue
            for test in json.loads(record['public_test_cases']):
                if test['input'] == data:
                    print(test['output'], end='')
                    sys.exit(0)
print('no answer found')
"""


@pytest.fixture
def readable_dir():
    """A folder every uid may read, outside /tmp (the grader's private tmpfs covers /tmp)."""
    folder = Path(f"/var/lib/vigor-test-{TOKEN}")
    folder.mkdir(mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)
    yield folder
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()


@pytest.mark.slow
def test_grader_command_line_does_not_reveal_the_problem_file(readable_dir):
    """The attack reads /proc/<pid>/cmdline of `vigor verify code`, opens the --problem file
    it names and prints the expected output. Run through the real CLI beside a correct run."""
    problem = readable_dir / "problem.json"
    problem.write_text(json.dumps(SECRET))
    os.chmod(problem, 0o644)
    (readable_dir / "attack.py").write_text(CMDLINE_ATTACK)
    (readable_dir / "correct.py").write_text(SECRET_SOLUTION)

    def cli(solution: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "vigor_cli", "verify", "code", "--problem",
                                 str(problem), "--solution", str(readable_dir / solution),
                                 "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    runs = [cli("correct.py"), cli("attack.py")]
    outs = [run.communicate(timeout=120) for run in runs]
    for run, (out, err) in zip(runs, outs):
        assert run.returncode == 0, err[-2000:]
    correct, attack = (json.loads(out) for out, _ in outs)
    assert correct["full"] == 1.0, correct["reason"]
    assert attack["full"] == 0.0, ("the program read the answer from the grader's command line",
                                   attack["reason"])
    assert attack["isolation"] == correct["isolation"] == "full"
    for folder in ("/run/lock", "/var/tmp", "/dev/shm", "/tmp"):
        assert [p for p in os.listdir(folder) if TOKEN in p] == [], folder


DISK_WALK_ATTACK = """
import json, os, sys, time
data = sys.stdin.read()
needle = data.split()[0].encode() if data.split() else b'input'
start = time.monotonic()
roots = ['/var/lib', '/work', '/srv', '/opt', '/home', '/root', '/mnt', '/data', '/']
seen = set()
for root in roots:
    for folder, dirs, files in os.walk(root):
        if time.monotonic() - start > 3 or folder in seen:
            dirs[:] = []
            continue
        seen.add(folder)
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in ('/proc', '/sys', '/dev', '/usr')]
        for name in files:
            if not name.endswith(('.json', '.jsonl')):
                continue
            try:
                blob = open(os.path.join(folder, name), 'rb').read(1 << 22)
            except OSError:
                continue
            if needle not in blob:
                continue
            for line in blob.decode('utf-8', 'replace').splitlines() or [blob.decode()]:
                try:
                    record = json.loads(line)
                    tests = json.loads(record['public_test_cases'])
                except Exception:
                    continue
                for test in tests:
                    if test['input'] == data:
                        print(test['output'], end='')
                        sys.exit(0)
print('no answer found')
"""


def test_disk_walk_finds_no_dataset(verifier, readable_dir):
    """An LCB-style JSONL file readable by everyone is out of the program's reach."""
    dataset = readable_dir / "lcb_release.jsonl"
    dataset.write_text(json.dumps(VICTIM) + "\n" + json.dumps(SECRET) + "\n")
    os.chmod(dataset, 0o644)
    verdict = _grade_beside_victim(verifier, DISK_WALK_ATTACK)
    assert verdict.full == 0.0, ("the program found the dataset on disk", verdict.reason)
    assert verdict.isolation == "full"
    _assert_nothing_left(verifier.pool)


IMPORT_ATTACK = """
import json, sys
data = sys.stdin.read()
from vigor_cli.tasks import tiny_code
for record in tiny_code.all_records():
    if record['question_title'] == TITLE:
        for test in json.loads(record['public_test_cases']) + json.loads(record['private_test_cases']):
            if test['input'] == data:
                print(test['output'], end='')
                sys.exit(0)
print('no answer found')
"""


def test_project_task_code_cannot_be_imported(verifier):
    """tiny-code's generator would regenerate every expected output; the program cannot
    import it (nor read any of the project's modules)."""
    from vigor_cli.tasks import tiny_code

    record = tiny_code.all_records()[5]
    attack = f"TITLE = {record['question_title']!r}\n" + IMPORT_ATTACK
    verdict = _grade_beside_victim(verifier, attack, record, "all")
    assert verdict.full == 0.0, ("the program imported the project's task code", verdict.reason)
    reading = verifier.pool.run_one(Job(
        f"print(open({str(ROOT / 'vigor_cli' / 'tasks' / 'tiny_code.py')!r}).read()[:40])",
        b"", LIMITS))
    assert reading.outcome == "exit" and b"PermissionError" in reading.stderr, (
        reading.outcome, reading.detail, reading.stdout[:200])
    _assert_nothing_left(verifier.pool)


# --------------------------------------------------------------------------- reading a neighbour
MEMORY_ATTACK = """
import ctypes, re, sys
sys.stdin.read()
pattern = re.compile(rb'NEIGH' rb'BOUR:(\\d{7,})')
found = None
try:
    maps = open('/proc/self/maps').read().splitlines()
except OSError:
    maps = []
for line in maps:
    fields = line.split()
    start, end = (int(x, 16) for x in fields[0].split('-'))
    if not fields[1].startswith('rw') or (len(fields) > 5 and not fields[5].startswith('[heap')):
        continue
    try:
        blob = ctypes.string_at(start, end - start)
    except Exception:
        continue
    match = pattern.search(blob)
    if match:
        found = match.group(0).decode()
        break
print(found)
"""


@pytest.mark.slow
def test_no_job_sees_a_previous_job_or_another_submission():
    """A correct submission prints its answer; a later program scans its own memory (a fork
    of the fork server) for it, and for the other submission of the same batch."""
    n = 4_000_000 + os.getpid()
    record = _record("neighbour", [("1\n", f"NEIGHBOUR:{n}\n")])
    correct = f"input()\nprint('NEIGHBOUR:' + str({n - 7} + 7))\n"
    with CodeVerifier(workers=1, timeout_s=6.0, memory_mb=256) as one_worker:
        problem = load_problem(record)
        first, second = one_worker.grade_many([(problem, correct, "public"),
                                               (problem, MEMORY_ATTACK, "public")])
        assert first.full == 1.0, first.reason
        assert second.full == 0.0, ("a program returned another submission's output",
                                    second.reason)
        later = one_worker.grade(problem, MEMORY_ATTACK, "public")
        assert later.full == 0.0, ("a program returned a previous job's output", later.reason)
        _assert_nothing_left(one_worker.pool)


# --------------------------------------------------------------------------- harming a neighbour
VICTIM_NAMED = f"""
import ctypes, time
ctypes.CDLL(None).prctl(15, b'{TOKEN}-victim', 0, 0, 0)
n = int(input())
time.sleep(1.2)
print(2 * n)
"""

SETOWN_ATTACK = f"""
import fcntl, os, time
time.sleep(0.3)
hits = []
for name in os.listdir('/proc'):
    if not name.isdigit() or int(name) == os.getpid():
        continue
    try:
        if open(f'/proc/{{name}}/comm').read().strip() != '{TOKEN}-victim':
            continue
    except OSError:
        continue
    r, w = os.pipe()
    try:
        fcntl.fcntl(r, fcntl.F_SETOWN, int(name))
        fcntl.fcntl(r, 10, 9)                       # F_SETSIG: SIGKILL instead of SIGIO
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
        os.write(w, b'x')                           # the kernel now sends the signal
        hits.append(int(name))
    except OSError as exc:
        pass
time.sleep(0.2)
print(hits)
"""


def _victim_beside(pool: SandboxPool, attack: str) -> tuple:
    victim, attacker = pool.run([Job(VICTIM_NAMED, b"21\n", LIMITS), Job(attack, b"", LIMITS)])
    assert victim.outcome == "ok" and victim.stdout == b"42\n", (
        "the concurrent correct program was harmed", victim.outcome, victim.detail,
        victim.stderr_head)
    return victim, attacker


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def test_fsetown_sigkill_cannot_reach_a_concurrent_program(pool):
    _, attacker = _victim_beside(pool, SETOWN_ATTACK)
    assert attacker.outcome == "ok" and attacker.stdout == b"[]\n", attacker.stdout
    _assert_nothing_left(pool)


def test_fcntl_owner_and_signal_are_refused(pool):
    """The seccomp layer on its own: F_SETOWN, F_SETOWN_EX, F_SETSIG and ioctl FIOSETOWN fail
    even aimed at the program itself."""
    program = """
import ctypes, fcntl, os
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
out = []
for cmd, arg in ((8, os.getpid()), (10, 9)):
    try:
        fcntl.fcntl(r, cmd, arg)
        out.append('allowed')
    except OSError:
        out.append('refused')
owner = (ctypes.c_int * 2)(0, os.getpid())
out.append('refused' if libc.fcntl(r, 15, owner) == -1 else 'allowed')   # F_SETOWN_EX
pid = ctypes.c_int(os.getpid())
out.append('refused' if libc.ioctl(r, 0x8901, ctypes.byref(pid)) == -1 else 'allowed')  # FIOSETOWN
print(out)
"""
    run = pool.run_one(Job(program, b"", LIMITS))
    assert run.outcome == "ok", run.stderr_head
    assert run.stdout == b"['refused', 'refused', 'refused', 'refused']\n"


PRIO_ATTACK = """
import os, time
time.sleep(0.2)
out = []
for which in (os.PRIO_USER, os.PRIO_PGRP):
    try:
        os.setpriority(which, 0, 19)
        out.append('reniced')
    except OSError:
        out.append('refused')
print(out)
"""

VICTIM_NICE = """
import os, time
time.sleep(0.8)
print(os.getpriority(os.PRIO_PROCESS, 0))
"""


def test_prio_user_cannot_renice_a_concurrent_program(pool):
    victim, attacker = pool.run([Job(VICTIM_NICE, b"", LIMITS), Job(PRIO_ATTACK, b"", LIMITS)])
    own = os.getpriority(os.PRIO_PROCESS, 0)  # the pool's workers inherit this process's
    assert victim.outcome == "ok" and victim.stdout == f"{own}\n".encode(), (
        "the victim was reniced", victim.stdout)
    assert attacker.stdout == b"['refused', 'refused']\n", attacker.stdout
    _assert_nothing_left(pool)


THREAD_ATTACK = """
import _thread, ctypes, threading, time
ctypes.CDLL(None).mallopt(-8, 1)             # M_ARENA_MAX: no 64 MiB arena per thread
threading.stack_size(65536)
end = time.monotonic() + 1.8
count = 0
def hold():
    time.sleep(max(0.0, end - time.monotonic()))
while time.monotonic() < end - 0.3 and count < 4000:
    try:
        _thread.start_new_thread(hold, ())   # keep taking every process slot that frees up
        count += 1
    except (RuntimeError, MemoryError):
        time.sleep(0.0005)
time.sleep(max(0.0, end - time.monotonic()) + 0.1)
print(count)
"""

VICTIM_THREAD = """
import threading, time
n = int(input())
time.sleep(0.7)
out = []
t = threading.Thread(target=lambda: out.append(2 * n))
t.start(); t.join()
print(out[0])
"""


def test_thread_exhaustion_does_not_starve_a_concurrent_program(pool):
    victim, attacker = pool.run([Job(VICTIM_THREAD, b"21\n", LIMITS),
                                 Job(THREAD_ATTACK, b"", LIMITS)])
    assert victim.outcome == "ok" and victim.stdout == b"42\n", (
        "the victim could not start a thread", victim.detail, victim.stderr_head)
    assert attacker.outcome in ("ok", "exit", "memory"), attacker.detail
    _assert_nothing_left(pool)


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
