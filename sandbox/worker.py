"""The fork server: one per pool slot, started fresh (never forked from the trainer).

It imports the harness and the prelude modules once, probes whether the uid
switch and seccomp work, then serves jobs from its stdin: per job it forks a
child (:mod:`sandbox.child`) in a fresh temp dir, feeds its stdin from a memfd,
reads stdout/stderr/status with byte caps, kills the whole process group at the
wall-clock limit or on exit, reaps it with its resource usage, removes the temp
dir and any file the child left in the world-writable directories, and answers
with plain data. Start-up cost is paid once per worker, not per test.
"""

from __future__ import annotations

import errno
import gc
import importlib
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import time

from vigor_cli.sandbox import protocol
from vigor_cli.sandbox.child import import_prelude_modules, run_child

PRELOADED_MODULES = (
    "array", "cmath", "dataclasses", "decimal", "encodings.idna", "enum", "fractions", "hashlib",
    "numbers", "os", "queue", "struct", "threading", "time", "numpy", "sortedcontainers",
)
"""Imported by the fork server (when installed) on top of the LiveCodeBench prelude: children
start with them loaded, and they stay importable even where the sandbox uid cannot read the
Python installation (e.g. a pyenv under /root, mode 0700)."""

WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
"""Where an unprivileged child can still create files; swept for its leftovers."""

_READ_CHUNK = 1 << 16


def _compile_filter() -> tuple[object | None, str]:
    """The seccomp filter compiled once, or None and why not."""
    try:
        from vigor_cli.sandbox.seccomp_filter import CompiledFilter

        return CompiledFilter(), ""
    except Exception as exc:  # ImportError (no pyseccomp/libseccomp), OSError
        return None, f"{type(exc).__name__}: {exc}"


