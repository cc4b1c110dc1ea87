"""The run directory (docs/run-directory.md): its name, its lock, its config, and the two
stores in it.

Details: docs/modules.md.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

from vigor_cli.atomic import (  # noqa: F401  (re-exported: their home before the split)
    DiskFullError, disk_errors, disk_full, is_disk_full, write_json_atomic, write_text_atomic,
)
from vigor_cli.run.checkpoints import COMPLETE, MANIFEST, RUN_ID, CheckpointStore, verify_checkpoint  # noqa: F401
from vigor_cli.config import RunConfig, dump_config, load_yaml
from vigor_cli.errors import UserError
from vigor_cli.user.jsonl import JsonlContent
from vigor_cli.run.provenance import RECORD
from vigor_cli.run.logs import LOGS, RunLog, read_eval_line  # noqa: F401

LOCK = "run.lock"
LAUNCH_DIR = "launch-dir"
"""The folder the run was started in: a resume reads the config's relative paths from there."""
_SETUP_WRITTEN = ("config.yaml", RUN_ID, LAUNCH_DIR, RECORD)  # written atomically: each may leave its .<name>.tmp
SETUP_FILES = frozenset({LOCK, "checkpoints", "eval", *_SETUP_WRITTEN, *(f".{n}.tmp" for n in _SETUP_WRITTEN)})
"""What a run's directory holds before its first step (and all a failed start may remove)."""


def default_run_name(cfg: RunConfig) -> str:
    date = _dt.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    return f"{date}-{cfg.task.name}-{cfg.allocation.strategy}-s{cfg.train.seed}"


