"""A run's record of what made it: ``provenance.json`` in the run directory.

One JSON object: vigor's version (with the commit and a dirty flag when it runs from a git
checkout), Python and the libraries on a step's path, the machine (device and its name, the
CPU's instruction set torch uses, thread counts), the seed and the rule of every seed derived
from it (vigor_cli/run/seeding.py), the task's examples (count and a hash of their content), and
every file the config names: data, held-out data, reward files, the environment's file
(``--env FILE.py:Class``) and a local model, each with its path as given, size, rows (data)
and sha256 (not the modules those files import). Layout in docs/run-directory.md.

Details: docs/modules.md.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

from vigor_cli import __version__
from vigor_cli.errors import UserError

RECORD = "provenance.json"
"""The record's file name in a run directory."""
FORMAT = 1

LIBRARIES = ("torch", "transformers", "peft", "trl", "vllm", "datasets", "accelerate", "tokenizers", "safetensors",
             "huggingface-hub", "numpy", "math-verify", "sympy", "pyarrow", "bitsandbytes", "pydantic", "PyYAML")
"""Distributions on a step's path whose versions a record keeps (None: not installed)."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PYTHONHASHSEED",
                    "CUBLAS_WORKSPACE_CONFIG")
"""Environment variables that change threads or arithmetic, kept as set (None: unset)."""
FILE_KEYS = ("task.data", "task.eval_data", "task.train_path", "task.data_dir")
"""Config keys that name data files or folders (task.rewards' files and a local model are added)."""
MODEL_HASH_LIMIT = 2 * 1024**3
"""A local model folder larger than this is recorded by file sizes only (hashing it would cost
more than loading it)."""
_CHUNK = 1 << 20


# --------------------------------------------------------------------------- the environment
def git_state(root: Path | None = None) -> dict | None:
    """{'commit', 'dirty'} of the checkout vigor runs from (dirty: a tracked file differs from
    the commit; then 'diff_sha256', the hash of ``git diff HEAD``, tells two edits apart),
    None when it is not a git checkout or git is unavailable."""
    root = root or Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
        if not status.strip():
            return {"commit": commit, "dirty": False}
        diff = subprocess.run(["git", "-C", str(root), "diff", "HEAD", "--no-ext-diff", "--binary"],
                              capture_output=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": True, "diff_sha256": hashlib.sha256(diff).hexdigest()}


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(device: str | None = None) -> dict:
    """The machine: platform, CPU and the instruction set torch's kernels use, the GPUs, and
    ``device`` (the run's: 'cpu', 'cuda:0') with its name."""
    import torch

    cuda = torch.cuda.is_available()
    out = {
        "platform": platform.platform(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": torch.version.cuda, "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
    }
    if device is not None:
        out["device"] = device
        out["device_name"] = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else out["cpu"]
    return out


def threads() -> dict:
    import torch

    return {"torch_intra_op": torch.get_num_threads(), "torch_inter_op": torch.get_num_interop_threads(),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            **{name: os.environ.get(name) for name in THREAD_VARIABLES}}


def environment(device: str | None = None) -> dict:
    """What the code and the machine are, apart from any run: vigor, Python, libraries,
    machine, threads."""
    return {
        "vigor": {"version": __version__, **(git_state() or {})},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "libraries": library_versions(),
        "machine": machine(device),
        "threads": threads(),
    }


# --------------------------------------------------------------------------- files
def _sha256(path: Path, digest: Any = None) -> Any:
    h = digest or hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h


def describe_path(path: Path, hash_limit: int | None = None) -> dict:
    """kind ('file', 'folder' or 'missing'), size in bytes, and sha256: of the file, or of a
    folder's regular files (each one's relative path and content, in sorted order). A folder
    over ``hash_limit`` bytes gets sizes only (sha256 None)."""
    if path.is_file():
        return {"kind": "file", "size": path.stat().st_size, "sha256": _sha256(path).hexdigest()}
    if not path.is_dir():
        return {"kind": "missing", "size": None, "sha256": None}
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    size = sum(p.stat().st_size for p in files)
    if hash_limit is not None and size > hash_limit:
        return {"kind": "folder", "size": size, "files": len(files), "sha256": None}
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(path)).encode() + b"\0")
        _sha256(p, h)
    return {"kind": "folder", "size": size, "files": len(files), "sha256": h.hexdigest()}


def _local(text: str) -> Path | None:
    """The local path a data spec names (``PATH`` or ``PATH:SPLIT``), None for a hub id."""
    p = Path(text).expanduser()
    if p.exists():
        return p
    head, sep, tail = text.rpartition(":")
    if sep and head and "/" not in tail and Path(head).expanduser().exists():
        return Path(head).expanduser()
    return None


def named_files(cfg: Any) -> list[dict]:
    """Every file or folder the config names, described (:func:`describe_path`), each with
    the key that names it and its path as given; a hub id is recorded as such."""
    from vigor_cli.user.rewards import is_file_spec

    out = []
    for key in FILE_KEYS:
        section, name = key.split(".")
        given = getattr(getattr(cfg, section), name)
        if given:
            path = _local(str(given))
            out.append({"key": key, "given": str(given),
                        **(describe_path(path) if path is not None else {"kind": "hub", "size": None, "sha256": None})})
    for spec in cfg.task.rewards:
        if is_file_spec(spec):
            path = Path(spec.rpartition(":")[0]).expanduser()
            out.append({"key": "task.rewards", "given": spec, **describe_path(path)})
    env = getattr(cfg.task, "env", None)
    if env and is_file_spec(env):
        out.append({"key": "task.env", "given": env, **describe_path(Path(env.rpartition(":")[0]).expanduser())})
    model = cfg.model.name_or_path
    path = None if model == "tiny" else _local(model)
    if model == "tiny" or path is not None:
        from vigor_cli.model.loading import TINY_DIR

        out.append({"key": "model.name_or_path", "given": model,
                    **describe_path(TINY_DIR if model == "tiny" else path, MODEL_HASH_LIMIT)})
    return out


def examples_digest(examples: Iterable[Any]) -> dict:
    """Count and sha256 of examples' content (uid, question, answer): the data a run trained
    or evaluated on, whatever file, folder or hub dataset it came from."""
    h, n = hashlib.sha256(), 0
    for ex in examples:
        h.update(json.dumps([ex.uid, ex.question, ex.answer], sort_keys=True, default=str).encode() + b"\n")
        n += 1
    return {"examples": n, "sha256": h.hexdigest()}


def rows_read(cfg: Any, task: Any, train_rows: int) -> dict[str, int]:
    """Config key -> rows the task read from the data it names: ``train_rows`` for the
    training data, the task's tables for the held-out data (custom task)."""
    tables = getattr(task, "tables", {})
    out = {"task.data": len(tables["train"].rows)} if "train" in tables else {}
    if "eval" in tables:
        out["task.eval_data"] = len(tables["eval"].rows)
    if cfg.task.train_path:
        out["task.train_path"] = train_rows
    return out


# --------------------------------------------------------------------------- the record
TRL_SEED_RULES = {"trl": "the TRL path (vigor_cli/integrations/trl.py): transformers.set_seed(train.seed) seeds "
                            "Python's, numpy's and torch's generators; TRL's generation (transformers' generate or "
                            "vLLM) samples, seeded by torch's generator with the call's seed plus the rank"}
"""The seed rules of a run trained through TRL (its sampling is TRL's, not vigor's sampler)."""


def build(cfg: Any, device: str, train_examples: Iterable[Any], eval_sets: dict[str, list], dropped: int,
          rows: dict[str, int] | None = None, trainer: str = "vigor train") -> dict:
    """A new run's record. ``rows``: config key -> rows read from that data (None where the
    task read no table from it); ``trainer``: 'vigor train' or 'trl' (whose seeds follow TRL)."""
    from vigor_cli.run.seeding import SEED_RULES

    files = named_files(cfg)
    for f in files:
        f["rows"] = (rows or {}).get(f["key"]) if f["key"] in FILE_KEYS else None
    return {
        "format": FORMAT,
        "written": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **environment(device),
        "trainer": trainer,
        "seeds": {"train.seed": cfg.train.seed, "rules": SEED_RULES if trainer == "vigor train" else TRL_SEED_RULES},
        "task": {"name": cfg.task.name, "train": {**examples_digest(train_examples), "dropped": dropped},
                 "eval": {name: examples_digest(exs) for name, exs in eval_sets.items()}},
        "files": files,
        "resumes": [],
    }


def read(run_path: str | Path) -> dict | None:
    """A run's record, None when it has none (a run from before records, or one stopped
    before it loaded); a damaged one is one line."""
    from vigor_cli.user.files import parse_json

    path = Path(run_path) / RECORD
    if not path.is_file():
        return None
    record = parse_json(path.read_bytes(), str(path))
    if not isinstance(record, dict):
        raise UserError(f"{path}: not a JSON object")
    return record


def write(run_path: str | Path, record: dict) -> None:
    from vigor_cli.atomic import disk_errors, write_text_atomic

    with disk_errors(Path(run_path)):
        Path(run_path).mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(run_path) / RECORD, json.dumps(record, indent=1) + "\n")


