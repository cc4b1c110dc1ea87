"""The sandbox against hostile programs: each is stopped or refused, within its limit plus
one second, and leaves no file, process or connection behind.

The whole suite runs in one parallel batch on a 2-worker pool (module fixture); each test
then checks one program's result. Isolation that is missing here makes tests FAIL, never skip.
"""

from __future__ import annotations

import os
import socket
import textwrap
import time
from pathlib import Path

import pytest

from vigor_cli.sandbox import Job, Limits, SandboxPool

TIMEOUT_S = 2.0
LIMITS = Limits(timeout_s=TIMEOUT_S, memory_mb=256, stdout_cap=4 * 1024 * 1024)
SECRET = "vigor-test-secret-4e1f"
SANDBOX_UID = 2_000_000_000
"""Where pools claim their uids (a free block of 256 from here; slot i runs as block + i)."""
MARKER = f"/tmp/vigor-hostile-{os.getpid()}"

NON_PASS = {"timeout", "memory", "exit", "signal", "output_limit", "compile_error"}


def _listener() -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    return server


LISTENER = _listener()
PORT = LISTENER.getsockname()[1]

# name -> (program, allowed outcomes, expected stdout for harmless exits or None)
HOSTILE: dict[str, tuple[str, set[str], str | None]] = {
    "endless_loop": ("while True: pass", {"timeout"}, None),
    "loop_blocking_signals": ("""
        import signal
        for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGALRM})
        while True: pass
        """, {"timeout"}, None),
    "sleep_forever": ("import time; time.sleep(10**6)", {"timeout"}, None),
    # allowed, but the segment must die with the worker's IPC namespace (checked below)
    "sysv_shared_memory": ("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print('made' if libc.shmget(0, 1 << 20, 0o1000 | 0o666) >= 0 else 'refused')
        """, {"ok"}, "made\n"),
    "stop_itself": ("import os, signal; os.kill(os.getpid(), signal.SIGSTOP)", {"timeout"}, None),
    "endless_non_daemon_thread": ("""
        import threading
        def spin():
            while True:
                pass
        threading.Thread(target=spin).start()
        print("main done")
        """, {"timeout"}, None),
    "memory_bomb_one_block": ("x = bytearray(10 ** 10)", {"memory"}, None),
    "memory_bomb_growing": ("""
        blocks = []
        while True:
            blocks.append(bytearray(10 ** 7))
        """, {"memory"}, None),
    "fork_bomb": ("import os\nwhile True: os.fork()", {"exit"}, None),
    "raw_clone_syscall": ("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(56, 17, 0, 0, 0, 0) == -1:  # clone(SIGCHLD): a new process
            raise OSError(ctypes.get_errno(), "clone refused")
        """, {"exit"}, None),
    "raw_clone3_gets_enosys": ("""
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.syscall(435, 0, 0), ctypes.get_errno() == errno.ENOSYS)  # clone3
        """, {"ok"}, "-1 True\n"),
    "subprocess": ("import subprocess; subprocess.run(['sh', '-c', 'touch " + MARKER + "-sp'])",
                   {"exit"}, None),
    "exec_shell": ("import os; os.execv('/bin/sh', ['sh', '-c', 'touch " + MARKER + "-ex'])",
                   {"exit"}, None),
    "tcp_connect": (f"""
        import socket
        socket.create_connection(("127.0.0.1", {PORT}), timeout=1)
        """, {"exit"}, None),
    "tcp6_socket": ("import socket; socket.socket(socket.AF_INET6, socket.SOCK_STREAM)",
                    {"exit"}, None),
    "udp_send": ("""
        import socket
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
        """, {"exit"}, None),
    "raw_netlink_socket": ("import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)",
                           {"exit"}, None),
    "unix_connect": ("""
        import socket
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect("/run/some.sock")
        """, {"exit"}, None),
    "bind_server": ("""
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\\0vigor-hostile")
        s.listen()
        """, {"exit"}, None),
    # refused by Landlock (the job directory is the only place a program may write)
    "write_outside_tmp": (f"open('{MARKER}', 'w').write('left behind')", {"exit"}, None),
    "write_system_file": ("open('/etc/vigor-hostile', 'w').write('x')", {"exit"}, None),
    "write_into_repo": (f"open('{Path(__file__).resolve().parent}/hostile.txt', 'w')",
                        {"exit"}, None),
    "read_shadow": ("print(open('/etc/shadow').read())", {"exit"}, None),
    "read_parent_environ": ("import os; print(open(f'/proc/{os.getppid()}/environ').read())",
                            {"exit"}, None),
    "read_parent_memory": ("import os; open(f'/proc/{os.getppid()}/mem', 'rb')", {"exit"}, None),
    # The job's own tmpfs holds work/ (cwd), tmp/ and shm/; the folder above it is the worker's.
    "list_other_runs": ("import os; print(os.listdir('../..'))", {"exit"}, None),
    "own_environment_is_scrubbed": (
        f"import os\nprint(os.environ.get('{SECRET.split('-')[0].upper()}_SECRET', 'clean'))\n"
        f"print(any('{SECRET}' in v for v in os.environ.values()))",
        {"ok"}, "clean\nFalse\n"),
    "gigabytes_of_stdout": ("import sys\nwhile True: sys.stdout.write('x' * 65536)",
                            {"output_limit"}, None),
    "gigabytes_via_os_write": ("import os\nwhile True: os.write(1, b'y' * 65536)",
                               {"output_limit"}, None),
    "endless_stderr": ("import sys\nwhile True: sys.stderr.write('e' * 65536)", {"timeout"}, None),
    "huge_file_in_cwd": ("open('big', 'wb').write(b'z' * (64 * 1024 * 1024))", {"exit", "memory"},
                         None),
    "too_many_files": ("fs = [open(f'f{i}', 'w') for i in range(10000)]", {"exit"}, None),
    "kill_parent": ("import os; os.kill(os.getppid(), 9)", {"exit"}, None),
    "kill_everything": ("import os; os.kill(-1, 9)", {"exit"}, None),
    "kill_init": ("import os; os.kill(1, 9)", {"exit"}, None),
    "ptrace_parent": ("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, os.getppid(), 0, 0) != 0:  # PTRACE_ATTACH
            raise OSError(ctypes.get_errno(), "ptrace refused")
        """, {"exit"}, None),
    "unshare_namespace": ("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
            raise OSError(ctypes.get_errno(), "unshare refused")
        """, {"exit"}, None),
    "deep_recursion": ("def f(n): return f(n + 1)\nf(0)", {"exit", "memory", "signal"}, None),
    "deep_recursion_no_limit": ("""
        import sys
        sys.setrecursionlimit(10 ** 9)
        def f(n): return f(n + 1) + 1
        f(0)
        """, {"exit", "memory", "signal", "timeout"}, None),
    "sys_exit_nonzero": ("print('partial'); raise SystemExit(3)", {"exit"}, None),
    # Harmless exits: the program's own output is graded.
    "sys_exit_zero": ("print(42)\nimport sys; sys.exit()\nprint('never')", {"ok"}, "42\n"),
    "os_exit_after_flush": ("import os, sys\nprint(7)\nsys.stdout.flush()\nos._exit(0)",
                            {"ok"}, "7\n"),
    "quit": ("print('bye')\nquit()", {"ok"}, "bye\n"),
    "threads_work": ("""
        import threading
        out = [0] * 8
        def work(i): out[i] = sum(range(i * 1000))
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(sum(out))
        """, {"ok"}, f"{sum(sum(range(i * 1000)) for i in range(8))}\n"),
    "daemon_thread_left_running": ("""
        import threading, time
        threading.Thread(target=lambda: time.sleep(100), daemon=True).start()
        print('done')
        """, {"ok"}, "done\n"),
}