# --------------------------------------------------------------------------- the lock
class RunLock:
    """An exclusive ``flock`` on ``run.lock``, held until :meth:`release` or process exit."""

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, path

    @classmethod
    def take(cls, path: Path, exclusive_create: bool = False, stale_only: bool = False) -> "RunLock | None":
        """The lock, or None when another live process holds it.

        ``exclusive_create``: a new lock file, which only a brief probe can hold, so it is
        waited for. ``stale_only``: None also for a lock file no process has written its
        pid to yet (its creator is between creating and locking it).
        """
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if exclusive_create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except (PermissionError, IsADirectoryError, NotADirectoryError) as e:
            raise UserError(f"{path}: cannot lock the run ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if exclusive_create else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        if stale_only and not os.read(fd, 64).strip():
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    @classmethod
    def acquire(cls, path: Path, exclusive_create: bool = False) -> "RunLock":
        """The lock, or one line naming the pid that holds it."""
        lock = cls.take(path, exclusive_create)
        if lock is None:
            try:
                holder = path.read_text(errors="replace").strip() or "unknown"
            except OSError:
                holder = "unknown"
            raise UserError(
                f"{path.parent}: the run is in use by another process (pid {holder}); "
                "wait for it to finish or stop it, then resume"
            )
        return lock

    def release(self, remove: bool = False) -> None:
        """Drop the lock; ``remove``: the file too, while still held (a run that has ended)."""
        if self.fd >= 0:
            if remove:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = -1


def check_run_path(path: str | Path, flag: str) -> None:
    """Refuse, in one line naming the real cause, a ``flag`` (``--run``, ``--resume``,
    ``--rerun``) path that is not a run directory: missing, a file, one of a run's checkpoint
    folders (which carry a config.yaml too), or a folder without config.yaml."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{flag} {path}: no such directory")
    if not p.is_dir():
        raise UserError(f"{flag} {path}: a file, not a run directory")
    from vigor_cli.run.checkpoints import STEP_DIR

    if (p / COMPLETE).is_file() or (p / MANIFEST).is_file() or (
            p.parent.name == "checkpoints" and STEP_DIR.match(p.name) and not (p / "metrics.jsonl").exists()):
        pick = f" --checkpoint {p.name}" if flag == "--run" else ""
        raise UserError(f"{flag} {path}: a checkpoint folder, not a run directory; give its run: "
                        f"{flag} {p.parent.parent}{pick}")
    if p.name == "checkpoints" and (p.parent / "config.yaml").is_file():
        raise UserError(f"{flag} {path}: the checkpoints folder of a run, not a run directory; give the run: "
                        f"{flag} {p.parent}")
    if not (p / "config.yaml").is_file():
        raise UserError(f"{flag} {path}: not a run directory (no config.yaml)")


def never_started(path: Path) -> bool:
    """Whether ``path`` holds only what a run writes before its first step (its lock, maybe
    its config and empty folders): what a run killed while loading leaves."""
    entries = {p.name for p in path.iterdir()}
    if LOCK not in entries or not entries <= SETUP_FILES:
        return False
    return all(not any((path / d).iterdir()) for d in ("checkpoints", "eval") if d in entries)


def _claim(path: Path) -> tuple[RunLock | None, bool]:
    """Take ``path`` for a new run: (the lock, whether a never-started run's directory was
    reused), or (None, False) when another run has it (never shares one)."""
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        if not path.is_dir():
            return None, False  # a file has the name
        if any(path.iterdir()):
            if not never_started(path):
                return None, False  # an earlier run has the name
            lock = RunLock.take(path / LOCK, stale_only=True)
            if lock is not None and never_started(path):  # checked again, now that we hold it
                return lock, True
            if lock is not None:
                lock.release()
            return None, False  # alive (still loading), or it started meanwhile
    try:
        return RunLock.acquire(path / LOCK, exclusive_create=True), False
    except FileExistsError:
        return None, False  # another process claimed the same empty directory first


# --------------------------------------------------------------------------- the run directory
class RunDir:
    """One run's directory, ``<train.output_dir>/<run_name>/``: written by the trainer, read
    by ``inspect-allocation``, ``report``, ``eval --run`` and resume."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.log = RunLog(self.path)
        self.store = CheckpointStore(self.checkpoints)
        self.lock: RunLock | None = None
        self.lock_made = False
        """Whether :meth:`acquire` created run.lock (an ended run leaves none)."""
        self.fresh = False
        """Claimed by this process for a new run (removed again if it never starts)."""
        self._config: dict[str, Any] | None = None
        self._made_parents: Path | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def eval_dir(self) -> Path:
        return self.log.eval_dir

    @property
    def notes(self) -> list[str]:
        """What the readers skipped (a torn last line), for the commands to print."""
        return self.log.notes

    # ------------------------------------------------------------------ creation
    @classmethod
    def planned(cls, cfg: RunConfig, announce: Callable[[str], Any] | None = None) -> "RunDir":
        """Claim a directory for a new run (atomically, with the lock held).

        The name is ``train.run_name`` (or a dated default); when it is taken, by another
        run or one started at the same moment, the first free ``<name>-N`` is used.
        """
        name = cfg.train.run_name or default_run_name(cfg)
        parent = Path(cfg.train.output_dir)
        made = parent if not parent.exists() else None  # removed again by abandon() when empty
        while made is not None and not made.parent.exists():
            made = made.parent
        for n in range(1, 1000):
            path = parent / (name if n == 1 else f"{name}-{n}")
            try:
                with disk_errors(path):
                    lock, reused = _claim(path)
            except (NotADirectoryError, PermissionError, FileNotFoundError) as e:
                raise UserError(f"train.output_dir: cannot create {path} ({e.strerror})") from None
            if lock is not None:
                if announce and reused:
                    announce(f"run directory {path} holds a run stopped before its first step; this run reuses it")
                elif n > 1 and announce:
                    announce(f"run directory {parent / name} is taken; this run uses {path}")
                run = cls(path)
                run.lock, run._made_parents, run.fresh = lock, made, True
                return run
        raise UserError(f"train.run_name: {parent / name} and 998 suffixed names are taken")

    def make(self, cfg: RunConfig) -> "RunDir":
        """Create the subdirectories, the run's id (``run-id``: every checkpoint records it,
        so one copied in from another run is never taken for this run's) and the resolved
        config (before anything slow, so a run killed while loading leaves a directory that
        resumes or is reused)."""
        import secrets

        with disk_errors(self.path):
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            self.eval_dir.mkdir(exist_ok=True)
        if not (self.path / RUN_ID).is_file():
            write_text_atomic(self.path / RUN_ID, secrets.token_hex(16) + "\n")
        write_text_atomic(self.path / LAUNCH_DIR, os.getcwd() + "\n")
        self.write_config(cfg)
        return self

    @classmethod
    def create(cls, cfg: RunConfig, announce: Callable[[str], Any] | None = None) -> "RunDir":
        return cls.planned(cfg, announce).make(cfg)

    def abandon(self) -> None:
        """Remove a directory claimed by :meth:`planned` when the run failed before its
        first step (bad config, missing model): nothing but our own files is removed."""
        if self.path.is_dir() and never_started(self.path):
            shutil.rmtree(self.path, ignore_errors=True)
            with contextlib.suppress(OSError):  # the output directories made for it, if empty
                for d in [self.path.parent, *self.path.parent.parents]:
                    if self._made_parents is None or self._made_parents not in [d, *d.parents]:
                        break
                    d.rmdir()
        self.release()

    @classmethod
    def open_existing(cls, path: str | Path, flag: str = "--resume") -> "RunDir":
        run = cls(Path(path))
        if run.path.is_dir() and not (run.path / "config.yaml").is_file() and never_started(run.path):
            raise UserError(f"{flag} {path}: the run was stopped before it wrote its config, so there "
                            "is nothing to resume; start it again (a new run of that name reuses the directory)")
        check_run_path(path, flag)
        return run

    def launch_dir(self) -> Path | None:
        """The folder the run was started in (``launch-dir``); None for a run from before the
        file existed, or whose folder is gone."""
        try:
            saved = (self.path / LAUNCH_DIR).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        target = Path(saved) if saved else None
        return target if target is not None and target.is_absolute() and target.is_dir() else None

    @contextlib.contextmanager
    def in_launch_dir(self, note: Callable[[str], Any], doing: str = "resuming") -> Iterable[None]:
        """Work in the folder the run was started in (``launch-dir``), so the saved config's
        relative paths (``--data my.jsonl``, ``--reward rewards.py:f``, a local model) mean
        what they meant then; the current folder comes back after. A run from before the
        file existed, or whose folder is gone, stays in the current folder."""
        here = os.getcwd()
        target = self.launch_dir()
        if target is None or target.resolve() == Path(here).resolve():
            yield
            return
        note(f"{doing} in {target}, the folder the run was started in (its config's relative paths are read from there)")
        os.chdir(target)
        try:
            yield
        finally:
            os.chdir(here)

    def acquire(self) -> "RunDir":
        """Hold ``run.lock`` (resume): refused with one line when another process has it."""
        if self.lock is None:
            self.lock_made = not (self.path / LOCK).exists()  # a refused resume takes it away again
            with disk_errors(self.path / LOCK):
                self.lock = RunLock.acquire(self.path / LOCK)
        return self

    def release(self, remove: bool = False) -> None:
        """Drop ``run.lock``'s flock; ``remove``: delete the file as well (the run has ended)."""
        if self.lock is not None:
            self.lock.release(remove)
            self.lock = None

    # ------------------------------------------------------------------ config
    def write_config(self, cfg: RunConfig) -> None:
        write_text_atomic(self.path / "config.yaml", dump_config(cfg))
        self._config = None

    @property
    def config(self) -> dict[str, Any]:
        """The run's resolved config.yaml as a plain dict ({} when absent)."""
        if self._config is None:
            self._config = read_config(self.path)
        return self._config

    def config_value(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    # ------------------------------------------------------------------ shorthands (the trainer's calls)
    def append(self, log: str, row: dict) -> None:
        self.log.append(log, row)

    def append_many(self, log: str, rows: Iterable[dict]) -> None:
        self.log.append_many(log, rows)

    def write_eval(self, step: int, result: dict) -> None:
        self.log.write_eval(step, result)

    def write_summary(self, summary: dict) -> None:
        self.log.write_summary(summary)

    def read_log(self, log: str) -> JsonlContent:
        return self.log.read(log)

    def metrics(self) -> list[dict]:
        return self.log.metrics()

    def eval_steps(self) -> dict[int, Path]:
        return self.log.eval_steps()

    def checkpoint_steps(self) -> list[int]:
        return self.store.steps()

    def latest_checkpoint(self) -> Path | None:
        return self.store.latest()

    def begin_checkpoint(self, step: int) -> Path:
        return self.store.begin(step)

    def discard_checkpoint(self, tmp: Path) -> None:
        self.store.discard(tmp)

    def commit_checkpoint(self, tmp: Path, step: int, keep: int) -> Path:
        return self.store.commit(tmp, step, keep)


# --------------------------------------------------------------------------- readers
def check_run_dir(path: str | Path) -> Path:
    """The run directory as a Path, or a UserError saying what is missing."""
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"run directory not found: {p}")
    if not (p / "metrics.jsonl").is_file() and not (p / "allocation.jsonl").is_file():
        raise UserError(
            f"{p}: not a run directory (no metrics.jsonl or allocation.jsonl; "
            "see docs/run-directory.md)"
        )
    return p


def read_config(path: Path) -> dict[str, Any]:
    """The run's resolved config.yaml as a plain dict ({} when absent)."""
    cfg_path = Path(path) / "config.yaml"
    return load_yaml(cfg_path) if cfg_path.is_file() else {}


def load_run(path: str | Path) -> RunDir:
    """A run to read (``report``, ``inspect-allocation``): config and metrics checked now, so
    damage is one line before any work; the run may still be training."""
    run = RunDir(check_run_dir(path))
    run.config  # noqa: B018 - read (and validate as YAML) up front
    run.metrics()
    return run

