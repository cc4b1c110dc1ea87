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