def _sandbox_processes(uids: set[int]) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("Uid:") and int(line.split()[1]) in uids:
                        pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _sandbox_sockets(uids: set[int]) -> list[str]:
    lines = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            rows = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        lines += [row for row in rows if int(row.split()[7]) in uids]
    return lines


@pytest.fixture(scope="module")
def hostile_runs():
    os.environ["VIGOR_SECRET"] = SECRET
    try:
        with SandboxPool(workers=2) as pool:
            names = sorted(HOSTILE)
            jobs = [Job(textwrap.dedent(HOSTILE[n][0]), b"", LIMITS) for n in names]
            started = time.monotonic()
            runs = pool.run(jobs)
            elapsed = time.monotonic() - started
            after = pool.run_one(Job("print('still alive')", b"", LIMITS))
            # Each worker's view of the file system (its own mount namespace, if any).
            views = [(f"/proc/{w.process.pid}/root", w.capabilities["base_dir"])
                     for w in pool._workers]
            # The fork server's one child is its zygote; jobs are the zygote's children.
            zygote_pids = [w.capabilities["zygote_pid"] for w in pool._workers]
            uids = set(pool.capabilities["uids"])
            leftovers = {
                "run_dirs": [p for root, d in views for p in _job_leftovers(root + d)],
                "tmp_files": [f"{root}{tmp}/{p.name}" for root, _ in views
                              for tmp in ("/tmp", "/var/tmp", "/dev/shm")
                              if os.path.isdir(root + tmp)
                              for p in Path(root + tmp).iterdir()
                              if p.lstat().st_uid in uids],
                "children": [pid for pid in _sandbox_processes(uids)],
                "zombies": _children_of(zygote_pids),
            }
            yield {"runs": dict(zip(names, runs)), "after": after, "elapsed": elapsed,
                   "leftovers": leftovers, "pool": pool, "uids": uids}
    finally:
        del os.environ["VIGOR_SECRET"]


