"""What runs inside a freshly forked child: confine the process, then run the program.

Details: docs/modules.md.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import importlib
import io
import json
import os
import random
import resource
import signal
import sys
import tempfile
import threading
import types

STATUS_FD = 3
READY_BYTE = b"\x01"
"""Written to the ready pipe once the child is confined, just before user code runs."""
RECURSION_LIMIT = 50_000
"""LiveCodeBench's harness sets this; recursive reference solutions rely on it."""

PRELUDE_STAR_IMPORTS = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
    "statistics", "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing",
)
"""Names LiveCodeBench makes visible to every program (LeetCode solutions use ``List``
without importing it). Star-imported in this order, then the modules themselves bound."""

PRELUDE_MODULES = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
    "statistics", "itertools", "functools", "operator", "io", "sys", "json",
)

_NPROC_LIMIT = 1024
_SIGPENDING_LIMIT = 1024
"""Queued signals of the sandbox uid (RLIMIT_SIGPENDING), which also bounds POSIX timers (each
holds a preallocated signal): the default (the machine's thread limit) let one job hold
96 000 timers, 32 MiB of kernel memory no other limit counts."""
_M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter for the number of malloc arenas."""
_OOM_SCORE_ADJ_MAX = 1000
"""The first process the kernel kills for memory: a program, never its zygote (-1000)."""
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4


_SYS_STREAM_NAMES = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__", "argv")
_prelude_template: dict | None = None


def import_prelude_modules() -> None:
    """Import the prelude's modules and build its namespace once (in the fork server, so
    children start with both)."""
    global _prelude_template
    for name in PRELUDE_STAR_IMPORTS:
        importlib.import_module(name)
    _prelude_template = _build_prelude()


def _build_prelude() -> dict:
    namespace: dict = {}
    for name in PRELUDE_STAR_IMPORTS:
        module = sys.modules[name]
        public = getattr(module, "__all__", None)
        if public is None:
            public = [n for n in dir(module) if not n.startswith("_")]
        for attr in public:
            if hasattr(module, attr):
                namespace[attr] = getattr(module, attr)
    for name in PRELUDE_MODULES:
        namespace[name] = sys.modules[name]
    return namespace


def prelude_namespace(old_sys_values: dict) -> dict:
    """The globals a program starts with. ``from sys import *`` bound the fork server's
    streams and argv; those entries are swapped for the child's fresh ones."""
    namespace = dict(_prelude_template if _prelude_template is not None else _build_prelude())
    for name, old in old_sys_values.items():
        if namespace.get(name) is old:
            namespace[name] = getattr(sys, name)
    return namespace


def _own_address_space_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        pages = int(f.read().split()[0])
    return pages * resource.getpagesize()


