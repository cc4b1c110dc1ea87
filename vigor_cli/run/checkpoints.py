"""A run's checkpoint store, ``<run>/checkpoints/step-N/``: sealed, verified, rotated safely.

Details: docs/modules.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable

from vigor_cli import __version__
from vigor_cli.atomic import disk_errors, fsync_dir, write_json_atomic
from vigor_cli.errors import UserError

MANIFEST = "manifest.json"
COMPLETE = "COMPLETE"
RUN_ID = "run-id"
"""The run directory's file holding its random id (written when the run is created), which
every checkpoint of the run records."""
WRITER = f"vigor {__version__}"
"""Recorded in COMPLETE and the manifest: which version wrote the checkpoint."""
STEP_DIR = re.compile(r"^step-(\d+)$")


class CheckpointStore:
    """The ``checkpoints/`` folder of one run: write (begin, commit, rotate) and read (list,
    verify, pick). Writers hold the run's lock; readers do not, and see only sealed ones."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    # ------------------------------------------------------------------ listing
    def step_dirs(self) -> dict[int, Path]:
        """Every ``step-N`` directory, committed or damaged, by step."""
        found = {}
        for d in self.root.glob("step-*"):
            m = STEP_DIR.match(d.name)
            if m and d.is_dir():
                found[int(m.group(1))] = d
        return found

    def steps(self) -> list[int]:
        """Steps of the committed checkpoints (``step-N/COMPLETE``), oldest first."""
        return sorted(s for s, d in self.step_dirs().items() if (d / COMPLETE).is_file())

    def latest(self) -> Path | None:
        """The newest committed checkpoint (not verified: see :meth:`newest_intact`)."""
        steps = self.steps()
        return self.root / f"step-{steps[-1]}" if steps else None

    # ------------------------------------------------------------------ reading
    def newest_intact(self, warn: Callable[[str], Any]) -> Path | None:
        """The newest checkpoint that verifies (resume, holding the lock).

        Each newer damaged one (a failed manifest check, no manifest, no ``COMPLETE``) gets a
        warning; when checkpoints exist but none verifies, the resume is refused rather than
        silently restarted from step 0. None only when there is no checkpoint at all.
        """
        self.recover()
        damaged: list[str] = []
        for step in sorted(self.step_dirs(), reverse=True):
            path = self.root / f"step-{step}"
            problem = verify_checkpoint(path)
            if problem is None:
                for d in damaged:
                    warn(f"checkpoint {d}; resuming from {path.name} instead (the damaged one is replaced when the run gets there)")
                return path
            damaged.append(f"{path.name} is damaged ({problem})")
        if damaged:
            raise UserError(f"--resume {self.root.parent}: no intact checkpoint: {'; '.join(damaged)}")
        return None

    def pick(self, name: str | None, warn: Callable[[str], Any]) -> Path:
        """``eval --run``: checkpoint ``name`` (e.g. ``step-20``) or the newest intact one,
        verified; read-only, so a run still training can be evaluated."""
        if name is None:
            for step in sorted(self.step_dirs(), reverse=True):
                path = self.root / f"step-{step}"
                problem = verify_checkpoint(path)
                if problem is None:
                    return path
                warn(f"checkpoint {path.name} is damaged ({problem}); using the one before")
            raise UserError(f"--run {self.root.parent}: no intact checkpoint yet (checkpoints/step-N/COMPLETE)")
        path = self.root / name
        if not STEP_DIR.match(name) or not path.is_dir():
            have = ", ".join(f"step-{s}" for s in self.steps()) or "none"
            raise UserError(f"--checkpoint {name}: no complete checkpoint of that name (have: {have})")
        problem = verify_checkpoint(path)
        if problem is not None:
            raise UserError(f"--checkpoint {name}: damaged ({problem})")
        return path

    # ------------------------------------------------------------------ writing
    def begin(self, step: int) -> Path:
        """A fresh temporary directory to fill; :meth:`commit` publishes it."""
        self.recover()
        tmp = self.root / f".tmp-step-{step}"
        with disk_errors(tmp):
            tmp.mkdir(parents=True)
        return tmp

    def discard(self, tmp: Path) -> None:
        shutil.rmtree(tmp, ignore_errors=True)

    def commit(self, tmp: Path, step: int, keep: int) -> Path:
        """Seal ``tmp`` (manifest, COMPLETE, fsync), rename it to ``step-N``, then rotate.

        At every instant some intact checkpoint is on disk: an older one is removed only
        after the new one is committed, and a same-step one is renamed aside (restored by
        :meth:`recover` if the process dies before the new one is in place).
        """
        stamp = {"step": step, "written_by": WRITER}
        run_id = read_run_id(self.root.parent)
        if run_id is not None:
            stamp["run"] = run_id
        with disk_errors(tmp):
            write_json_atomic(tmp / MANIFEST, {**stamp, "files": _hash_files(tmp)})
            write_json_atomic(tmp / COMPLETE, {**stamp, "manifest": MANIFEST})
            fsync_dir(tmp)
        final = self.root / f"step-{step}"
        aside = self.root / f".old-step-{step}"
        if final.exists():
            os.replace(final, aside)
        os.replace(tmp, final)
        fsync_dir(self.root)
        shutil.rmtree(aside, ignore_errors=True)
        self._rotate(step, keep)
        return final

    def _rotate(self, step: int, keep: int) -> None:
        """Remove checkpoints past ``step`` (an abandoned, damaged future) and all but the
        ``keep`` newest up to ``step``; each is renamed away before it is deleted, so a
        half-deleted directory never looks like a checkpoint."""
        steps = sorted(self.step_dirs())
        doomed = [s for s in steps if s > step] + [s for s in steps if s <= step][:-keep]
        for s in doomed:
            trash = self.root / f".trash-step-{s}"
            os.replace(self.root / f"step-{s}", trash)
            shutil.rmtree(trash, ignore_errors=True)

    def recover(self) -> None:
        """Finish what a killed commit or rotation left: restore a same-step checkpoint
        renamed aside, delete trash and unfinished temporary checkpoints."""
        if not self.root.is_dir():
            return
        for d in self.root.glob(".old-step-*"):
            final = self.root / d.name[len(".old-"):]
            if (final / COMPLETE).is_file():
                shutil.rmtree(d, ignore_errors=True)
            else:
                if final.exists():
                    shutil.rmtree(final)
                os.replace(d, final)
        for pattern in (".trash-step-*", ".tmp-step-*"):
            for d in self.root.glob(pattern):
                shutil.rmtree(d, ignore_errors=True)


