"""The zygote, and the messages it exchanges with its fork server.

The zygote is forked by the server before any job, so it never holds a job's source, input
or output; it is the init (pid 1) of the slot's own PID namespace and mounts a procfs there
that shows each program only itself (:func:`zygote_main`). It probes the confinement once
(``sandbox.probe``), then serves requests: per job it receives descriptors and limits (never
data), forks the child (``sandbox.child``), passes its pidfd to the server, reaps it and
reports its exit status and resource usage.

Details: docs/modules.md.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import json
import os
import select
import signal
import socket
import time

from vigor_cli.sandbox.child import run_child
from vigor_cli.sandbox.memory_cgroup import join
from vigor_cli.sandbox.probe import (
    SHARED_COUNTED_SHARE, SHARED_PROBE_BYTES, job_ipc_fails, probe, shared_memory_charges,
)

OOM_SCORE_ADJ_MIN = -1000
"""The kernel's "never kill this one for memory"."""
REPORT_WAIT_S = 10.0
"""How long the server waits for each answer of the zygote before the job is a sandbox error."""
LATE_REPORT_WAIT_S = 20.0
"""How long the next job waits for a late report before it declares the zygote stuck (the
worker then ends, and the pool replaces it: within its own wait, the job's limit + 30 s)."""
_MESSAGE_BYTES = 4096


# --------------------------------------------------------------------------- the server's side
def send_request(sock: socket.socket, request: dict, fds: list[int]) -> None:
    """A job's request (with ``request["job"]``, its id) and the descriptors it names."""
    socket.send_fds(sock, [json.dumps(request).encode()], fds)


def await_reply(sock: socket.socket, job: int, kind: str,
                wait_s: float = REPORT_WAIT_S) -> tuple[dict | None, list[int]]:
    """The zygote's ``kind`` answer ("started" or "exit"; "error" also ends a "started" wait)
    for ``job``, with its descriptors; (None, []) when none came in ``wait_s``. Answers of
    other jobs are dropped on the way. Raises OSError when the zygote is gone."""
    deadline = time.monotonic() + wait_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([sock], [], [], remaining)[0]:
            return None, []
        message, fds, _, _ = socket.recv_fds(sock, _MESSAGE_BYTES, 1)
        if not message:
            for fd in fds:
                os.close(fd)
            raise OSError(errno.ECHILD, "the zygote died")
        reply = json.loads(message)
        wanted = (kind,) if kind == "exit" else (kind, "error")
        if reply.get("job") == job and reply.get("kind") in wanted:
            return reply, fds
        _drop(reply, fds)


def _drop(reply: dict, fds: list[int]) -> None:
    """A stale answer: its child (if it started one) is killed, its descriptors closed."""
    for fd in fds:
        if reply.get("kind") == "started":
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
        os.close(fd)