def _set_limits(limits: dict, address_space: bool = True) -> None:
    """The rlimits of step 4; ``address_space``: RLIMIT_AS is the memory limit (no cgroup)."""
    mb = 1024 * 1024
    cpu = int(limits["cpu_limit_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    # Processes + threads of the sandbox uid, machine-wide: a backstop against fork bombs
    # should seccomp be missing (root ignores it, so it only bites after the uid drop). Each
    # pool slot has a uid of its own, so a program can exhaust only its own count.
    resource.setrlimit(resource.RLIMIT_NPROC, (_NPROC_LIMIT, _NPROC_LIMIT))
    resource.setrlimit(resource.RLIMIT_SIGPENDING, (_SIGPENDING_LIMIT, _SIGPENDING_LIMIT))
    # Soft stack limit only: `setrlimit(RLIMIT_STACK, (RLIM_INFINITY, RLIM_INFINITY))` is a
    # common idiom of recursive solutions, and the address-space limit bounds the stack anyway.
    stack = limits["stack_mb"] * mb
    resource.setrlimit(resource.RLIMIT_STACK, (stack, resource.RLIM_INFINITY))
    # Without a memory cgroup the address space is the memory limit (what is reserved counts,
    # not what is used); with one it only bounds reservations, beyond the memory limit.
    reserve = 0 if address_space else limits.get("reserve_mb", 0)
    size = _own_address_space_bytes() + (limits["memory_mb"] + reserve) * mb
    resource.setrlimit(resource.RLIMIT_AS, (size, size))


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _write_status(message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(STATUS_FD, view):]


def _exit_code(exc: SystemExit) -> int:
    """CPython's rule for ``sys.exit(arg)``: None -> 0, int -> itself, else print it, 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback CPython would print (through ``sys.excepthook``, whose C printer keeps
    the last 1000 frames of a deep recursion fast), minus this harness's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals is globals():
        tb = tb.tb_next
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException:
        pass


def _finish(code: int) -> None:
    """A normal interpreter exit: join threads, run atexit, flush, then leave at once."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize does first
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            if code == 0 and stream is sys.stdout:
                code = 120  # CPython's exit code when flushing stdout fails at exit
    os._exit(code)


def _call_solution(namespace: dict, func_name: str, args_text: str) -> None:
    """LeetCode style: ``Solution().<func_name>(*args)``, one JSON argument per line (or a
    top-level ``<func_name>`` when there is no ``Solution`` class)."""
    args = [json.loads(line) for line in args_text.split("\n")]
    solution_class = namespace.get("Solution")
    if solution_class is not None:
        method = getattr(solution_class(), func_name)
    elif callable(namespace.get(func_name)):  # a bare function, which upstream accepts too
        method = namespace[func_name]
    else:
        raise NameError(f"the program defines neither class Solution nor {func_name}()")
    value = method(*args)
    if isinstance(value, tuple):
        value = list(value)
    try:
        text = json.dumps(value, default=_plain)
    except (TypeError, ValueError):
        _write_status({"unserialisable": type(value).__name__})
        return
    _write_status({"value": json.loads(text)})


def _plain(value: object) -> object:
    """numpy scalars and arrays (and tuples inside containers) as plain JSON values, so a
    method returning np.int64(3) compares equal to 3 as upstream's ``==`` would."""
    for name in ("tolist", "item"):
        convert = getattr(value, name, None)
        if callable(convert):
            return convert()
    raise TypeError(type(value).__name__)


def confine(fds: dict, workdir: str, limits: dict, settings: dict,
            tmpdir: str | None = None) -> tuple[str, int | None]:
    """Steps 1-6 above, in this (forked) process; returns the call arguments (or "") and the
    ready pipe's descriptor (or None). Raises on any failure: the caller must then exit
    without running anything."""
    in_cgroup = bool(settings.get("memory_cgroup"))
    if in_cgroup:  # born in the slot's cgroup (the zygote's): the process it kills first
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, str(_OOM_SCORE_ADJ_MAX).encode())
        finally:
            os.close(fd)
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    args = ""
    if fds.get("args") is not None:
        with os.fdopen(os.dup(fds["args"]), "rb") as f:
            f.seek(0)
            args = f.read().decode("utf-8", "surrogatepass")
    # The zygote keeps its own descriptors above 64, so none of these targets is one of them.
    for target, fd in ((0, fds["stdin"]), (1, fds["stdout"]), (2, fds["stderr"]),
                       (STATUS_FD, fds["status"])):
        os.dup2(fd, target)
    keep = STATUS_FD + 1
    ruleset_fd, ready_fd = settings.get("landlock_fd"), fds.get("ready")
    if ruleset_fd is not None:
        os.dup2(ruleset_fd, keep)
        ruleset_fd = keep
        keep += 1
    if ready_fd is not None:
        os.dup2(ready_fd, keep)
        ready_fd = keep
        keep += 1
    os.closerange(keep, 1 << 20)
    os.chdir(workdir)
    tmpdir = tmpdir or workdir
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
                       "TMPDIR": tmpdir, "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8"})
    tempfile.tempdir = tmpdir  # the fork server asked tempfile before: it cached its own /tmp
    _set_limits(limits, address_space=not in_cgroup)
    if settings.get("job_ipc"):  # still root: an IPC namespace of the job's own, sized to it
        from vigor_cli.sandbox.namespace import enter_job_ipc_namespace

        enter_job_ipc_namespace(int(limits["memory_mb"]))
    if settings["drop_uid"]:
        _drop_privileges(settings["uid"])
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    # One malloc arena: glibc gives each new thread an arena of its own, reserving 64 MiB of
    # address space apiece, so under RLIMIT_AS a 512 MiB job could start only 7 threads
    # (multiprocessing.pool.ThreadPool(8) failed). Under the GIL the arenas buy nothing.
    libc.mallopt(_M_ARENA_MAX, 1)
    # Die with the zygote (set after the uid change, which clears it).
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != settings["parent_pid"]:
        raise OSError("the zygote is gone")
    if ruleset_fd is not None:
        from vigor_cli.sandbox.landlock import restrict_self

        restrict_self(ruleset_fd)
        os.close(ruleset_fd)
    if settings["seccomp"]:
        settings["seccomp_filter"].load(os.getpid())
    return args, ready_fd


def run_child(job: dict, workdir: str, fds: dict, settings: dict) -> None:
    """Confine this (forked) process and run ``job``'s program. Never returns.

    ``job``: ``{"limits": {...}, "call": func_name or None, "tmpdir": path}``; the program
    is ``workdir/solution.py``, written by the fork server."""
    try:
        args, ready_fd = confine(fds, workdir, job["limits"], settings, job.get("tmpdir"))
        script = os.path.join(workdir, "solution.py")
        with open(script, "rb") as f:
            source = f.read()  # bytes: compiled as `python3 solution.py` would (a BOM, a coding line)
        if ready_fd is not None:  # confined: say so, on a pipe the program never sees
            os.write(ready_fd, READY_BYTE)
            os.close(ready_fd)
    except BaseException:
        os._exit(125)  # the sandbox could not be set up: never run the program unconfined

    # A fresh interpreter's view of the world.
    old_sys_values = {name: getattr(sys, name) for name in _SYS_STREAM_NAMES}
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                  encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                  encoding="utf-8", errors="backslashreplace", line_buffering=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    sys.argv = [script]
    sys.path[0] = workdir
    atexit._clear()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    random.seed()
    sys.setrecursionlimit(RECURSION_LIMIT)

    main = types.ModuleType("__main__")
    main.__dict__.update(prelude_namespace(old_sys_values))
    main.__dict__.update({"__name__": "__main__", "__file__": script, "__builtins__": builtins,
                          "__spec__": None, "__loader__": None, "__package__": None})
    sys.modules["__main__"] = main

    try:
        compiled = compile(source, script, "exec", dont_inherit=True)
    except BaseException as exc:  # SyntaxError, ValueError (NUL bytes), MemoryError, ...
        _print_user_traceback(exc)
        try:
            _write_status({"compile_error": True})
        except OSError:
            pass
        _finish(1)

    try:
        exec(compiled, main.__dict__)
        if job.get("call") is not None:
            _call_solution(main.__dict__, job["call"], args)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        _print_user_traceback(exc)
        code = 1
    _finish(code)