def step_of(checkpoint: Path | None) -> int:
    """The step a checkpoint holds (-1 for none: a resume from the start)."""
    if checkpoint is None:
        return -1
    try:
        return int(json.loads((checkpoint / "data_state.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise UserError(f"--resume: checkpoint {checkpoint} is damaged (data_state.json: {e}); "
                        f"delete {checkpoint} to resume from the one before") from None


# --------------------------------------------------------------------------- verification
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
        os.fsync(f.fileno())  # the file reaches the disk before COMPLETE does
    return h.hexdigest()


def _hash_names(root: Path) -> list[str]:
    """The files a checkpoint's manifest covers: every file below it but the two seals."""
    return [f.relative_to(root).as_posix() for f in sorted(root.rglob("*"))
            if f.is_file() and f.relative_to(root).as_posix() not in (MANIFEST, COMPLETE)]


def _hash_files(root: Path) -> dict[str, dict]:
    files = {}
    for name in _hash_names(root):
        f = root / name
        files[name] = {"size": f.stat().st_size, "sha256": _sha256(f)}
    return files


def read_run_id(run_dir: Path) -> str | None:
    """The run's id (``run-id``), or None for a run from before ids (or when unreadable)."""
    try:
        text = (Path(run_dir) / RUN_ID).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def _marker(path: Path) -> dict | str | None:
    """``COMPLETE``: its JSON object; ``"legacy"`` for a checkpoint from before versions were
    recorded (a bare step); None when it is unreadable."""
    from vigor_cli.user.files import loads

    try:
        text = (path / COMPLETE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if text.isdigit():
        return "legacy" if _dir_step(path) in (None, int(text)) else None
    try:
        marker = loads(text)
    except (ValueError, RecursionError):
        return None
    return marker if isinstance(marker, dict) and marker.get("written_by") else None


def _dir_step(path: Path) -> int | None:
    m = STEP_DIR.match(path.name)
    return int(m.group(1)) if m else None


def _stamp_problem(path: Path, what: str, stamp: dict) -> str | None:
    """Whether a stamp (``COMPLETE``, the manifest) is this checkpoint's: its step is the one the
    directory is named for, and it was written for this run."""
    step, want = stamp.get("step"), _dir_step(path)
    if isinstance(step, bool) or not isinstance(step, int) or (want is not None and step != want):
        return f"its {what} is for step {step!r}, not {path.name}"
    ours, theirs = read_run_id(path.parent.parent), stamp.get("run")
    if ours is not None and theirs is not None and theirs != ours:
        return f"its {what} was written for another run (run id {str(theirs)[:40]!r}; this run's {RUN_ID} is {ours!r})"
    return None


def _legacy_problem(path: Path) -> str | None:
    """A checkpoint from before manifests: its zip CRCs and JSON files are what can be checked."""
    import zipfile

    state = path / "trainer_state.pt"
    try:
        with zipfile.ZipFile(state) as z:
            bad = z.testzip()
        for name in ("allocator.json", "data_state.json"):
            json.loads((path / name).read_text())
    except RecursionError:
        return "a JSON file nested too deeply"
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        return f"{e.filename if isinstance(e, OSError) and e.filename else state.name}: {e}"
    return f"{state.name}: member {bad} fails its CRC" if bad else None


def verify_checkpoint(path: Path) -> str | None:
    """None when ``path`` is intact, else what is wrong: a missing, added, resized or changed
    file, a marker or manifest that is not this checkpoint's (another step, another run).

    Only a checkpoint older than manifests gets the lesser legacy checks: one whose
    ``COMPLETE`` names a version, or that holds its ``config.yaml`` (both came with
    manifests), is damaged without its manifest.
    """
    from vigor_cli.user.files import loads

    if not (path / COMPLETE).is_file():
        return "no COMPLETE marker"
    marker = _marker(path)
    if marker is None:
        return f"its {COMPLETE} marker is unreadable"
    if not (path / MANIFEST).is_file():
        if marker != "legacy":
            return f"{MANIFEST} is missing (written by {marker.get('written_by')}, which writes one)"
        if (path / "config.yaml").is_file():
            return f"{MANIFEST} is missing (a checkpoint holding config.yaml was written with one)"
        return _legacy_problem(path)
    if marker == "legacy" or marker.get("manifest") != MANIFEST:
        return f"its {COMPLETE} marker is not the one its writer seals a manifest with"
    problem = _stamp_problem(path, COMPLETE, marker)
    if problem is not None:
        return problem
    try:
        manifest = loads((path / MANIFEST).read_text())
        files = manifest["files"]
        wanted = [(str(name), int(want["size"]), str(want["sha256"])) for name, want in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return f"{MANIFEST} is unreadable"
    problem = _stamp_problem(path, MANIFEST, manifest)
    if problem is not None:
        return problem
    on_disk = set(_hash_names(path))
    for name, size_wanted, sha_wanted in wanted:
        if name not in on_disk:
            return f"{name} is missing"
        f = path / name
        size = f.stat().st_size
        if size != size_wanted:
            return f"{name} has {size} bytes, the manifest says {size_wanted}"
        if _sha256(f) != sha_wanted:
            return f"{name} does not match its sha256 in the manifest"
    extra = sorted(on_disk - {name for name, _, _ in wanted})
    if extra:
        return f"{extra[0]} is not in the manifest (a file added since the checkpoint was sealed)"
    state = path / "data_state.json"
    if state.is_file():
        try:
            data = loads(state.read_text())
        except (OSError, ValueError, RecursionError):
            return "data_state.json is unreadable"
        step = data.get("step", _dir_step(path)) if isinstance(data, dict) else None
        if step != _dir_step(path) and _dir_step(path) is not None:
            return f"data_state.json is for step {step!r}, not {path.name}"
    return None