# --------------------------------------------------------------------------- comparing
def _flat_versions(record: dict) -> dict[str, Any]:
    """The keys a record's environment is compared on, as 'name': value."""
    out: dict[str, Any] = {}
    v = record.get("vigor", {})
    out["vigor"] = v.get("version")
    if "commit" in v:
        out["vigor commit"] = v.get("commit")
        out["vigor checkout dirty"] = v.get("dirty")
        out["vigor uncommitted changes (sha256 of git diff)"] = v.get("diff_sha256")
    out["python"] = record.get("python", {}).get("version")
    for name, version in record.get("libraries", {}).items():
        out[name] = version
    m = record.get("machine", {})
    for key in ("device_name", "cpu_capability", "cuda"):
        out[f"machine {key}"] = m.get(key)
    t = record.get("threads", {})
    out["torch threads"] = t.get("torch_intra_op")
    return out


THREADS = "torch threads"
"""The thread count's name among the versions: compared only once vigor has set it (the model
loaded: model.cpu_threads), never before."""


def version_changes(recorded: dict, now: dict, threads: bool = True) -> list[tuple[str, Any, Any]]:
    """(name, recorded, now) for every version, machine or thread count that differs
    (``threads``: the thread count too; ``now`` then read after vigor set it)."""
    a, b = _flat_versions(recorded), _flat_versions(now)
    return [(k, a.get(k), b.get(k)) for k in a if k in b and a.get(k) != b.get(k) and (threads or k != THREADS)]


