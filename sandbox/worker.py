"""The fork server: one per pool slot, started fresh (never forked from the trainer).

Two processes per slot:

* the **server** imports the harness and the prelude modules, sets up the worker's
  namespaces (``sandbox.namespace``), computes the Landlock allow-list and compiles the
  seccomp filter, then serves jobs from its stdin. Per job it mounts a fresh tmpfs as the
  job directory (capped in size and entries; in it ``work/``, the program's folder,
  ``tmp/``, its ``TMPDIR``, and ``shm/``, where the worker's ``/dev/shm`` points), writes
  the program there, puts stdin (and a functional test's arguments) in memfds, and hands
  them with the output pipes to the zygote; it reads stdout, stderr and status into fixed
  capture buffers (never more than their caps), kills the child at the wall-clock limit
  through a pidfd, then detaches the job's tmpfs (nothing of it, not even its root's
  attributes or its inode count, reaches the next job), removes the System V objects the
  job made, and answers with plain data. Whether the child confined itself it learns from
  one byte on a pipe the child closes before user code runs (never from an exit code).
* the **zygote** is forked by the server before any job, so it never held a job's source,
  input or output; it is the init (pid 1) of the slot's own PID namespace and mounts a
  procfs there that shows each program only itself. Per job it receives descriptors and
  limits (never data), forks the child (``sandbox.child``), passes its pidfd to the server,
  reaps it and reports its exit status and resource usage. A program cannot signal it
  (another uid, seccomp, Landlock's signal scope, and pid 1 ignores SIGKILL from inside).

Start-up cost is paid once per worker, not per test.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import importlib
import json
import mmap
import os
import select
import signal
import socket
import sys
import tempfile
import time

from vigor_cli.sandbox import protocol
from vigor_cli.sandbox.child import READY_BYTE, confine, import_prelude_modules, run_child
from vigor_cli.sandbox.limits import Limits

PRELOADED_MODULES = (
    "array", "cmath", "dataclasses", "decimal", "encodings.idna", "enum", "fractions", "hashlib",
    "numbers", "os", "queue", "struct", "threading", "time", "numpy", "sortedcontainers",
)
"""Imported by the fork server (when installed) on top of the LiveCodeBench prelude: children
start with them loaded. ``numpy`` and ``sortedcontainers`` are the only third-party packages
the Landlock allow-list lets a program read."""

WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
"""Where an unprivileged child could create files without Landlock; swept in that case."""

JOB_INODES = 4096
"""Files and directories a program may create in its job directory (a tmpfs per job)."""
JOB_SUBDIRS = ("work", "tmp", "shm")
"""A job directory's folders: the program's own (cwd, HOME), its TMPDIR, its /dev/shm."""
_READ_CHUNK = 1 << 16
_ZYGOTE_REPORT_S = 10.0


def _compile_filter() -> tuple[object | None, str]:
    """The seccomp filter compiled once, or None and why not."""
    try:
        from vigor_cli.sandbox.seccomp_filter import CompiledFilter

        return CompiledFilter(), ""
    except Exception as exc:  # ImportError (no pyseccomp/libseccomp), OSError
        return None, f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- capture buffers
class _Capture:
    """One output stream read into a fixed buffer: at most ``cap`` bytes are kept, one more
    is read to know the cap was passed. The buffer (an anonymous mapping) is reused and
    grows only to the largest cap asked for, so a program's output never grows the server
    beyond the caps."""

    def __init__(self) -> None:
        self.buffer = mmap.mmap(-1, mmap.PAGESIZE)
        self.cap = self.size = 0
        self.over = False

    def reset(self, cap: int) -> None:
        if cap + 1 > len(self.buffer):
            self.buffer.close()
            self.buffer = mmap.mmap(-1, cap + 1)
        self.cap, self.size, self.over = cap, 0, False

    def read_from(self, fd: int) -> int:
        """Read what is there: bytes read (0 at end of file), -1 if it would block."""
        if self.size > self.cap:  # already over: read and drop
            try:
                return len(os.read(fd, _READ_CHUNK))
            except BlockingIOError:
                return -1
        with memoryview(self.buffer) as view:
            try:
                got = os.readv(fd, [view[self.size:self.cap + 1]])
            except BlockingIOError:
                return -1
        self.size += got
        if self.size > self.cap:
            self.over = True
        return got

    def view(self) -> memoryview:
        return memoryview(self.buffer)[:min(self.size, self.cap)]


# --------------------------------------------------------------------------- the zygote
def _probe(settings: dict, workdir: str) -> dict:
    """Fork a throw-away child, confine it as a job's child is confined, and check that each
    layer bites. Runs in the zygote."""
    report: dict = {"uid_switch": False, "seccomp": False, "landlock": False,
                    "pid_namespace": False, "detail": []}
    read_fd, write_fd = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    pid = os.fork()
    if pid == 0:
        try:
            _probe_child(settings, workdir, null, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    os.close(null)
    data = b""
    while chunk := os.read(read_fd, 4096):
        data += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    try:
        found = json.loads(data)
    except ValueError:
        found = {"detail": ["probe child crashed"]}
    report["detail"] += found.pop("detail", [])
    report.update(found)
    return report


def _probe_child(settings: dict, workdir: str, null: int, write_fd: int) -> None:
    """The probe's child: confine, test each layer, write what it found (as JSON) to fd 3."""
    found: dict = {"detail": []}
    pipe_inode = os.fstat(write_fd).st_ino
    fds = {"stdin": null, "stdout": null, "stderr": null, "status": write_fd}
    limits = {"cpu_limit_s": 5, "file_size_mb": 1, "open_files": 64, "stack_mb": 64,
              "memory_mb": 256}
    try:
        confine(fds, workdir, limits, settings)
    except BaseException as exc:
        found["detail"].append(f"confinement failed: {type(exc).__name__}: {exc}")
        for fd in (3, write_fd):
            try:
                if os.fstat(fd).st_ino == pipe_inode:
                    os.write(fd, json.dumps(found).encode())
                    break
            except OSError:
                pass
        return
    if settings["drop_uid"]:
        found["uid_switch"] = os.getuid() == settings["uid"] == os.geteuid()
    found["stdlib_readable"] = os.access(os.path.dirname(os.__file__), os.R_OK | os.X_OK)
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        found["pid_namespace"] = os.getppid() == 1 and pids == [str(os.getpid())]
    except OSError as exc:
        found["detail"].append(f"cannot list /proc: {exc}")
    if settings.get("landlock_fd") is not None:
        _probe_landlock(settings, workdir, found)
    if settings["seccomp"]:
        _probe_seccomp(found)
    os.write(3, json.dumps(found).encode())