def _job_leftovers(base: str) -> list[str]:
    """What is left in a worker's base dir: anything but its (emptied) job directory, and
    anything inside that."""
    left = [p for p in os.listdir(base) if p != "job"]
    if os.path.isdir(os.path.join(base, "job")):
        left += [f"job/{p}" for p in os.listdir(os.path.join(base, "job"))]
    return left


def _children_of(pids: list[int]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) in pids:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def test_isolation_is_active():
    """Fails (not skips) when seccomp or the uid switch is unavailable."""
    with SandboxPool(workers=1) as pool:
        caps = pool.capabilities
        assert caps["seccomp"], f"seccomp unavailable: {caps['detail']}"
        if caps["root"]:
            assert caps["uid_switch"], f"cannot drop root: {caps['detail']}"
        assert pool.isolated
        assert caps["stdlib_readable"], caps["detail"]


def test_fork_server_namespaces():
    """Where the kernel allows it (root with CAP_SYS_ADMIN, as here), programs see no network
    interface but loopback and a private /tmp; elsewhere the pool reports why not."""
    program = "print(sorted(l.split(':')[0].strip() for l in open('/proc/self/net/dev').readlines()[2:]))"
    with SandboxPool(workers=1) as pool:
        caps = pool.capabilities
        assert caps["network_namespace"] and caps["ipc_namespace"] and caps["mount_namespace"], caps["detail"]
        assert set(caps["private_tmp"]) >= {"/tmp", "/dev/shm"}
        run = pool.run_one(Job(program, b"", LIMITS))
        assert run.outcome == "ok" and run.stdout == b"['lo']\n", run.stderr_head
        made = pool.run_one(Job(f"open('/tmp/{Path(MARKER).name}-ns', 'w').write('x')", b"", LIMITS))
        assert made.outcome == "exit" and b"PermissionError" in made.stderr  # Landlock
        assert not os.path.exists(f"{MARKER}-ns")


def test_any_installed_module_imports_and_roots_home_is_hidden():
    """Modules the fork server did not preload still import (the installation is exposed
    to the sandbox uid), and nothing else of a 0700 home directory is visible."""
    program = "import zoneinfo, sqlite3, email.mime.text, numpy.linalg\nprint('imported')"
    with SandboxPool(workers=1) as pool:
        run = pool.run_one(Job(program, b"", LIMITS))
        assert run.outcome == "ok", run.stderr_head
        for exposed in pool.capabilities.get("exposed_import_dirs", []):
            top = "/" + exposed.strip("/").split("/")[0]
            listing = pool.run_one(Job(f"import os; print(os.listdir({top!r}))", b"", LIMITS))
            if listing.outcome == "exit":  # Landlock: not even listed
                assert b"PermissionError" in listing.stderr
                continue
            assert listing.outcome == "ok"
            visible = eval(listing.stdout)  # a list of names printed by our own program
            assert set(visible) <= {exposed[len(top) + 1:].split("/")[0]}


def test_suite_is_large_enough():
    assert len(HOSTILE) >= 25


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program(hostile_runs, name):
    _, allowed, expected_stdout = HOSTILE[name]
    run = hostile_runs["runs"][name]
    assert run.outcome in allowed, (name, run.outcome, run.detail, run.stderr_head[-500:])
    assert run.wall_s <= TIMEOUT_S + 1.0, (name, run.wall_s)
    if expected_stdout is not None:
        assert run.stdout.decode() == expected_stdout, (name, run.stdout[:200])
    else:
        assert run.outcome in NON_PASS


