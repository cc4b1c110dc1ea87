"""The run directory (docs/run-directory.md): one writer, one reader, checkpoints, the lock.

One class, :class:`RunDir`, is used by the trainer (writing, resuming) and by every reader
(``vigor inspect-allocation``, ``vigor report``, ``vigor eval --run``). Its guarantees:

- **One run, one directory.** A new run claims ``<output_dir>/<name>`` atomically (exclusive
  ``mkdir``, or an exclusive create of ``run.lock`` in an empty directory) before anything
  slow; when the name is taken it gets the first free ``<name>-2``, ``<name>-3``, ...
- **One process at a time.** ``run.lock`` is held (``fcntl.flock``) for the run's life, so a
  second ``--resume`` of a live run is refused; readers do not lock and may read a live run.
- **Crash-safe files.** JSON files and checkpoints are written under a temporary name, synced
  and renamed into place; JSONL lines are appended whole. A write cut short can only leave a
  torn last line, handled by the one rule of :mod:`vigor_cli.jsonl`.
- **Checkpoints verified on load.** Each has a ``manifest.json`` (size and sha256 of every
  file), written before its ``COMPLETE`` marker; resume takes the newest one that verifies and
  warns about each newer one that does not. Old checkpoints are removed only after a newer
  one is committed, so some intact checkpoint is on disk at every instant.
- **History kept.** Resume keeps every logged line byte for byte, except lines of steps after
  the checkpoint (re-run identically) and a torn last line (both said in a warning); any
  other damaged line makes the resume refuse, naming ``file:line``, and so does a missing
  line (or log) of a step the checkpoint covers, naming the file and the step. The one line
  resume writes back is the checkpoint's own evaluation, when its line was torn: logged
  again from ``eval/step-N.json``, as the uninterrupted run logged it.
- **Disk full** (ENOSPC) while writing: one line naming the path and the disk's free space,
  exit 2; the temporary checkpoint is removed and earlier checkpoints stay intact.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from vigor_cli.config import RunConfig, dump_config, load_yaml
from vigor_cli.errors import UserError
from vigor_cli.jsonl import JsonlContent, read_jsonl

LOGS = ("metrics.jsonl", "allocation.jsonl", "completions.jsonl")
LOCK = "run.lock"
MANIFEST = "manifest.json"
COMPLETE = "COMPLETE"
_STEP_DIR = re.compile(r"^step-(\d+)$")
_EVAL_FILE = re.compile(r"^step-(\d+)\.json$")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(UserError):
    """No space left while writing a run file (exit 2; earlier checkpoints are intact)."""


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_full(path: Path) -> DiskFullError:
    """The one line for a full disk: the path written, the file system's mount point, free space."""
    mount = _existing(Path(path).absolute())
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        free = f"{shutil.disk_usage(mount).free / 2**20:.0f} MiB free"
    except OSError:
        free = "free space unknown"
    return DiskFullError(
        f"{path}: no space left on the disk mounted at {mount} ({free}); free some space and "
        "continue with --resume (earlier checkpoints are intact)"
    )


