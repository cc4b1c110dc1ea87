"""A pool of fork servers that runs untrusted programs in parallel.

``SandboxPool(workers)`` starts ``workers`` fresh interpreters running
:mod:`sandbox.worker` (never forks the caller: the trainer may hold GPUs,
threads and gigabytes). Each worker forks one confined child per job, so
interpreter start-up stays off the per-test path. The pool lives until
``close()``; use one for thousands of runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import vigor_cli
import vigor_cli.sandbox.protocol as protocol
from vigor_cli.sandbox.limits import SANDBOX_UID_BASE, Limits
from vigor_cli.sandbox.values import encodable, parse_json

# The folder that holds the vigor_cli package (a checkout or site-packages).
_PACKAGE_PARENT = str(Path(vigor_cli.__file__).resolve().parents[1])
_WORKER_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); import vigor_cli.sandbox.worker as w; w.main()"
_warned: set[str] = set()
_HARNESS_DIRS = tuple(sorted({
    os.path.dirname(vigor_cli.__file__),
    str(Path(vigor_cli.__file__).resolve().parent),
    str(Path(__file__).resolve().parent),
    str((Path(vigor_cli.__file__).parent / "verifiers").resolve()),
}, key=len, reverse=True))
"""Where the harness's own code lives: never shown in a program's stderr."""

ISOLATION_LAYERS = ("seccomp", "landlock", "uid_switch", "pid_namespace", "ipc_per_job",
                    "network_namespace", "mount_namespace", "job_tmpfs")
"""What "full" isolation means: every one of these is active (see the README's threat model)."""
REPLY_GRACE_S = 30.0
"""How long past a job's wall-clock limit the pool waits for a worker's answer before it
declares the worker stuck, replaces it and reports a sandbox error."""


UID_BLOCK = 256
"""Uids a pool claims at once (slots per pool at most): pool ``k`` on this machine runs slot
``i`` as ``uid + k * UID_BLOCK + i``."""
UID_LOCK_DIR = "/run/vigor-sandbox"
"""Where pools hold a lock per claimed block of uids (released when the pool closes or its
process dies), so two pools running at once never share a uid."""


def claim_uid_block(base: int) -> tuple[int, int | None]:
    """(first uid, lock fd) of a block of ``UID_BLOCK`` uids no other pool on this machine
    holds. Without root (no uid switch) there is nothing to claim: (base, None)."""
    if os.geteuid() != 0:
        return base, None
    os.makedirs(UID_LOCK_DIR, mode=0o700, exist_ok=True)
    for block in range(4096):
        first = base + block * UID_BLOCK
        fd = os.open(os.path.join(UID_LOCK_DIR, f"uids-{first}.lock"),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return first, fd
        except BlockingIOError:
            os.close(fd)
    raise SandboxError(f"every block of sandbox uids from {base} is held by another pool")


MEMORY_RLIMIT_ONLY = "memory: rlimit only"
SHARED_MEMORY_UNCOUNTED = "memory: shared memory not counted"
"""Said where a slot's memory cgroup was measured not to be charged for System V and tmpfs
memory (``probe.shared_memory_charges``): the IPC namespace and the job tmpfs bound it beside
the limit instead."""
"""What the isolation level adds where no memory cgroup bounds a program (``sandbox.memory_cgroup``):
its address-space limit does not count System V shared memory, tmpfs files or page tables."""


def missing_layers(capabilities: dict) -> list[str]:
    """The :data:`ISOLATION_LAYERS` a pool (or worker) lacks."""
    return [layer for layer in ISOLATION_LAYERS if not capabilities.get(layer)]


def isolation_level(capabilities: dict) -> str:
    """'full', or 'weak (no landlock, no pid_namespace)' naming the missing layers; either
    followed by ', memory: rlimit only' where no memory cgroup bounds each program, or by
    ', memory: shared memory not counted' where the cgroup was measured not to count System V
    and tmpfs memory."""
    missing = missing_layers(capabilities)
    level = "full" if not missing else "weak (no " + ", no ".join(missing) + ")"
    if not capabilities.get("memory_cgroup"):
        return f"{level}, {MEMORY_RLIMIT_ONLY}"
    if capabilities.get("shared_memory_counted") is False:
        return f"{level}, {SHARED_MEMORY_UNCOUNTED}"
    return level


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), the default pool size."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


class SandboxError(RuntimeError):
    """The sandbox itself failed (a worker could not start); never a verdict on a program."""


class WeakSandboxError(SandboxError):
    """The sandbox runs with less than full isolation and the caller did not opt in."""


@dataclass(frozen=True)
class Job:
    """One run: a Python program, its standard input and, for functional tests, a call."""

    source: str
    stdin: bytes = b""
    limits: Limits = field(default_factory=Limits)
    func_name: str | None = None
    """Call ``Solution().<func_name>(*args)`` after the program ran (LeetCode style)."""
    args_json: str = ""
    """The call's arguments: one JSON value per line."""


@dataclass
class RunResult:
    """What a run did. ``outcome`` is the one-word summary the verifiers map to verdicts."""

    outcome: str
    """ok | exit (non-zero code) | signal | timeout | memory | output_limit | compile_error |
    skipped | sandbox_error"""
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    value: object = None
    """Functional runs: the returned value (JSON round-tripped), if any."""
    has_value: bool = False
    status_error: str | None = None
    """Why the status line could not be read (nested too deep, not JSON), if it could not."""
    unserialisable: str | None = None
    """Functional runs: the type name of a return value JSON cannot hold."""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    max_rss_kb: int = 0
    detail: str = ""
    isolation: str = ""
    """The isolation level the program ran under (see :func:`isolation_level`)."""
    base_dir: str | None = field(default=None, repr=False)
    """The worker's run folder, which :meth:`clean` cuts from what a verdict quotes."""

    def clean(self, text: str) -> str:
        """``text`` the program produced (a line of its output, a returned value) as a
        verdict may quote it: without the grader's paths (:func:`clean_text`), encodable
        (``values.encodable``)."""
        return encodable(clean_text(text, self.base_dir))

    @property
    def stderr_head(self) -> str:
        """The first lines of standard error (at most 20 lines / 2000 characters)."""
        text = self.stderr.decode("utf-8", "replace")
        return "\n".join(text.splitlines()[:20])[:2000]


def _read_status(data: bytes) -> tuple[dict, str | None]:
    """The harness's status line (the first line on fd 3), bounded and total: a program can
    write there too, so whatever is there is read like any program output."""
    line = data.split(b"\n", 1)[0]
    if not line.strip():
        return {}, None
    parsed, why = parse_json(line)
    if why is not None:
        return {}, why
    return (parsed, None) if isinstance(parsed, dict) else ({}, "not a JSON object")


_FRAME_LINE = re.compile(r'^([ \t]*)File "([^"\n]*)", line \d+')
_CHECKOUT = (os.path.basename(_PACKAGE_PARENT) not in ("site-packages", "dist-packages")
             and os.path.dirname(_PACKAGE_PARENT) != _PACKAGE_PARENT)
"""Whether vigor runs from a checkout: then the folder holding it (its root, which the worker's
command line and import path carry) is the grader's own and never shown; an installed vigor's
folder is site-packages, shared with numpy's frames, and only its own folders are cut."""


def clean_text(text: str, base_dir: str | None = None) -> str:
    """A program's text without the grader: traceback frames of the harness's own files
    (with their source lines) are dropped, other mentions of its folders (and of a checkout's
    root) read ``<sandbox>``, and the job's folder is cut from paths (``solution.py``,
    ``tmp/...``). For everything a verdict quotes: stderr, and the output it shows."""
    job = os.path.join(base_dir, "job") if base_dir else None
    harness = [d for d in _HARNESS_DIRS if d in text]
    if harness:
        kept, skip_deeper_than = [], None
        for line in text.split("\n"):
            indent = len(line) - len(line.lstrip(" \t"))
            if skip_deeper_than is not None and line.strip() and indent > skip_deeper_than:
                continue  # the source line (and carets) of a dropped frame or warning
            skip_deeper_than = None
            frame = _FRAME_LINE.match(line)
            if frame and frame.group(2).startswith(tuple(d + os.sep for d in harness)):
                skip_deeper_than = len(frame.group(1))
                continue
            if any(d in line for d in harness):
                skip_deeper_than = indent  # e.g. a warning's location: drop its source line
                for folder in harness:
                    line = re.sub(re.escape(folder) + r'[^\s"\':]*', "<sandbox>", line)
            kept.append(line)
        text = "\n".join(kept)
    if job and job in text:
        text = text.replace(os.path.join(job, "work") + os.sep, "").replace(job + os.sep, "")
    if base_dir and base_dir in text:
        text = text.replace(base_dir, "<sandbox>")
    if _CHECKOUT and _PACKAGE_PARENT in text:
        text = re.sub(re.escape(_PACKAGE_PARENT) + r'(?![^\s"\':/])[^\s"\':]*', "<sandbox>", text)
    return text


def clean_stderr(data: bytes, base_dir: str | None = None) -> bytes:
    """:func:`clean_text` of a program's stderr (bytes that need not be UTF-8 stay as they are)."""
    text = data.decode("utf-8", "surrogateescape")
    return clean_text(text, base_dir).encode("utf-8", "surrogateescape")


def _classify(reply: dict, limits: Limits, base_dir: str | None = None) -> RunResult:
    """Turn a worker's raw reply into a :class:`RunResult`."""
    if "internal_error" in reply:
        return RunResult("sandbox_error", detail=reply["internal_error"])
    if reply.get("too_large"):
        return RunResult("compile_error", detail=f"the program does not fit in its job "
                                                 f"directory ({limits.disk_mb} MiB)")
    status, status_error = _read_status(reply["status"])
    result = RunResult(
        outcome="ok",
        exit_code=reply["exit_code"],
        signal=reply["signal"],
        stdout=reply["stdout"],
        stderr=clean_stderr(reply["stderr"], base_dir),
        wall_s=reply["wall_s"],
        cpu_s=reply["cpu_s"],
        max_rss_kb=reply["max_rss_kb"],
        status_error=status_error,
        base_dir=base_dir,
    )
    if "value" in status:
        result.value, result.has_value = status["value"], True
    if "unserialisable" in status:  # a program can write this field: its text, made encodable
        result.unserialisable = encodable(str(status["unserialisable"])[:100])
    tail = result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    cpu_limit = limits.cpu_limit_s()
    if not reply.get("confined"):  # the child never said it was confined: no program ran
        result.outcome, result.detail = "sandbox_error", "the child could not confine itself"
    elif reply.get("oom_killed"):
        result.outcome = "memory"
        result.detail = (f"memory limit {limits.memory_mb} MiB (its memory cgroup counts shared "
                         "memory, tmpfs files and page tables)")
    elif reply["timed_out"]:
        result.outcome, result.detail = "timeout", f"wall-clock limit {limits.timeout_s:g} s"
    elif reply["output_limited"]:
        result.outcome, result.detail = "output_limit", f"output over {limits.stdout_cap} bytes"
    elif result.signal == signal.SIGXCPU or (
        result.signal == signal.SIGKILL and result.cpu_s >= cpu_limit
    ):
        result.outcome, result.detail = "timeout", f"CPU limit {cpu_limit} s"
    elif status.get("compile_error") is True:
        result.outcome, result.detail = "compile_error", tail[0]
    elif result.exit_code == 0:
        pass
    elif "MemoryError" in tail[0] or "Cannot allocate memory" in tail[0]:
        result.outcome, result.detail = "memory", f"memory limit {limits.memory_mb} MiB"
    elif result.signal is not None:
        name = signal.Signals(result.signal).name if result.signal in signal.valid_signals() else ""
        result.outcome, result.detail = "signal", f"killed by signal {result.signal} {name}".strip()
    else:
        result.outcome, result.detail = "exit", f"exit code {result.exit_code}: {tail[0]}"
    return result


class _Worker:
    def __init__(self, uid: int, options: dict):
        self.uid = uid
        self.options = options
        # Nothing of the caller's environment (tokens, keys) reaches the worker, except its
        # import path, so the worker finds the same packages (pyseccomp) as the caller.
        import_path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "PYTHONPATH": import_path, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-s", "-c", _WORKER_BOOT, _PACKAGE_PARENT, str(uid),
             json.dumps({**options, "parent_pid": os.getpid()})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/",
            start_new_session=True,
        )
        self.requests = self.process.stdin.fileno()
        self.replies = self.process.stdout.fileno()
        hello = protocol.receive(self.replies)
        if not isinstance(hello, dict) or "hello" not in hello:
            self.close()
            raise SandboxError("a sandbox worker failed to start (see its stderr above)")
        self.capabilities: dict = hello["hello"]

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class SandboxPool:
    """Runs :class:`Job` s on ``workers`` fork servers (0: one per CPU core).

    ``uid``: when the pool runs as root, it claims a free block of uids from ``uid`` on
    (:func:`claim_uid_block`) and slot ``i`` runs its programs as the block's uid ``i``,
    so nothing scoped to a uid (process counts, priorities, signals) is shared between
    programs running at the same time, in this pool or any other. ``disable``: layers to leave off
    (for tests and diagnosis: "landlock", "seccomp", "pid_namespace", "ipc_per_job",
    "job_tmpfs"; the pool then reports a weak isolation level; "memory_cgroup": memory bounded
    by rlimits only, as where the host allows no cgroup).
    Not thread-safe by design beyond a lock: calls from several threads run one
    after another.
    """

    def __init__(self, workers: int = 0, uid: int = SANDBOX_UID_BASE, disable: Sequence[str] = ()):
        self.size = workers if workers > 0 else min(usable_cpus(), UID_BLOCK)
        if self.size > UID_BLOCK:
            raise SandboxError(f"a sandbox pool has at most {UID_BLOCK} workers, not {self.size}")
        self.options = {"disable": sorted(disable)}
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._uid_lock: int | None = None
        self.uid, self._uid_lock = claim_uid_block(uid)
        try:
            for slot in range(self.size):
                self._workers.append(_Worker(self.uid + slot, self.options))
        except BaseException:
            self.close()
            raise
        self.capabilities = dict(self._workers[0].capabilities)
        self.capabilities["uids"] = [w.uid for w in self._workers]
        for worker in self._workers[1:]:  # the weakest slot sets the level
            for layer in (*ISOLATION_LAYERS, "memory_cgroup", "shared_memory_counted"):
                self.capabilities[layer] = self.capabilities.get(layer) and worker.capabilities.get(layer)
        self.isolation = isolation_level(self.capabilities)
        _warn_once_if_degraded(self.capabilities)

    @property
    def isolated(self) -> bool:
        """True when every isolation layer is active (the level starts with "full"; memory
        bounded by rlimits only is said, not refused)."""
        return not missing_layers(self.capabilities)

    # ------------------------------------------------------------------ running
    def run_one(self, job: Job) -> RunResult:
        return self.run([job])[0]

    def run(
        self,
        jobs: Sequence[Job],
        skip: Callable[[int], bool] | None = None,
        on_result: Callable[[int, RunResult], None] | None = None,
    ) -> list[RunResult]:
        """Run every job, in parallel, and return results in job order.

        ``skip(i)`` is asked just before job ``i`` is dispatched; True leaves it
        unrun (outcome ``skipped``). ``on_result(i, result)`` is called as each
        result arrives (it may change what ``skip`` answers, e.g. stop a
        submission's remaining tests after a failure).
        """
        with self._lock:
            if not self._workers:
                raise SandboxError("the sandbox pool is closed")
            results: list[RunResult | None] = [None] * len(jobs)
            pending = deque(range(len(jobs)))
            idle = list(self._workers)
            busy: dict[int, tuple[_Worker, int]] = {}
            try:
                self._dispatch(jobs, results, pending, idle, busy, skip, on_result)
            except BaseException:
                # Interrupted (Ctrl-C, a callback raised): a busy worker would later answer a
                # job nobody waits for, so replace it; its child dies with it (PDEATHSIG).
                for worker, _ in list(busy.values()):
                    worker.process.kill()
                    self._replace(worker)
                raise
            return results  # type: ignore[return-value]

    def _dispatch(self, jobs, results, pending, idle, busy, skip, on_result) -> None:
        """The scheduling loop of :meth:`run`: keep every worker busy until all jobs are done."""
        while pending or busy:
            while pending and idle:
                index = pending.popleft()
                if skip is not None and skip(index):
                    results[index] = RunResult("skipped")
                    continue
                worker = idle.pop()
                message = _job_message(jobs[index])
                try:
                    protocol.send(worker.requests, message)
                except OSError:  # the worker died while idle: replace it and resend
                    worker = self._replace(worker)
                    protocol.send(worker.requests, message)
                busy[worker.replies] = (worker, index)
            if not busy:
                continue
            wait = max(jobs[i].limits.timeout_s for _, i in busy.values()) + REPLY_GRACE_S
            ready, _, _ = select.select(list(busy), [], [], wait)
            if not ready:  # no worker answered long past every limit: they are stuck
                for fd, (worker, index) in list(busy.items()):
                    busy.pop(fd)
                    worker.process.kill()
                    result = RunResult("sandbox_error", detail=f"sandbox worker gave no answer "
                                       f"within {wait:g} s; replaced")
                    results[index] = result
                    idle.append(self._replace(worker))
                    if on_result is not None:
                        on_result(index, result)
                continue
            for fd in ready:
                worker, index = busy.pop(fd)
                reply = protocol.receive(fd)
                if reply is None:  # the worker died: replace it, report the job
                    result = RunResult("sandbox_error", detail="sandbox worker died")
                    worker = self._replace(worker)
                else:
                    result = _classify(reply, jobs[index].limits,
                                       worker.capabilities.get("base_dir"))
                result.isolation = self.isolation
                results[index] = result
                idle.append(worker)
                if on_result is not None:
                    on_result(index, result)

    def _replace(self, dead: _Worker) -> _Worker:
        dead.close()
        base_dir = dead.capabilities.get("base_dir")
        if base_dir and not dead.capabilities.get("mount_namespace"):
            # A killed worker could not remove its run directories (in its own mount
            # namespace they vanished with it). Not shutil.rmtree: a program's 3000-deep
            # chain would make it raise RecursionError here, in the grader.
            from vigor_cli.sandbox.namespace import remove_tree

            try:
                remove_tree(base_dir)
            except OSError:
                pass
        fresh = _Worker(dead.uid, self.options)
        self._workers[self._workers.index(dead)] = fresh
        return fresh

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()
        lock, self._uid_lock = getattr(self, "_uid_lock", None), None
        if lock is not None:  # only now: no program of this pool's uids is left running
            os.close(lock)

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _job_message(job: Job) -> dict:
    limits = job.limits.to_dict()
    limits["cpu_limit_s"] = job.limits.cpu_limit_s()
    call = None
    if job.func_name is not None:
        call = {"func_name": job.func_name, "args": job.args_json}
    return {"source": job.source, "stdin": job.stdin, "limits": limits, "call": call}


def _warn_once_if_degraded(caps: dict) -> None:
    """Say loudly, once per process, which protection (or capability) is missing."""
    problems = []
    if not caps.get("landlock"):
        problems.append("Landlock NOT active: programs can read any file their uid may read "
                        "(datasets, the project's own task code)")
    if not caps.get("seccomp"):
        problems.append("seccomp filter NOT active: network, fork and kill are not blocked")
    if caps.get("root") and not caps.get("uid_switch"):
        problems.append(f"could NOT drop root to uid {caps.get('uid')}: programs run as root")
    if caps.get("root") is False:
        problems.append("not started as root, so programs keep this user's rights: they can "
                        "read and write this user's files (run as root or in a container to "
                        "drop to an unprivileged uid)")
    if caps.get("stdlib_readable") is False:
        problems.append(
            f"uid {caps.get('uid')} cannot read the Python installation, so programs can import "
            "only the modules the fork server preloads"
        )
    message = "; ".join(problems)
    if not message or message in _warned:
        return
    _warned.add(message)
    details = "; ".join(caps.get("detail", []))
    sys.stderr.write(f"\n*** vigor sandbox WARNING: {message}" + (f" [{details}]" if details else "")
                     + " ***\n\n")