def test_nothing_left_behind(hostile_runs):
    leftovers = hostile_runs["leftovers"]
    assert leftovers["run_dirs"] == []
    assert leftovers["tmp_files"] == [], "files written by programs were not swept"
    assert leftovers["children"] == [], "sandboxed processes still running"
    assert leftovers["zombies"] == [], "unreaped children of the fork servers"
    for suffix in ("", "-sp", "-ex"):
        assert not os.path.exists(MARKER + suffix)
    assert not os.path.exists("/etc/vigor-hostile")
    assert not (Path(__file__).resolve().parent / "hostile.txt").exists()
    uids = hostile_runs["uids"]
    leftover_tmp = [p.name for p in Path("/tmp").iterdir()
                    if p.lstat().st_uid in uids and p.name.startswith("vigor")]
    assert leftover_tmp == []
    shm_owners = [int(line.split()[7])
                  for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    assert not uids & set(shm_owners), "shared memory outlived the sandbox"
    with pytest.raises(BlockingIOError):
        LISTENER.accept()  # nobody ever connected
    assert _sandbox_sockets(uids) == []


def test_pool_survives_hostile_programs(hostile_runs):
    after = hostile_runs["after"]
    assert after.outcome == "ok" and after.stdout == b"still alive\n"


def test_hostile_batch_runs_in_parallel(hostile_runs):
    """Two workers: the batch takes about half the sum of its runs' times, plus overhead."""
    total = sum(r.wall_s for r in hostile_runs["runs"].values())
    assert hostile_runs["elapsed"] < total * 0.75 + 2.0


def test_temp_dir_is_fresh_and_private():
    program = """
import os
print(os.listdir('.'), oct(os.stat('.').st_mode & 0o777), os.getuid(), os.getgid())
open('scratch', 'w').write('x')
"""
    with SandboxPool(workers=1) as pool:
        first = pool.run_one(Job(program, b"", LIMITS))
        second = pool.run_one(Job(program, b"", LIMITS))
    assert first.outcome == "ok", first.stderr_head
    uid = pool.capabilities["uids"][0]
    assert uid >= SANDBOX_UID and (uid - SANDBOX_UID) % 256 == 0
    assert first.stdout == second.stdout == f"['solution.py'] 0o700 {uid} {uid}\n".encode()


def test_real_file_descriptors_and_stdin():
    program = """
import os, sys
data = sys.stdin.buffer.read()
os.write(1, b"raw:" + data)
sys.stdout.write("text\\n")
print(sorted(os.listdir('/proc/self/fd')) if os.access('/proc/self/fd', os.R_OK) else 'fds')
"""
    big = b"1 " * 200_000  # bigger than a pipe buffer
    with SandboxPool(workers=1) as pool:
        run = pool.run_one(Job(program, big, LIMITS))
    assert run.outcome == "ok", run.stderr_head
    assert run.stdout.startswith(b"raw:" + big)
    assert b"text\n" in run.stdout


@pytest.mark.slow
def test_cpu_limit_applies_without_wall_clock():
    """A CPU-bound program with a long wall limit is stopped by RLIMIT_CPU."""
    with SandboxPool(workers=1) as pool:
        run = pool.run_one(Job("while True: pass", b"", Limits(timeout_s=30, cpu_s=1)))
    assert run.outcome == "timeout" and "CPU" in run.detail
    # One CPU second, long before the 30 s wall clock (wall time itself follows the load).
    assert run.cpu_s < 3 and run.wall_s < 25


@pytest.mark.slow
def test_pool_replaces_a_dead_worker():
    with SandboxPool(workers=1) as pool:
        dead = pool._workers[0]
        os.kill(dead.process.pid, 9)
        dead.process.wait()
        run = pool.run_one(Job("print(5)", b"", LIMITS))
        assert run.outcome == "ok" and run.stdout == b"5\n"
        assert pool._workers[0] is not dead
        assert not os.path.exists(dead.capabilities["base_dir"])


def test_missing_isolation_is_reported_loudly_once(capsys):
    from vigor_cli.sandbox import pool as pool_module

    caps = {"seccomp": False, "uid_switch": False, "root": True, "uid": 65534,
            "detail": ["seccomp unavailable: OSError: test"]}
    pool_module._warn_once_if_degraded(caps)
    pool_module._warn_once_if_degraded(caps)
    err = capsys.readouterr().err
    assert err.count("vigor sandbox WARNING") == 1
    assert "seccomp filter NOT active" in err and "could NOT drop root" in err
    pool_module._warn_once_if_degraded({"seccomp": True, "root": False, "detail": []})
    assert "keep this user's rights" in capsys.readouterr().err


@pytest.mark.slow
def test_child_dies_with_its_fork_server():
    """A worker killed mid-run takes its sandboxed child with it (no orphan keeps sleeping)."""
    import threading

    with SandboxPool(workers=1) as pool:
        worker = pool._workers[0]
        results = []
        runner = threading.Thread(target=lambda: results.append(pool.run_one(
            Job("import time; time.sleep(1000)", b"", Limits(timeout_s=60)))))
        runner.start()
        deadline = time.monotonic() + 10
        while not _children_of([worker.process.pid]) and time.monotonic() < deadline:
            time.sleep(0.02)
        children = _children_of([worker.process.pid])
        assert children, "the sandboxed child never started"
        os.kill(worker.process.pid, 9)
        runner.join(timeout=10)
        assert results and results[0].outcome == "sandbox_error"
        deadline = time.monotonic() + 2
        while any(_running(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [pid for pid in children if _running(pid)] == []


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow
def test_harness_imported_from_under_tmp_keeps_isolation(tmp_path):
    """A checkout (or virtualenv) under /tmp, which the fork server covers with a private
    tmpfs, must stay importable there: once it was not, seccomp failed to load and every
    network and fork program ran free."""
    import shutil
    import subprocess
    import sys

    copy = Path("/tmp") / f"vigor-checkout-{os.getpid()}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(Path(__file__).resolve().parents[1] / "sandbox", copy / "sandbox",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = textwrap.dedent("""
        from vigor_cli.sandbox import Job, Limits, SandboxPool
        with SandboxPool(workers=1) as pool:
            run = pool.run_one(Job("import socket; socket.create_connection(('127.0.0.1', 9))",
                                   b"", Limits(timeout_s=5, memory_mb=256)))
            print(pool.isolated, run.outcome, sorted(pool.capabilities.get("private_tmp", [])))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120, cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(copy)})
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    isolated, outcome, private = out.stdout.split(" ", 2)
    assert isolated == "True", out.stderr[-2000:]
    assert outcome != "ok"
    assert "/tmp" in private


SIBLING_ATTACK = textwrap.dedent("""
    import ctypes, os, time
    libc = ctypes.CDLL(None, use_errno=True)
    me, uid = os.getpid(), os.getuid()
    time.sleep(0.3)  # let the victim start
    hits = []
    for name in os.listdir('/proc'):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            if os.stat(f'/proc/{pid}').st_uid != uid:
                continue
        except OSError:
            continue
        info = (ctypes.c_int * 32)(9, 0, -1)           # siginfo: SIGKILL, errno 0, SI_QUEUE
        if libc.syscall(129, pid, 9, info) == 0:       # rt_sigqueueinfo
            hits.append(('rt_sigqueueinfo', pid))
        zero = (ctypes.c_ulong * 2)(0, 0)
        if libc.syscall(302, pid, 0, zero, None) == 0:  # prlimit64(pid, RLIMIT_CPU, 0)
            hits.append(('prlimit64', pid))
        if libc.syscall(141, 0, pid, 19) == 0:          # setpriority(PRIO_PROCESS, pid, 19)
            hits.append(('setpriority', pid))
    print(hits)
""")


@pytest.mark.slow
def test_a_program_cannot_signal_or_limit_a_sibling():
    """Every child runs as the same uid: signals through rt_sigqueueinfo, prlimit64 and
    setpriority aimed at another child are denied, and the victim finishes normally."""
    victim = "import time\nfor _ in range(8): time.sleep(0.1)\nprint('alive')"
    with SandboxPool(workers=2) as pool:
        assert pool.isolated
        victim_run, attack_run = pool.run([Job(victim, b"", LIMITS), Job(SIBLING_ATTACK, b"", LIMITS)])
    assert attack_run.outcome == "ok", attack_run.stderr_head
    assert attack_run.stdout == b"[]\n"
    assert victim_run.outcome == "ok" and victim_run.stdout == b"alive\n", victim_run.stderr_head