# --------------------------------------------------------------------------- the zygote
def zygote_main(sock: socket.socket, settings: dict, rules: list, probe_dir: str) -> None:
    """The zygote's life: set up /proc and Landlock, report, then fork one child per request."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the server
    sock = _high_fd_socket(sock)
    settings = dict(settings, parent_pid=os.getpid())
    detail: list[str] = []
    if os.getpid() == 1:
        try:
            from vigor_cli.sandbox.namespace import mount_private_proc

            mount_private_proc()
        except OSError as exc:
            detail.append(f"could not mount a private /proc: {exc}")
    procs_fd = settings.pop("cgroup_fd", None)  # the slot cgroup's cgroup.procs, from the server
    usage_fd = settings.pop("cgroup_usage_fd", None)  # and its usage file
    shared: dict = {}
    if procs_fd is not None:
        settings["memory_cgroup"] = _enter_cgroup(procs_fd, detail)
        if settings["memory_cgroup"] and usage_fd is not None:
            shared = _check_shared_memory(usage_fd, detail)
    if usage_fd is not None:
        os.close(usage_fd)
    if settings.get("job_ipc"):
        why = job_ipc_fails()
        if why:
            settings["job_ipc"] = False
            detail.append(f"no IPC namespace per job ({why}): System V objects are removed "
                          "after each job instead")
    ruleset = None
    if rules:
        try:
            from vigor_cli.sandbox.landlock import build_ruleset

            ruleset = build_ruleset(rules)
            ruleset.fd = to_high_fd(ruleset.fd)
            settings["landlock_fd"] = ruleset.fd
            settings["landlock_abi"] = ruleset.abi
        except OSError as exc:
            detail.append(f"Landlock unavailable: {exc}")
    report = probe(settings, probe_dir)
    settings["memory_cgroup"] = report["memory_cgroup"]  # else children keep the address-space limit
    report.update(shared)
    report["detail"] = detail + report["detail"]
    report["landlock_abi"] = settings.get("landlock_abi", 0)
    report["job_ipc_namespace"] = bool(settings.get("job_ipc"))
    sock.send(json.dumps(report).encode())
    gc.freeze()
    _serve(sock, settings)
    if ruleset is not None:
        ruleset.close()


def _enter_cgroup(procs_fd: int, detail: list[str]) -> bool:
    """Join the slot's memory cgroup (its ``cgroup.procs`` open at ``procs_fd``), so that
    every child is born in it: a fork stays in its parent's cgroup, while moving each child
    there cost a grace period of the kernel's RCU per job (a wait of milliseconds, more on a
    loaded machine). Its children make themselves the first process the kernel kills for the
    limit (``child.confine``); where it may (CAP_SYS_RESOURCE), the zygote also makes itself
    one the kernel never kills (else, killed once nothing else is left to kill, its worker
    ends and the pool replaces it). True if it joined."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(OOM_SCORE_ADJ_MIN))
    except OSError:
        pass  # no CAP_SYS_RESOURCE: see above
    try:
        join(procs_fd)
        return True
    except OSError as exc:
        detail.append(f"the zygote cannot enter the memory cgroup ({exc})")
        return False
    finally:
        os.close(procs_fd)


def _check_shared_memory(usage_fd: int, detail: list[str]) -> dict:
    """Whether the slot's cgroup is charged for System V and tmpfs memory (measured, never
    assumed: ``probe.shared_memory_charges``), as ``shared_memory_counted`` and the figures."""
    charges = shared_memory_charges(usage_fd)
    if isinstance(charges, str):
        detail.append(f"memory: shared memory not counted (could not measure: {charges})")
        return {"shared_memory_counted": False}
    counted = min(charges) >= SHARED_PROBE_BYTES * SHARED_COUNTED_SHARE
    if not counted:
        detail.append(f"memory: shared memory not counted (the cgroup was charged {charges[0] >> 10} KiB "
                      f"for {SHARED_PROBE_BYTES >> 10} KiB of System V memory, {charges[1] >> 10} KiB for "
                      "as much in a tmpfs file)")
    return {"shared_memory_counted": counted, "shared_memory_charged": list(charges)}


def _serve(sock: socket.socket, settings: dict) -> None:
    """One child per request until the server closes the socket."""
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, _MESSAGE_BYTES, 8)
        except OSError:
            return
        if not message:
            return
        request = json.loads(message)
        job = request["job"]
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"job": job, "kind": "error", "error": f"fork: {exc}"}).encode())
            continue
        if pid == 0:
            sock.close()
            run_child(request, request["workdir"], dict(zip(request["fds"], fds)), settings)
            os._exit(125)  # unreachable: run_child never returns
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        socket.send_fds(sock, [json.dumps({"job": job, "kind": "started"}).encode()], [pidfd])
        os.close(pidfd)
        status, usage = reap(pid)
        sock.send(json.dumps({"job": job, "kind": "exit", "status": status,
                              "cpu_s": usage.ru_utime + usage.ru_stime,
                              "max_rss_kb": usage.ru_maxrss}).encode())


def reap(pid: int) -> tuple[int, object]:
    """Wait for the child to exit, kill what is left of its process group, collect its exit
    status and usage, and reap any orphan re-parented to this init."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    try:  # whatever is left of its group (only possible were seccomp missing)
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    _, status, usage = os.wait4(pid, 0)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    return status, usage


def to_high_fd(fd: int) -> int:
    """Move ``fd`` to 64 or above, out of the way of the child's fds 0-5."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64)
    os.close(fd)
    return high


def _high_fd_socket(sock: socket.socket) -> socket.socket:
    return socket.socket(fileno=to_high_fd(sock.detach()))