@contextlib.contextmanager
def disk_errors(path: Path) -> Iterator[None]:
    """Turn ENOSPC/EDQUOT raised while writing ``path`` into one :class:`DiskFullError` line."""
    try:
        yield
    except OSError as e:
        if e.errno in _NO_SPACE:
            raise disk_full(path) from None
        raise


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` to a temporary name, sync it and rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    data = text.encode("utf-8") if isinstance(text, str) else text
    with disk_errors(path):
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1))


def default_run_name(cfg: RunConfig) -> str:
    date = _dt.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    return f"{date}-{cfg.task.name}-{cfg.allocation.strategy}-s{cfg.train.seed}"


# --------------------------------------------------------------------------- the lock
class RunLock:
    """An exclusive ``flock`` on ``run.lock``, held until :meth:`release` or process exit."""

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, path

    @classmethod
    def acquire(cls, path: Path, exclusive_create: bool = False) -> "RunLock":
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if exclusive_create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except (PermissionError, IsADirectoryError, NotADirectoryError) as e:
            raise UserError(f"{path}: cannot lock the run ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UserError(
                f"{path.parent}: the run is in use by another process (pid {holder}); "
                "wait for it to finish or stop it, then resume"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(fd, path)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = -1


def _claim(path: Path) -> RunLock | None:
    """Take ``path`` for a new run, or None when another run has it (never shares one)."""
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        if not path.is_dir() or any(path.iterdir()):
            return None  # an earlier run (or a file) has the name
    try:
        return RunLock.acquire(path / LOCK, exclusive_create=True)
    except FileExistsError:
        return None  # another process claimed the same empty directory first


# --------------------------------------------------------------------------- the run directory
class RunDir:
    """One run's directory, ``<train.output_dir>/<run_name>/``: written by the trainer, read
    by ``inspect-allocation``, ``report``, ``eval --run`` and resume."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.eval_dir = self.path / "eval"
        self.lock: RunLock | None = None
        self.notes: list[str] = []
        """What the readers skipped (a torn last line), for the commands to print."""
        self._config: dict[str, Any] | None = None
        self._made_parents: Path | None = None

    @property
    def name(self) -> str:
        return self.path.name

    # ------------------------------------------------------------------ creation
    @classmethod
    def planned(cls, cfg: RunConfig, announce: Callable[[str], Any] | None = None) -> "RunDir":
        """Claim a fresh directory for a new run (atomically, with the lock held).

        The name is ``train.run_name`` (or a dated default); when it is taken, by a finished
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
                    lock = _claim(path)
            except (NotADirectoryError, PermissionError, FileNotFoundError) as e:
                raise UserError(f"train.output_dir: cannot create {path} ({e.strerror})") from None
            if lock is not None:
                if n > 1 and announce:
                    announce(f"run directory {parent / name} is taken; this run uses {path}")
                run = cls(path)
                run.lock, run._made_parents = lock, made
                return run
        raise UserError(f"train.run_name: {parent / name} and 998 suffixed names are taken")

    def make(self, cfg: RunConfig) -> "RunDir":
        """Create the subdirectories and write the resolved config."""
        with disk_errors(self.path):
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            self.eval_dir.mkdir(exist_ok=True)
        self.write_config(cfg)
        return self

    @classmethod
    def create(cls, cfg: RunConfig, announce: Callable[[str], Any] | None = None) -> "RunDir":
        return cls.planned(cfg, announce).make(cfg)

    def abandon(self) -> None:
        """Remove a directory claimed by :meth:`planned` when the run failed before its
        first step (bad config, missing model): nothing but our own files is removed."""
        ours = {LOCK, "config.yaml", ".config.yaml.tmp", "checkpoints", "eval"}
        entries = {p.name for p in self.path.iterdir()} if self.path.is_dir() else set()
        empty_dirs = all(not any((self.path / d).iterdir()) for d in ("checkpoints", "eval") if d in entries)
        if entries <= ours and empty_dirs:
            shutil.rmtree(self.path, ignore_errors=True)
            with contextlib.suppress(OSError):  # the output directories made for it, if empty
                for d in [self.path.parent, *self.path.parent.parents]:
                    if self._made_parents is None or self._made_parents not in [d, *d.parents]:
                        break
                    d.rmdir()
        self.release()

    @classmethod
    def open_existing(cls, path: str | Path) -> "RunDir":
        run = cls(Path(path))
        if not (run.path / "config.yaml").is_file():
            raise UserError(f"--resume {path}: not a run directory (no config.yaml)")
        return run

    def acquire(self) -> "RunDir":
        """Hold ``run.lock`` (resume): refused with one line when another process has it."""
        if self.lock is None:
            with disk_errors(self.path / LOCK):
                self.lock = RunLock.acquire(self.path / LOCK)
        return self

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def write_config(self, cfg: RunConfig) -> None:
        write_text_atomic(self.path / "config.yaml", dump_config(cfg))
        self._config = None

    # ------------------------------------------------------------------ logs (writer)
    def append(self, log: str, row: dict) -> None:
        self.append_many(log, [row])

    def append_many(self, log: str, rows: Iterable[dict]) -> None:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if text:
            with disk_errors(self.path / log), open(self.path / log, "a") as f:
                f.write(text)
                f.flush()

    def write_eval(self, step: int, result: dict) -> None:
        with disk_errors(self.eval_dir):
            self.eval_dir.mkdir(exist_ok=True)
        write_json_atomic(self.eval_dir / f"step-{step}.json", result)

    def write_summary(self, summary: dict) -> None:
        write_json_atomic(self.path / "summary.json", summary)

    # ------------------------------------------------------------------ logs (reader)
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

    def read_log(self, log: str) -> JsonlContent:
        """A log's records under the torn-last-line rule; notes land in :attr:`notes`."""
        path = self.path / log
        if not path.is_file():
            return JsonlContent([])
        content = read_jsonl(path)
        self.notes.extend(n for n in content.notes if n not in self.notes)
        return content

    def metrics(self) -> list[dict]:
        return self.read_log("metrics.jsonl").records

    def eval_steps(self) -> dict[int, Path]:
        """The trainer's evaluation files by step (other files in eval/, e.g. a rescored
        copy ``step-6.rescored.json``, are the user's and are left alone)."""
        found = {}
        for f in self.eval_dir.glob("step-*.json"):
            m = _EVAL_FILE.match(f.name)
            if m:
                found[int(m.group(1))] = f
        return found

    # ------------------------------------------------------------------ resume
    def keep_logs_until(self, step: int, warn: Callable[[str], Any], dry_run: bool = False) -> None:
        """Cut the logs back to ``step`` (the checkpoint's) before a resume re-runs later steps.

        Lines up to ``step`` are kept byte for byte; a torn last line is removed with a
        warning; any other damaged line refuses the resume, naming ``file:line``.
        ``dry_run`` only reads (the check made before the model loads).
        """
        for log in LOGS:
            path = self.path / log
            if not path.is_file():
                continue
            try:
                content = read_jsonl(path)
                late = {i for i, r in enumerate(content.records) if _step_of(r, path, content.lines[i]) > step}
            except UserError as e:
                raise UserError(f"--resume: {e}; resume keeps every logged line: repair or delete "
                                "that line by hand, then resume again") from None
            data = path.read_bytes()
            if dry_run or not (late or content.torn_at is not None or data[-1:] not in (b"", b"\n")):
                continue  # (a whole last line killed before its newline gets one: the next append)
            if content.torn_at is not None:
                warn(f"{path}:{content.torn_line}: removed a torn last line (cut short when the run stopped)")
            kept = b"".join(data[a:b] for i, (a, b) in enumerate(content.spans) if i not in late)
            write_text_atomic(path, kept if kept.endswith(b"\n") or not kept else kept + b"\n")
        for s, f in self.eval_steps().items():
            if s > step and not dry_run:
                f.unlink()

    def check_history(self, step: int) -> list[int]:
        """Refuse a resume whose logs lack a line the checkpoint at ``step`` covers, naming
        the file and the step (a resume re-runs only later steps, so a lost line would stay
        lost, or leave a gap). Reads only; call it after ``keep_logs_until(dry_run=True)``.

        Returns the evaluation steps to log again: the checkpoint's own evaluation, whose
        line a cut-short write lost while ``eval/step-N.json`` was written (the trainer logs
        it again from that file, as the uninterrupted run did).
        """
        if step < 0:
            return []  # no checkpoint: every line is re-run
        metrics = self._covered("metrics.jsonl", step)
        evals = {s for s, r in metrics if "eval/accuracy" in r}
        _require(self.path / "metrics.jsonl", step, "training line",
                 set(range(1, step + 1)) - {s for s, r in metrics if "eval/accuracy" not in r})
        lost = {s for s in self.eval_steps() if s <= step and s not in evals}
        _require(self.path / "metrics.jsonl", step, "evaluation line", lost - {step})
        records = self._covered("allocation.jsonl", step)
        _require(self.path / "allocation.jsonl", step, "record", set(range(1, step + 1)) - {s for s, _ in records})
        path = self.path / "completions.jsonl"
        content = read_jsonl(path) if path.is_file() else JsonlContent([])
        torn = _torn_step(path, content)
        if torn is not None and torn <= step:
            raise UserError(f"--resume: {path}:{content.torn_line}: the line of step {torn} is cut short "
                            f"and the checkpoint (step {step}) covers it; {_KEEP}")
        if lost:
            read_eval_line(self.eval_steps()[step])  # damaged: refused before anything changes
        return sorted(lost)

    def _covered(self, log: str, step: int) -> list[tuple[int, dict]]:
        """(step, record) of a log's lines; the file must exist when the checkpoint covers steps."""
        path = self.path / log
        if not path.is_file():
            raise UserError(f"--resume: {path}: no such file, and the checkpoint (step {step}) covers "
                            f"its lines up to step {step}; {_KEEP}")
        content = read_jsonl(path)
        return [(_step_of(r, path, n), r) for r, n in zip(content.records, content.lines)]

    def checkpoint_step(self, checkpoint: Path | None) -> int:
        """The step a checkpoint holds (-1 for none: a resume from the start)."""
        if checkpoint is None:
            return -1
        try:
            return int(json.loads((checkpoint / "data_state.json").read_text())["step"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"--resume: checkpoint {checkpoint} is damaged (data_state.json: {e}); "
                            f"delete {checkpoint} to resume from the one before") from None

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_steps(self) -> list[int]:
        """Steps of the committed checkpoints (``step-N/COMPLETE``), oldest first."""
        return sorted(s for s, d in self._step_dirs().items() if (d / COMPLETE).is_file())

    def latest_checkpoint(self) -> Path | None:
        steps = self.checkpoint_steps()
        return self.checkpoints / f"step-{steps[-1]}" if steps else None

    def intact_checkpoint(self, warn: Callable[[str], Any]) -> Path | None:
        """The newest checkpoint that verifies against its manifest (resume holds the lock).

        Each newer damaged one gets a warning; when checkpoints exist but none verifies,
        the resume is refused rather than silently restarted from step 0.
        """
        self._recover()
        damaged: list[str] = []
        for step in reversed(self.checkpoint_steps()):
            path = self.checkpoints / f"step-{step}"
            problem = verify_checkpoint(path)
            if problem is None:
                for d in damaged:
                    warn(f"checkpoint {d}; resuming from {path.name} instead (the damaged one is replaced when the run gets there)")
                return path
            damaged.append(f"{path.name} is damaged ({problem})")
        if damaged:
            raise UserError(f"--resume {self.path}: no intact checkpoint: {'; '.join(damaged)}")
        return None

    def pick_checkpoint(self, name: str | None, warn: Callable[[str], Any]) -> Path:
        """``eval --run``: checkpoint ``name`` (e.g. ``step-20``) or the newest intact one,
        verified; read-only, so a run still training can be evaluated."""
        if name is None:
            for step in reversed(self.checkpoint_steps()):
                path = self.checkpoints / f"step-{step}"
                problem = verify_checkpoint(path)
                if problem is None:
                    return path
                warn(f"checkpoint {path.name} is damaged ({problem}); using the one before")
            raise UserError(f"--run {self.path}: no intact checkpoint yet (checkpoints/step-N/COMPLETE)")
        path = self.checkpoints / name
        if not _STEP_DIR.match(name) or not (path / COMPLETE).is_file():
            have = ", ".join(f"step-{s}" for s in self.checkpoint_steps()) or "none"
            raise UserError(f"--checkpoint {name}: no complete checkpoint of that name (have: {have})")
        problem = verify_checkpoint(path)
        if problem is not None:
            raise UserError(f"--checkpoint {name}: damaged ({problem})")
        return path

    def begin_checkpoint(self, step: int) -> Path:
        """A fresh temporary directory to fill; :meth:`commit_checkpoint` publishes it."""
        self._recover()
        tmp = self.checkpoints / f".tmp-step-{step}"
        with disk_errors(tmp):
            tmp.mkdir(parents=True)
        return tmp

    def discard_checkpoint(self, tmp: Path) -> None:
        shutil.rmtree(tmp, ignore_errors=True)

    def commit_checkpoint(self, tmp: Path, step: int, keep: int) -> Path:
        """Seal ``tmp`` (manifest, COMPLETE, fsync), rename it to ``step-N``, then rotate.

        At every instant some intact checkpoint is on disk: an older one is removed only
        after the new one is committed, and a same-step one is renamed aside (restored by
        :meth:`_recover` if the process dies before the new one is in place).
        """
        with disk_errors(tmp):
            write_json_atomic(tmp / MANIFEST, {"step": step, "files": _hash_files(tmp)})
            write_text_atomic(tmp / COMPLETE, str(step))
            _fsync_dir(tmp)
        final = self.checkpoints / f"step-{step}"
        aside = self.checkpoints / f".old-step-{step}"
        if final.exists():
            os.replace(final, aside)
        os.replace(tmp, final)
        _fsync_dir(self.checkpoints)
        shutil.rmtree(aside, ignore_errors=True)
        self._rotate(step, keep)
        return final

    def _step_dirs(self) -> dict[int, Path]:
        found = {}
        for d in self.checkpoints.glob("step-*"):
            m = _STEP_DIR.match(d.name)
            if m and d.is_dir():
                found[int(m.group(1))] = d
        return found

    def _rotate(self, step: int, keep: int) -> None:
        """Remove checkpoints past ``step`` (an abandoned, damaged future) and all but the
        ``keep`` newest up to ``step``; each is renamed away before it is deleted, so a
        half-deleted directory never looks like a checkpoint."""
        steps = sorted(self._step_dirs())
        doomed = [s for s in steps if s > step] + [s for s in steps if s <= step][:-keep]
        for s in doomed:
            trash = self.checkpoints / f".trash-step-{s}"
            os.replace(self.checkpoints / f"step-{s}", trash)
            shutil.rmtree(trash, ignore_errors=True)

    def _recover(self) -> None:
        """Finish what a killed commit or rotation left: restore a same-step checkpoint
        renamed aside, delete trash and unfinished temporary checkpoints."""
        if not self.checkpoints.is_dir():
            return
        for d in self.checkpoints.glob(".old-step-*"):
            final = self.checkpoints / d.name[len(".old-"):]
            if (final / COMPLETE).is_file():
                shutil.rmtree(d, ignore_errors=True)
            else:
                if final.exists():
                    shutil.rmtree(final)
                os.replace(d, final)
        for pattern in (".trash-step-*", ".tmp-step-*"):
            for d in self.checkpoints.glob(pattern):
                shutil.rmtree(d, ignore_errors=True)


_KEEP = ("resume keeps every logged line and re-runs only later steps: restore the file "
         "from a copy, or start a new run")


def _require(path: Path, step: int, what: str, missing: set[int]) -> None:
    if missing:
        first = min(missing)
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UserError(f"--resume: {path}: the {what} of step {first} is missing{more}, and the "
                        f"checkpoint (step {step}) covers it; {_KEEP}")


def _torn_step(path: Path, content: JsonlContent) -> int | None:
    """The step a torn last line was written for, when its prefix says so."""
    if content.torn_at is None:
        return None
    with open(path, "rb") as f:
        f.seek(content.torn_at)
        m = re.match(rb'\s*\{"step": (\d+)[,}]', f.read(64))
    return int(m.group(1)) if m else None


def read_eval_line(path: Path) -> tuple[float, dict[str, float], int]:
    """(accuracy, accuracy per set, samples) of an evaluation file ``eval/step-N.json``."""
    try:
        data = json.loads(path.read_text())
        sets = {name: float(s["accuracy"]) for name, s in data["sets"].items()}
        return float(data["accuracy"]), sets, sum(len(s["samples"]) for s in data["sets"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"--resume: {path}: damaged ({type(e).__name__}: {e}); it holds the checkpoint's "
                        "evaluation, whose metrics.jsonl line was cut short: restore it, or start a new run") from None


def _step_of(row: dict, path: Path, line: int) -> int:
    try:
        return int(row.get("step", 0))
    except (TypeError, ValueError):
        raise UserError(f"{path}:{line}: 'step' is {row.get('step')!r}, not an integer") from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
        os.fsync(f.fileno())  # the file reaches the disk before COMPLETE does
    return h.hexdigest()


def _hash_files(root: Path) -> dict[str, dict]:
    files = {}
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.name not in (MANIFEST, COMPLETE):
            files[f.relative_to(root).as_posix()] = {"size": f.stat().st_size, "sha256": _sha256(f)}
    return files


def _legacy_problem(path: Path) -> str | None:
    """A checkpoint from before manifests: its zip CRCs and JSON files are what can be checked."""
    import zipfile

    state = path / "trainer_state.pt"
    try:
        with zipfile.ZipFile(state) as z:
            bad = z.testzip()
        for name in ("allocator.json", "data_state.json"):
            json.loads((path / name).read_text())
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        return f"{e.filename if isinstance(e, OSError) and e.filename else state.name}: {e}"
    return f"{state.name}: member {bad} fails its CRC" if bad else None


def verify_checkpoint(path: Path) -> str | None:
    """None when ``path`` is intact, else what is wrong (a missing, resized or changed file).

    A checkpoint written before manifests existed gets the checks its files allow.
    """
    if not (path / COMPLETE).is_file():
        return "no COMPLETE marker"
    if not (path / MANIFEST).is_file():
        return _legacy_problem(path)
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{MANIFEST} is unreadable"
    for name, want in files.items():
        f = path / name
        if not f.is_file():
            return f"{name} is missing"
        size = f.stat().st_size
        if size != want["size"]:
            return f"{name} has {size} bytes, the manifest says {want['size']}"
        if _sha256(f) != want["sha256"]:
            return f"{name} does not match its sha256 in the manifest"
    return None


# --------------------------------------------------------------------------- resume checks
_MAY_DIFFER = ("train.output_dir", "train.run_name")
"""Keys a run's config.yaml may hold differently from its checkpoint's (a moved directory)."""


def _flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_resume_config(run: RunDir, cfg: RunConfig, checkpoint: Path | None, steps: int | None,
                        warn: Callable[[str], Any]) -> None:
    """Refuse a resume whose config disagrees with the checkpoint's, naming the keys.

    ``train.steps`` may change (``--steps``, or edited in config.yaml: applied, with a
    note) but never below the checkpoint's step: a run is kept or extended, not shortened.
    Any other edited key (a seed, a learning rate) is refused, never half-applied.
    """
    at = run.checkpoint_step(checkpoint)
    target = steps if steps is not None else cfg.train.steps
    if target < at:
        flag = f"--steps {steps}" if steps is not None else f"{run.path / 'config.yaml'}: train.steps={target}"
        raise UserError(f"{flag}: the run's checkpoint is at step {at}; a resume keeps or extends a "
                        f"run, it cannot shorten it (use --steps {at} or more)")
    saved = checkpoint / "config.yaml" if checkpoint is not None else None
    if saved is None or not saved.is_file():
        return  # no checkpoint yet, or one written before checkpoints carried their config
    now, then = _flat(load_yaml(run.path / "config.yaml")), _flat(load_yaml(saved))
    changed = [k for k in sorted(now.keys() | then.keys())
               if now.get(k) != then.get(k) and k not in _MAY_DIFFER]
    if "train.steps" in changed:
        changed.remove("train.steps")
        if steps is None:
            warn(f"train.steps {then.get('train.steps')} -> {now.get('train.steps')} (edited in config.yaml): applied")
    if changed:
        diffs = ", ".join(f"{k} is {now.get(k)!r} (the checkpoint has {then.get(k)!r})" for k in changed)
        raise UserError(f"{run.path / 'config.yaml'}: {diffs}; a resume continues the run's saved config: "
                        "restore the value, or start a new run with the new one")


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


def is_disk_full(error: BaseException, path: Path) -> bool:
    """Whether ``error`` (raised while writing under ``path``) came from a full disk.

    Libraries wrap the OSError (torch: ``RuntimeError ... unexpected pos`` with the ENOSPC
    as its context), so the chain is searched, and a disk with under 1 MiB free counts too.
    """
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _NO_SPACE:
            return True
        if "No space left on device" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        return shutil.disk_usage(_existing(Path(path))).free < 2**20
    except OSError:
        return False