def thread_change(recorded: dict | None) -> tuple[Any, Any] | None:
    """(recorded, now) when the torch thread count set here (read after the model loaded) is
    not the run's, else None."""
    if recorded is None:
        return None
    was, now = recorded.get("threads", {}).get("torch_intra_op"), threads()["torch_intra_op"]
    return (was, now) if was is not None and was != now else None


def file_changes(recorded: dict) -> list[tuple[dict, dict]]:
    """(recorded entry, the file now) for every recorded file whose content changed or is gone
    (paths as given, read from the current folder: a resume works in the run's launch folder)."""
    out = []
    for entry in recorded.get("files", []):
        if entry.get("kind") in ("hub", None) or entry.get("sha256") is None:
            continue
        given = entry["given"]
        path = Path(given.rpartition(":")[0]) if entry["key"] in ("task.rewards", "task.env") else _local(given)
        if entry["key"] == "model.name_or_path" and given == "tiny":
            from vigor_cli.model.loading import TINY_DIR

            path = TINY_DIR
        now = describe_path(path.expanduser(), MODEL_HASH_LIMIT) if path is not None else {"kind": "missing", "sha256": None}
        if now.get("sha256") != entry["sha256"]:
            out.append((entry, now))
    return out


def _file_line(entry: dict, now: dict) -> str:
    if now.get("kind") == "missing":
        return f"{entry['given']} ({entry['key']}) is gone"
    return (f"{entry['given']} ({entry['key']}) changed since the run started "
            f"(sha256 {entry['sha256'][:12]}, now {now['sha256'][:12] if now.get('sha256') else 'not hashed'})")