def _probe_landlock(settings: dict, workdir: str, found: dict) -> None:
    """Landlock must deny reading the project and writing outside the job, and allow the rest."""
    denied = 0
    for path, mode in ((settings["landlock_probe"], "rb"), (settings["landlock_probe_write"], "wb")):
        try:
            open(path, mode).close()
            if mode == "wb":
                os.unlink(path)
        except PermissionError:
            denied += 1
        except OSError:
            pass
    try:
        open(os.__file__, "rb").close()
        open(os.path.join(workdir, "probe"), "wb").close()
        readable = True
    except OSError as exc:
        readable = False
        found["detail"].append(f"Landlock hides what programs need: {exc}")
    found["landlock"] = denied == 2 and readable
    if denied != 2:
        found["detail"].append("Landlock loaded but did not deny a read or a write")


def _probe_seccomp(found: dict) -> None:
    """The seccomp filter must deny a socket and a fork."""
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
    found["seccomp"] = denied == 2
    if denied != 2:
        found["detail"].append("seccomp filter loaded but did not deny socket/fork")


def _zygote_main(sock: socket.socket, settings: dict, rules: list, probe_dir: str) -> None:
    """The zygote's life: set up /proc and Landlock, report, then fork one child per request."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the server
    sock = _high_fd_socket(sock)
    settings = dict(settings, parent_pid=os.getpid())
    detail: list[str] = []
    pid_namespace = os.getpid() == 1
    if pid_namespace:
        try:
            from vigor_cli.sandbox.namespace import mount_private_proc

            mount_private_proc()
        except OSError as exc:
            detail.append(f"could not mount a private /proc: {exc}")
    if settings.get("job_ipc"):
        why = _job_ipc_fails()
        if why:
            settings["job_ipc"] = False
            detail.append(f"no IPC namespace per job ({why}): System V objects are removed "
                          "after each job instead")
    ruleset = None
    if rules:
        try:
            from vigor_cli.sandbox.landlock import build_ruleset

            ruleset = build_ruleset(rules)
            ruleset.fd = _to_high_fd(ruleset.fd)
            settings["landlock_fd"] = ruleset.fd
            settings["landlock_abi"] = ruleset.abi
        except OSError as exc:
            detail.append(f"Landlock unavailable: {exc}")
    report = _probe(settings, probe_dir)
    report["detail"] = detail + report["detail"]
    report["landlock_abi"] = settings.get("landlock_abi", 0)
    report["job_ipc_namespace"] = bool(settings.get("job_ipc"))
    sock.send(json.dumps(report).encode())
    gc.freeze()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 4096, 8)
        except OSError:
            break
        if not message:
            break
        request = json.loads(message)
        names = request["fds"]
        fdmap = dict(zip(names, fds))
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": f"fork: {exc}"}).encode())
            continue
        if pid == 0:
            sock.close()
            run_child(request, request["workdir"], fdmap, settings)
            os._exit(125)  # unreachable: run_child never returns
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        socket.send_fds(sock, [b'{"started": true}'], [pidfd])
        os.close(pidfd)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        try:  # whatever is left of its group (only possible were seccomp missing)
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _, status, usage = os.wait4(pid, 0)
        while True:  # orphans re-parented to this init
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        sock.send(json.dumps({"status": status, "cpu_s": usage.ru_utime + usage.ru_stime,
                              "max_rss_kb": usage.ru_maxrss}).encode())
    if ruleset is not None:
        ruleset.close()


def _job_ipc_fails() -> str | None:
    """Whether a child can enter an IPC namespace of its own and size it (a fork that
    tries): None if it can, else why not. Runs in the zygote, after its procfs is mounted."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            from vigor_cli.sandbox.namespace import enter_job_ipc_namespace

            enter_job_ipc_namespace(Limits().memory_mb)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write_fd, f"{type(exc).__name__}: {exc}".encode()[:500])
        os._exit(0)
    os.close(write_fd)
    why = b""
    while chunk := os.read(read_fd, 4096):
        why += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    return why.decode("utf-8", "replace") or None