def _probe(uid: int, seccomp_filter, filter_error: str) -> dict:
    """Fork a throw-away child, confine it, and check that the confinement bites."""
    root = os.geteuid() == 0
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        report = {"uid_switch": False, "seccomp": False, "detail": []}
        try:
            os.close(read_fd)
            if root:
                try:
                    os.setgroups([])
                    os.setresgid(uid, uid, uid)
                    os.setresuid(uid, uid, uid)
                    report["uid_switch"] = os.getuid() == uid and os.geteuid() == uid
                except OSError as exc:
                    report["detail"].append(f"uid switch to {uid} failed: {exc}")
            else:
                report["detail"].append(
                    f"not running as root (uid {os.getuid()}): programs keep this user's rights"
                )
            stdlib = os.path.dirname(os.__file__)
            if not os.access(stdlib, os.R_OK | os.X_OK):
                report["detail"].append(
                    f"uid {os.getuid()} cannot read {stdlib}: programs can import only the "
                    "modules the fork server preloads (grant search permission on the "
                    "directories above it to fix)"
                )
            report["stdlib_readable"] = os.access(stdlib, os.R_OK | os.X_OK)
            try:
                import socket

                if seccomp_filter is None:
                    raise OSError(filter_error)
                seccomp_filter.load(os.getpid())
                denied = 0
                try:
                    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
                except PermissionError:
                    denied += 1
                try:
                    child = os.fork()
                    if child == 0:
                        os._exit(0)
                    os.waitpid(child, 0)
                except PermissionError:
                    denied += 1
                report["seccomp"] = denied == 2
                if denied != 2:
                    report["detail"].append("seccomp filter loaded but did not deny socket/fork")
            except Exception as exc:  # OSError from prctl, or no compiled filter
                report["detail"].append(f"seccomp unavailable: {exc}")
            os.write(write_fd, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    data = b""
    while chunk := os.read(read_fd, 4096):
        data += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    try:
        report = json.loads(data)
    except ValueError:
        report = {"uid_switch": False, "seccomp": False, "detail": ["probe child crashed"]}
    report["root"] = root
    report["uid"] = uid
    return report


class ForkServer:
    """Serves jobs one at a time; each job is one fresh child process."""

    def __init__(self, uid: int):
        self.uid = uid
        seccomp_filter, filter_error = _compile_filter()
        self.capabilities = _probe(uid, seccomp_filter, filter_error)
        self.settings = {
            "seccomp_filter": seccomp_filter,
            "uid": uid,
            "drop_uid": self.capabilities["uid_switch"],
            "seccomp": self.capabilities["seccomp"],
            "server_pid": os.getpid(),
        }
        # tmpfs when there is one: a run's mkdir/write/rmtree costs ~0.1 ms there against
        # ~3 ms on disk, and a program can already write to /dev/shm anyway.
        shm = "/dev/shm"
        parent = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
        self.base_dir = tempfile.mkdtemp(prefix="vigor-sandbox-", dir=parent)
        os.chmod(self.base_dir, 0o711)  # children may enter their own dir, not list others
        self.runs = 0

    def close(self) -> None:
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # ------------------------------------------------------------------ one job
    def run(self, job: dict) -> dict:
        self.runs += 1
        workdir = os.path.join(self.base_dir, f"run-{self.runs}")
        os.mkdir(workdir, 0o700)
        with open(os.path.join(workdir, "solution.py"), "w", encoding="utf-8",
                  errors="surrogatepass") as f:
            f.write(job["source"])
        if self.settings["drop_uid"]:
            os.chown(workdir, self.uid, self.uid)
        swept = self._world_writable_mtimes()
        started_ns = time.time_ns()
        try:
            return self._fork_and_watch(job, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            self._sweep(swept, started_ns)

    def _fork_and_watch(self, job: dict, workdir: str) -> dict:
        limits = job["limits"]
        stdin_fd = os.memfd_create("stdin")
        data = memoryview(job["stdin"])
        while data:
            data = data[os.write(stdin_fd, data):]
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            run_child(job, workdir,
                      {"stdin": stdin_fd, "stdout": out_w, "stderr": err_w, "status": status_w},
                      self.settings)
            os._exit(125)  # unreachable: run_child never returns
        for fd in (stdin_fd, out_w, err_w, status_w):
            os.close(fd)
        pidfd = os.pidfd_open(pid)

        caps = {out_r: limits["stdout_cap"], err_r: limits["stderr_cap"],
                status_r: limits["stdout_cap"]}
        kept = {out_r: bytearray(), err_r: bytearray(), status_r: bytearray()}
        over = {out_r: False, err_r: False, status_r: False}
        poller = select.poll()
        for fd in kept:
            os.set_blocking(fd, False)
            poller.register(fd, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        open_fds = set(kept)
        deadline = start + limits["timeout_s"]
        exited = timed_out = output_limited = False

        def read_some(fd: int) -> bool:
            """Read what is there; False when nothing was (end of file or would block)."""
            nonlocal output_limited
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                return False
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
                return False
            room = caps[fd] - len(kept[fd])
            kept[fd] += chunk[:max(room, 0)]
            if len(chunk) > room:
                over[fd] = True
                if fd != err_r:
                    output_limited = True
            return True

        while not exited and not output_limited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for fd, _ in poller.poll(max(1, int(remaining * 1000) + 1)):
                if fd == pidfd:
                    exited = True
                elif fd in open_fds:
                    read_some(fd)
        wall = time.monotonic() - start
        # Kill whatever is left (the group, then the pid in case setsid never ran).
        for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
        _, status, usage = os.wait4(pid, 0)
        # The child is gone: drain what it wrote last (stopping at end of file, or when a
        # pipe would block because something outside the group still holds its write end).
        for fd in list(open_fds):
            while not output_limited and read_some(fd):
                pass
        for fd in (out_r, err_r, status_r, pidfd):
            os.close(fd)
        return {
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "timed_out": timed_out,
            "output_limited": output_limited,
            "stdout": bytes(kept[out_r]),
            "stderr": bytes(kept[err_r]),
            "stderr_truncated": over[err_r],
            "status": bytes(kept[status_r]),
            "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_kb": usage.ru_maxrss,
        }

    # ------------------------------------------------------------------ leftovers
    @staticmethod
    def _world_writable_mtimes() -> dict:
        mtimes = {}
        for path in WORLD_WRITABLE_DIRS:
            try:
                mtimes[path] = os.stat(path).st_mtime_ns
            except OSError:
                pass
        return mtimes

    def _sweep(self, before: dict, started_ns: int) -> None:
        """Remove entries the child created (owned by the sandbox uid, made after it started)."""
        if not self.settings["drop_uid"]:
            return
        for path, mtime in before.items():
            try:
                if os.stat(path).st_mtime_ns == mtime:
                    continue
                entries = list(os.scandir(path))
            except OSError:
                continue
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                    if info.st_uid != self.uid or info.st_ctime_ns < started_ns - 1_000_000_000:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)
                except OSError:
                    pass


def main() -> None:
    """Serve jobs from stdin until it closes (the pool closed or died)."""
    # No PDEATHSIG here: it fires when the *thread* that started the worker ends. A dead
    # pool closes the request pipe instead, and the loop below ends at end of file.
    uid = int(sys.argv[2]) if len(sys.argv) > 2 else 65534
    import_prelude_modules()
    for name in PRELOADED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    try:  # import before the namespaces change what the file system shows
        importlib.import_module("vigor_cli.sandbox.seccomp_filter")
    except ImportError:
        pass  # reported by the probe, with the reason
    isolation = {}
    if os.geteuid() == 0:
        from vigor_cli.sandbox.namespace import isolate_fork_server

        isolation = isolate_fork_server(uid)  # before the server makes its dirs in /dev/shm
    server = ForkServer(uid)
    server.capabilities["detail"].extend(isolation.pop("namespace_detail", []))
    server.capabilities.update(isolation)
    requests, replies = sys.stdin.fileno(), sys.stdout.fileno()
    # Keep the protocol pipes away from fds 0/1 so nothing else writes into them.
    requests, replies = os.dup(requests), os.dup(replies)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    gc.freeze()  # the imported harness stays shared copy-on-write with every child
    try:
        protocol.send(replies, {"hello": {**server.capabilities, "base_dir": server.base_dir}})
        while True:
            job = protocol.receive(requests)
            if job is None:
                break
            try:
                reply = server.run(job)
            except OSError as exc:
                reply = {"internal_error": f"{type(exc).__name__}: {exc}"}
            protocol.send(replies, reply)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
    finally:
        server.close()