def differences(recorded: dict, now: dict | None = None, threads: bool = True) -> list[str]:
    """One line per recorded version, machine property or file that differs from here
    (``threads``: the thread count too, which only a record written after the model loaded has right)."""
    now = now or environment(recorded.get("machine", {}).get("device"))
    lines = [f"{k}: recorded {a}, here {b}" for k, a, b in version_changes(recorded, now, threads)]
    return lines + [_file_line(e, n) for e, n in file_changes(recorded)]


def check_resume(run_path: Path, allow_changed_files: bool, warn: Callable[[str], Any]) -> dict | None:
    """Before a resume loads anything: refuse (one line naming the file) when a data, reward
    or model file changed since the run started, unless ``allow_changed_files``; warn for each
    library, Python or vigor version that changed. Returns what changed (for :func:`add_resume`),
    None when the run has no record."""
    record = read(run_path)
    if record is None:
        return None
    changed = file_changes(record)
    if changed and not allow_changed_files:
        entry, now = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise UserError(f"--resume: {_file_line(entry, now)}{more}; resuming would mix it into the run: restore "
                        "it, or resume with --allow-changed-files (recorded in provenance.json)")
    now = environment(record.get("machine", {}).get("device"))
    versions = version_changes(record, now, threads=False)  # threads: once the model is loaded (thread_change)
    for name, was, is_now in versions:
        warn(f"{name} was {was} when the run started, is {is_now} now (recorded in {RECORD})")
    for entry, n in changed:
        warn(f"{_file_line(entry, n)}: resuming with it (--allow-changed-files; recorded in {RECORD})")
    return {"versions": {k: {"recorded": a, "now": b} for k, a, b in versions},
            "files": [{"key": e["key"], "given": e["given"], "sha256": n.get("sha256"), "recorded_sha256": e["sha256"]}
                      for e, n in changed]}


def add_resume(run_path: Path, step: int, changes: dict | None) -> None:
    """Append this resume to the record: the step it continues from and what changed."""
    record = read(run_path)
    if record is None:
        return
    record.setdefault("resumes", []).append({
        "from_step": step, "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **(changes or {"versions": {}, "files": []})})
    write(run_path, record)


# --------------------------------------------------------------------------- shown
def summary_lines(record: dict | None) -> list[str]:
    """A few lines for `vigor report` and `inspect-allocation`: what made the run."""
    if record is None:
        return ["no provenance.json (a run from before runs recorded what made them)"]
    v, m, t = record.get("vigor", {}), record.get("machine", {}), record.get("threads", {})
    commit = f" @ {v['commit'][:10]}{' (dirty)' if v.get('dirty') else ''}" if v.get("commit") else ""
    libs = record.get("libraries", {})
    shown = ", ".join(f"{k} {libs[k]}" for k in ("torch", "transformers", "peft", "trl", "vllm", "datasets") if libs.get(k))
    lines = [f"vigor {v.get('version')}{commit}; Python {record.get('python', {}).get('version')}; {shown}",
             f"{m.get('device', '?')} ({m.get('device_name', '?')}, {m.get('cpu_capability', '?')}), "
             f"torch threads {t.get('torch_intra_op')}; seed {record.get('seeds', {}).get('train.seed')}"]
    for f in record.get("files", []):
        rows = f" {f['rows']} rows," if f.get("rows") is not None else ""
        sha = f" sha256 {f['sha256'][:12]}" if f.get("sha256") else ""
        size = f" {f['size']:,} bytes," if f.get("size") is not None else ""
        lines.append(f"{f['key']} {f['given']}:{size}{rows}{sha}")
    for r in record.get("resumes", []):
        what = [f"{k} {c['recorded']} -> {c['now']}" for k, c in r.get("versions", {}).items()]
        what += [f"{c['given']} changed (allowed)" for c in r.get("files", [])]
        lines.append(f"resumed from step {r.get('from_step')}" + (f": {'; '.join(what)}" if what else ""))
    return lines