def _to_high_fd(fd: int) -> int:
    """Move ``fd`` to 64 or above, out of the way of the child's fds 0-4."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64)
    os.close(fd)
    return high


def _high_fd_socket(sock: socket.socket) -> socket.socket:
    high = _to_high_fd(sock.detach())
    return socket.socket(fileno=high)


# --------------------------------------------------------------------------- the server
class ForkServer:
    """Serves jobs one at a time; each job is one fresh child of the zygote."""

    def __init__(self, uid: int, isolation: dict, disable: set[str], keep_fds: tuple[int, ...]):
        self.uid = uid
        self.parent_pidfd: int | None = None  # the pool's pidfd, polled during a job (see main)
        root = self.root = os.geteuid() == 0
        seccomp_filter, filter_error = _compile_filter()
        self._make_dirs(root, isolation, disable)
        # System V objects a job made are removed after it, in the worker's own IPC namespace.
        self.ipc_cleanup = bool(root and isolation.get("ipc_namespace")) and "ipc_per_job" not in disable
        settings = {
            "seccomp_filter": seccomp_filter,
            "uid": uid,
            "drop_uid": root,
            "seccomp": seccomp_filter is not None and "seccomp" not in disable,
            "job_ipc": self.ipc_cleanup,  # the zygote checks it works before any job
        }
        rules: list = []
        import vigor_cli

        project = os.path.dirname(os.path.dirname(os.path.realpath(vigor_cli.__file__)))
        if "landlock" not in disable:
            from vigor_cli.sandbox.landlock import allow_list

            rules = allow_list(self.base_dir, forbidden=(project,))
            settings["landlock_probe"] = os.path.realpath(__file__)
            settings["landlock_probe_write"] = os.path.join(
                os.path.dirname(self.base_dir), f"vigor-landlock-probe-{os.getpid()}")
        pid_namespace = False
        if root and "pid_namespace" not in disable:
            try:
                from vigor_cli.sandbox.namespace import enter_pid_namespace

                enter_pid_namespace()
                pid_namespace = True
            except OSError as exc:
                isolation.setdefault("namespace_detail", []).append(str(exc))
        report = self._start_zygote(settings, rules, keep_fds)
        self.memory_mb: int | None = None
        # Each job's child has an IPC namespace of its own when the zygote could make one (sized
        # there, gone with the child); only otherwise are the worker's own limits and its
        # cleanup after each job the layer that keeps jobs apart.
        self.ipc_fallback = self.ipc_cleanup and not report.get("job_ipc_namespace")
        if self.ipc_fallback:  # after the zygote mounted its procfs: /proc/sys is writable there
            try:
                self._limit_system_v(Limits().memory_mb, fixed=True)
            except OSError as exc:
                self.ipc_cleanup = self.ipc_fallback = False
                report["detail"].append(f"could not limit System V objects: {exc}")
        report["root"] = root
        report["uid"] = uid
        report["pid_namespace"] = bool(report.get("pid_namespace")) and pid_namespace
        report["job_tmpfs"] = self.job_tmpfs
        report["ipc_per_job"] = self.ipc_cleanup
        report["dev_shm"] = self.dev_shm
        report["zygote_pid"] = self.zygote_pid
        if not root:
            report["detail"].append(
                f"not running as root (uid {os.getuid()}): programs keep this user's rights")
        if seccomp_filter is None:
            report["detail"].append(f"seccomp unavailable: {filter_error}")
        self.capabilities = report
        self.sweep = not report.get("landlock") and report.get("uid_switch")
        self.stdout, self.stderr, self.status = _Capture(), _Capture(), _Capture()
        self.runs = 0

    def _make_dirs(self, root: bool, isolation: dict, disable: set[str]) -> None:
        """The worker's base folder and in it the job folder's mount point: per job a fresh
        capped tmpfs (:meth:`_open_job`), or, where no tmpfs can be mounted, a plain folder
        emptied and reset after each job."""
        # A tmpfs when there is one: the worker's own /tmp in its mount namespace, else the
        # host's /dev/shm.
        if "/tmp" in isolation.get("private_tmp", ()):
            parent = "/tmp"
        else:
            shm = "/dev/shm"
            parent = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
        self.base_dir = tempfile.mkdtemp(prefix="vigor-sandbox-", dir=parent)
        os.chmod(self.base_dir, 0o711)  # children may enter their own dir, not list others
        self.job_dir = os.path.join(self.base_dir, "job")
        os.mkdir(self.job_dir, 0o700)
        self.job_tmpfs = False
        if root and isolation.get("mount_namespace") and "job_tmpfs" not in disable:
            from vigor_cli.sandbox.namespace import mount_job_tmpfs, unmount

            try:
                mount_job_tmpfs(self.job_dir, self.uid, Limits().disk_mb, JOB_INODES)
                unmount(self.job_dir)
                self.job_tmpfs = True
            except OSError as exc:
                isolation.setdefault("namespace_detail", []).append(str(exc))
        self.dev_shm = False
        if isolation.get("private_dev"):
            from vigor_cli.sandbox.namespace import link_dev_shm

            try:
                link_dev_shm(os.path.join(self.job_dir, "shm"))
                self.dev_shm = True
            except OSError as exc:
                isolation.setdefault("namespace_detail", []).append(f"no /dev/shm for jobs: {exc}")
        if root:
            os.chown(self.job_dir, self.uid, self.uid)

    def _open_job(self, disk_mb: int) -> None:
        """A fresh job directory: its own tmpfs (or the reset plain folder) with
        :data:`JOB_SUBDIRS`, owned by the slot's uid."""
        from vigor_cli.sandbox import namespace

        if self.job_tmpfs:
            namespace.mount_job_tmpfs(self.job_dir, self.uid, disk_mb, JOB_INODES)
        try:
            for name in JOB_SUBDIRS:
                path = os.path.join(self.job_dir, name)
                os.mkdir(path, 0o700)
                if self.root:
                    os.chown(path, self.uid, self.uid)
        except BaseException:
            self._close_job()
            raise

    def _close_job(self) -> None:
        """Drop everything the job left. A tmpfs is detached whole (a chain thousands deep, a
        full disk, attributes of its root: all gone at once); a plain folder is emptied by a
        walk that neither recurses nor builds paths, and its root's attributes are reset."""
        from vigor_cli.sandbox import namespace

        if self.job_tmpfs:
            namespace.unmount(self.job_dir)
            return
        namespace.remove_tree(self.job_dir, keep_top=True)
        namespace.reset_attributes(self.job_dir, self.uid if self.root else None)

    def _limit_system_v(self, memory_mb: int, fixed: bool = False) -> None:
        from vigor_cli.sandbox.namespace import limit_system_v

        limit_system_v(memory_mb, fixed)
        self.memory_mb = memory_mb

    def _start_zygote(self, settings: dict, rules: list, keep_fds: tuple[int, ...]) -> dict:
        """Fork the zygote (it probes the confinement in the job folder); its report."""
        server_sock, zygote_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._open_job(Limits().disk_mb)  # the probe confines a child in it
        pid = os.fork()
        if pid == 0:
            try:
                server_sock.close()
                for fd in keep_fds:
                    os.close(fd)
                _zygote_main(zygote_sock, settings, rules, os.path.join(self.job_dir, "work"))
            finally:
                os._exit(0)
        zygote_sock.close()
        self.zygote_pid = pid
        self.sock = server_sock
        hello = self.sock.recv(65536)
        report = json.loads(hello) if hello else {"detail": ["the zygote died at start"]}
        self._close_job()
        return report

    def close(self) -> None:
        """End the zygote (and with it any child) and remove the base folder. In a mount
        namespace of its own the worker's mounts vanish with it; the folder is removed for
        the case without one (the host's /dev/shm)."""
        self.sock.close()
        try:
            os.kill(self.zygote_pid, signal.SIGKILL)
            os.waitpid(self.zygote_pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass
        from vigor_cli.sandbox.namespace import remove_tree

        try:
            remove_tree(self.base_dir)
        except OSError:
            pass

    # ------------------------------------------------------------------ one job
    def run(self, job: dict) -> tuple[dict, dict]:
        """(reply, sections) for one job."""
        self.runs += 1
        memory_mb = int(job["limits"].get("memory_mb", 512))
        if self.ipc_fallback and memory_mb != self.memory_mb:
            self._limit_system_v(memory_mb)
        self._open_job(int(job["limits"].get("disk_mb", 64)))  # closed again if it raises
        workdir = os.path.join(self.job_dir, "work")
        swept, started_ns = {}, time.time_ns()
        try:
            try:
                with open(os.path.join(workdir, "solution.py"), "w", encoding="utf-8",
                          errors="surrogatepass") as f:
                    f.write(job["source"])
            except OSError as exc:  # the program's own size: its outcome, not a sandbox fault
                if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                    raise
                return {"too_large": True}, {}
            if self.sweep:
                swept = self._world_writable_mtimes()
            return self._fork_and_watch(job, workdir)
        finally:
            # Cleanup the program cannot break: it is dead, and its tmpfs is detached whole.
            self._close_job()
            if self.ipc_fallback:
                from vigor_cli.sandbox import namespace

                namespace.remove_system_v_objects()
            if self.sweep:
                self._sweep(swept, started_ns)

    def _fork_and_watch(self, job: dict, workdir: str) -> tuple[dict, dict]:
        limits = job["limits"]
        start = time.monotonic()
        pidfd, (out_r, err_r, status_r, ready_r) = self._start_child(job, workdir)
        captures = {out_r: self.stdout, err_r: self.stderr, status_r: self.status}
        self.stdout.reset(limits["stdout_cap"])
        self.stderr.reset(limits["stderr_cap"])
        self.status.reset(limits["stdout_cap"])
        for fd in captures:
            os.set_blocking(fd, False)
        open_fds = set(captures)
        timed_out = self._watch(pidfd, captures, open_fds, start + limits["timeout_s"])
        wall = time.monotonic() - start
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        ready, _, _ = select.select([self.sock], [], [], _ZYGOTE_REPORT_S)
        report = json.loads(self.sock.recv(4096) or b"{}") if ready else {}
        if "status" not in report:
            os.close(pidfd)
            raise OSError(errno.ETIMEDOUT, "the zygote did not report the child's exit")
        # The child is gone: drain what it wrote last (stopping at end of file, or when a
        # pipe would block because something outside it still holds its write end).
        for fd in list(open_fds):
            while not self._output_limited() and self._read_some(fd, captures, open_fds):
                pass
        os.set_blocking(ready_r, False)
        try:
            confined = os.read(ready_r, 1) == READY_BYTE
        except OSError:
            confined = False
        for fd in (out_r, err_r, status_r, ready_r, pidfd):
            os.close(fd)
        status = report["status"]
        reply = {
            "confined": confined,
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "timed_out": timed_out,
            "output_limited": self._output_limited(),
            "stderr_truncated": self.stderr.over,
            "wall_s": wall,
            "cpu_s": report["cpu_s"],
            "max_rss_kb": report["max_rss_kb"],
        }
        sections = {"stdout": self.stdout.view(), "stderr": self.stderr.view(),
                    "status": self.status.view()}
        return reply, sections

    def _start_child(self, job: dict, workdir: str) -> tuple[int, tuple[int, int, int, int]]:
        """Hand the job's fds to the zygote, which forks the child; (the child's pidfd,
        (stdout, stderr, status, ready) read ends)."""
        passed: dict[str, int] = {}
        stdin_fd = os.memfd_create("stdin")
        passed["stdin"] = stdin_fd
        data = memoryview(job["stdin"])
        while data:
            data = data[os.write(stdin_fd, data):]
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        if job.get("call") is not None:
            args_fd = os.memfd_create("args")
            passed["args"] = args_fd
            protocol._write_all(args_fd, job["call"]["args"].encode("utf-8", "surrogatepass"))
        out_r, passed["stdout"] = os.pipe()
        err_r, passed["stderr"] = os.pipe()
        if self.root:  # the program's own, so it can open /dev/stdout and /dev/stderr again
            for name in ("stdout", "stderr"):
                os.fchown(passed[name], self.uid, self.uid)
        status_r, passed["status"] = os.pipe()
        ready_r, passed["ready"] = os.pipe()
        request = {"fds": list(passed), "workdir": workdir,
                   "tmpdir": os.path.join(self.job_dir, "tmp"),
                   "limits": job["limits"], "call": (job.get("call") or {}).get("func_name")}
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], list(passed.values()))
        finally:
            for fd in passed.values():
                os.close(fd)
        message, fds, _, _ = socket.recv_fds(self.sock, 4096, 1)
        answer = json.loads(message) if message else {"error": "the zygote died"}
        if "error" in answer or not fds:
            for fd in (out_r, err_r, status_r, ready_r, *fds):
                os.close(fd)
            raise OSError(errno.ECHILD, answer.get("error", "no pidfd from the zygote"))
        return fds[0], (out_r, err_r, status_r, ready_r)

    def _watch(self, pidfd: int, captures: dict, open_fds: set, deadline: float) -> bool:
        """Read the child's output until it exits, its output is over the cap, the deadline
        passes (returns True) or the pool dies (the child is killed right after)."""
        poller = select.poll()
        for fd in captures:
            poller.register(fd, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        if self.parent_pidfd is not None:
            poller.register(self.parent_pidfd, select.POLLIN)
        while not self._output_limited():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            for fd, _ in poller.poll(max(1, int(remaining * 1000) + 1)):
                if fd in (pidfd, self.parent_pidfd):
                    return False  # exited, or the pool is gone: stop the program now
                if fd in open_fds and not self._read_some(fd, captures, open_fds):
                    if fd not in open_fds:
                        poller.unregister(fd)
        return False

    def _output_limited(self) -> bool:
        return self.stdout.over or self.status.over

    @staticmethod
    def _read_some(fd: int, captures: dict, open_fds: set) -> bool:
        """Read what ``fd`` has; at end of file drop it from ``open_fds``. True if it gave bytes."""
        got = captures[fd].read_from(fd)
        if got == 0:
            open_fds.discard(fd)
        return got > 0

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
        """Without Landlock: remove entries the child created (owned by its uid, made after
        it started) in the world-writable folders."""
        from vigor_cli.sandbox.namespace import remove_tree

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
                        remove_tree(entry.path)
                    else:
                        os.unlink(entry.path)
                except OSError:
                    pass


def main() -> None:
    """Serve jobs from stdin until it closes (the pool closed or died)."""
    # No PDEATHSIG here: it fires when the *thread* that started the worker ends. A dead
    # pool closes the request pipe, and the loop below ends at end of file; a pool that dies
    # during a job is seen by the lifeline (sandbox.lifeline) at once.
    uid = int(sys.argv[2]) if len(sys.argv) > 2 else 65534
    options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    disable = set(options.get("disable", []))
    import_prelude_modules()
    for name in PRELOADED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    for name in ("vigor_cli.sandbox.seccomp_filter", "vigor_cli.sandbox.landlock",
                 "vigor_cli.sandbox.namespace"):
        try:  # import before the namespaces change what the file system shows
            importlib.import_module(name)
        except ImportError:
            pass  # reported by the probe, with the reason
    isolation: dict = {}
    if os.geteuid() == 0:
        from vigor_cli.sandbox.namespace import isolate_fork_server

        isolation = isolate_fork_server(uid)  # before the server makes its dirs in /dev/shm
    requests, replies = sys.stdin.fileno(), sys.stdout.fileno()
    # Keep the protocol pipes away from fds 0/1 so nothing else writes into them.
    requests, replies = os.dup(requests), os.dup(replies)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    gc.freeze()  # the imported harness stays shared copy-on-write with every child
    server = ForkServer(uid, isolation, disable, keep_fds=(requests, replies))
    if options.get("parent_pid"):
        # A pool that dies during a job (SIGKILL included) is seen at once: the job's wait
        # also polls the pool's pidfd (no thread: the server runs under a thread limit).
        from vigor_cli.sandbox.lifeline import pidfd

        server.parent_pidfd = pidfd(int(options["parent_pid"]))
    server.capabilities["detail"].extend(isolation.pop("namespace_detail", []))
    server.capabilities.update(isolation)
    idle = select.poll()
    idle.register(requests, select.POLLIN)
    if server.parent_pidfd is not None:
        idle.register(server.parent_pidfd, select.POLLIN)
    try:
        protocol.send(replies, {"hello": {**server.capabilities, "base_dir": server.base_dir}})
        while True:
            # Waiting for a job: a dead pool ends the worker even if its request pipe stays
            # open (a process forked from the pool without exec holds the write end).
            if any(fd == server.parent_pidfd for fd, _ in idle.poll()):
                break
            job = protocol.receive(requests)
            if job is None:
                break
            try:
                reply, sections = server.run(job)
            except Exception as exc:  # a sandbox fault, reported as such (never a verdict)
                reply, sections = {"internal_error": f"{type(exc).__name__}: {exc}"}, None
            try:
                protocol.send(replies, reply, sections)
            finally:
                for view in (sections or {}).values():
                    view.release()
            if "internal_error" in reply and not _zygote_alive(server):
                break  # the pool sees the end of file and replaces this worker
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
    finally:
        server.close()
    # Leave at once: the interpreter's own shutdown (numpy, the frozen harness) took seconds
    # on a loaded machine, and everything that needed closing is closed.
    os._exit(0)


def _zygote_alive(server: ForkServer) -> bool:
    try:
        return os.waitpid(server.zygote_pid, os.WNOHANG)[0] == 0
    except ChildProcessError:
        return False
