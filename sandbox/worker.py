"""The fork server: one per pool slot, started fresh (never forked from the trainer).

Details: docs/modules.md.
"""

from __future__ import annotations

import errno
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
import time

from vigor_cli.sandbox import protocol, zygote
from vigor_cli.sandbox.capture import Capture
from vigor_cli.sandbox.child import READY_BYTE, import_prelude_modules
from vigor_cli.sandbox.limits import Limits
from vigor_cli.sandbox.memory_cgroup import SlotCgroup, anonymous_bytes, find_parent

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


def _compile_filter() -> tuple[object | None, str]:
    """The seccomp filter compiled once, or None and why not."""
    try:
        from vigor_cli.sandbox.seccomp_filter import CompiledFilter

        return CompiledFilter(), ""
    except Exception as exc:  # ImportError (no pyseccomp/libseccomp), OSError
        return None, f"{type(exc).__name__}: {exc}"


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
        cgroup_detail = self._open_cgroup(settings, disable)
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
        if not report["memory_cgroup"]:
            self._close_cgroup()
            report["detail"].append(f"memory: rlimit only ({cgroup_detail or 'the probe found the child outside its cgroup'})")
        if not root:
            report["detail"].append(
                f"not running as root (uid {os.getuid()}): programs keep this user's rights")
        if seccomp_filter is None:
            report["detail"].append(f"seccomp unavailable: {filter_error}")
        self.capabilities = report
        self.sweep = not report.get("landlock") and report.get("uid_switch")
        self.stdout, self.stderr, self.status = Capture(), Capture(), Capture()
        self.runs = 0
        """Jobs run so far; the current job's id in the zygote's messages."""
        self.late_job: int | None = None
        """A job whose exit report did not come in time (the next job waits for it first)."""

    def _open_cgroup(self, settings: dict, disable: set[str]) -> str:
        """The slot's memory cgroup (``sandbox.memory_cgroup``), its limit set for a default
        job, and what the zygote's children need to join it; or why there is none (then the
        address-space limit stays). The limit counts what a program adds to what it starts
        with: the anonymous memory it shares with the zygote (a fork of this server) and may
        copy on write, as the address-space limit counted its own size."""
        self.cgroup: SlotCgroup | None = None
        self.oom_kills = 0
        if "memory_cgroup" in disable:
            return "turned off"
        parent, why = find_parent()
        if parent is None:
            return why
        try:
            self.cgroup = SlotCgroup(parent, f"slot-{self.uid}" if self.root else f"pid-{os.getpid()}")
            self.inherited_bytes = anonymous_bytes()
            self.cgroup.set_limit(self._cgroup_limit(Limits().memory_mb))
            self.oom_kills = self.cgroup.oom_kills()
        except (OSError, ValueError) as exc:
            self._close_cgroup()
            return f"no memory cgroup below {parent.path}: {exc}"
        settings.update(cgroup_fd=self.cgroup.procs_fd, cgroup_usage_fd=self.cgroup.usage_fd,
                        cgroup_version=self.cgroup.version, cgroup_name=os.path.basename(self.cgroup.path))
        return ""

    def _cgroup_limit(self, memory_mb: int) -> int:
        return (memory_mb << 20) + self.inherited_bytes

    def _close_cgroup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.close()
            self.cgroup = None

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
                zygote.zygote_main(zygote_sock, settings, rules, os.path.join(self.job_dir, "work"))
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
        """End the zygote (and with it any child), remove the slot's memory cgroup and the
        base folder. In a mount namespace of its own the worker's mounts vanish with it; the
        folder is removed for the case without one (the host's /dev/shm)."""
        self.sock.close()
        try:
            os.kill(self.zygote_pid, signal.SIGKILL)
            os.waitpid(self.zygote_pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass
        self._close_cgroup()
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
        if self.cgroup is not None:
            self.cgroup.set_limit(self._cgroup_limit(memory_mb))
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
        report, _ = zygote.await_reply(self.sock, self.runs, "exit", zygote.REPORT_WAIT_S)
        if report is None:  # the next job waits for it first (:meth:`_catch_up`)
            self.late_job = self.runs
            for fd in (out_r, err_r, status_r, ready_r, pidfd):
                os.close(fd)
            raise OSError(errno.ETIMEDOUT, f"the zygote did not report the child's exit within "
                                           f"{zygote.REPORT_WAIT_S:g} s")
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
            "oom_killed": self._oom_killed(),
        }
        sections = {"stdout": self.stdout.view(), "stderr": self.stderr.view(),
                    "status": self.status.view()}
        return reply, sections

    def _catch_up(self) -> None:
        """Before a job: if the last job's exit report came late, wait for it (the zygote
        serves the next request only after sending it) and drop it. A zygote that never
        sends it is stuck: it is killed, and the worker ends for the pool to replace."""
        if self.late_job is None:
            return
        report, _ = zygote.await_reply(self.sock, self.late_job, "exit", zygote.LATE_REPORT_WAIT_S)
        if report is None:
            os.kill(self.zygote_pid, signal.SIGKILL)
            os.waitpid(self.zygote_pid, 0)
            raise OSError(errno.ETIMEDOUT, f"the zygote sent no report of job {self.late_job} "
                                           f"within {zygote.LATE_REPORT_WAIT_S:g} s: it is stuck")
        self.late_job = None

    def _start_child(self, job: dict, workdir: str) -> tuple[int, tuple[int, int, int, int]]:
        """Hand the job's fds to the zygote, which forks the child; (the child's pidfd,
        (stdout, stderr, status, ready) read ends)."""
        self._catch_up()
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
        request = {"job": self.runs, "fds": list(passed), "workdir": workdir,
                   "tmpdir": os.path.join(self.job_dir, "tmp"),
                   "limits": job["limits"], "call": (job.get("call") or {}).get("func_name")}
        try:
            zygote.send_request(self.sock, request, list(passed.values()))
        finally:
            for fd in passed.values():
                os.close(fd)
        answer, fds = None, []
        try:
            answer, fds = zygote.await_reply(self.sock, self.runs, "started", zygote.REPORT_WAIT_S)
        finally:
            if answer is None or answer["kind"] != "started" or not fds:
                for fd in (out_r, err_r, status_r, ready_r, *fds):
                    os.close(fd)
        if answer is None:
            raise OSError(errno.ETIMEDOUT, f"the zygote did not start the child within "
                                           f"{zygote.REPORT_WAIT_S:g} s")
        if answer["kind"] != "started" or not fds:
            raise OSError(errno.ECHILD, answer.get("error", "no pidfd from the zygote"))
        return fds[0], (out_r, err_r, status_r, ready_r)

    def _oom_killed(self) -> bool:
        """Whether the kernel killed a program for the slot's memory cgroup since the last look."""
        if self.cgroup is None:
            return False
        before, self.oom_kills = self.oom_kills, self.cgroup.oom_kills()
        return self.oom_kills > before

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
