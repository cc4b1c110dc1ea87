"""Reading records: local files and folders the way the ecosystem holds them, and hub datasets.

:func:`read_table` reads what ``--data`` / ``--eval-data`` (and ``task.train_path``) name:

- a JSONL file (``.jsonl``, ``.ndjson``; the project's one JSONL reader, vigor_cli/jsonl.py:
  an error names ``file:line``) or a ``.json`` file holding JSON lines or one array of objects;
- a CSV or TSV file (``.csv``, ``.tsv``), read by ``datasets`` with every column as text, so
  ``007`` stays ``007`` and an empty cell is null;
- a Parquet file, read by ``datasets``;
- a folder written by ``datasets``' ``save_to_disk`` (a Dataset or a DatasetDict), or any local
  folder ``datasets.load_dataset`` reads (``train.jsonl`` + ``test.jsonl``, ``data/*.parquet``);
- a hub dataset ``org/name`` with an optional ``:split``, through the offline probe
  (vigor_cli/hub.py), so an offline machine gets one line at once.

A folder or hub dataset with several splits gives ``train`` for training and ``test`` (then
``validation``) for evaluation unless ``PATH:SPLIT`` names one; read for training, its table
says which split evaluation would read (:attr:`Table.eval_split`). Rows stay plain dicts. Every
failure is one :class:`UserError` naming the file (and line or row) or the hub dataset; for
the hub, the local-path flag to use instead. No dataset script or pickled payload is run:
``datasets`` 4+ runs no loading scripts, and ``save_to_disk`` folders are Arrow files.
"""

from __future__ import annotations

import csv
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vigor_cli.errors import UserError
from vigor_cli.jsonl import iter_jsonl
from vigor_cli.user_files import regular_file

FILE_KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
              ".parquet": "parquet"}
"""File suffix -> format :func:`read_table` reads it as."""
TRAIN_SPLITS = ("train",)
"""The split a multi-split folder or hub dataset gives for training (unless PATH:SPLIT)."""
EVAL_SPLITS = ("test", "validation", "valid", "eval")
"""The splits tried, in order, for evaluation."""
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+)?$")


@dataclass
class Table:
    """The rows of one data source, and how to name a row in a message."""

    rows: list[dict]
    source: str
    """The source as the user gave it (a path, or ``org/name[:split]``)."""
    kind: str
    """'jsonl', 'json', 'csv', 'tsv', 'parquet', 'save_to_disk', 'folder' or 'hub'."""
    lines: list[int] | None = None
    """The file line of each row (JSONL); None where rows are numbered instead."""
    split: str | None = None
    columns: list[str] = field(default_factory=list)
    """Every column, in first-seen order."""
    eval_split: str | None = None
    """Read for training from a source with several splits (no ``:SPLIT`` named): the split
    evaluation reads from it (``test``, then ``validation``, ...), if it has one."""

    def where(self, index: int) -> str:
        """``file:LINE`` for a JSONL row, ``SOURCE row N`` (1-based) otherwise."""
        if self.lines is not None:
            return f"{self.source}:{self.lines[index]}"
        return f"{self.source} row {index + 1}"


def read_table(spec: str | Path, *, key: str, purpose: str = "train", hub_flag: str | None = None) -> Table:
    """The rows ``spec`` names (see the module docstring); ``key`` (a flag or config key) is
    named in errors; ``purpose`` ('train' or 'eval') picks the default split."""
    text = str(spec).strip()
    if not text:
        raise UserError(f"{key}: empty path")
    path, split = _local(text)
    if path is None:
        if _looks_local(text):
            raise UserError(f"{key} {text}: data file not found")
        hub_id, _, split = text.partition(":")
        return _hub_table(hub_id, split or None, key=key, purpose=purpose, flag=hub_flag or key)
    if path.is_dir():
        table = _folder_table(path, split, key=key, purpose=purpose)
    else:
        if split:
            raise UserError(f"{key} {text}: ':{split}' names a split, which only a folder or hub dataset has")
        regular_file(path)  # a FIFO or a device would block or never end: refused before it is opened
        table = _file_table(path, key=key)
    table.source = text
    if not table.rows:
        raise UserError(f"{key} {text}: no rows")
    table.columns = _columns(table.rows)
    return table


def read_records(path: str | Path) -> list[dict]:
    """Records of a local file or folder (any format :func:`read_table` reads locally)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"data file not found: {p}")
    return read_table(p, key=str(p)).rows


# --------------------------------------------------------------------------- local
def _local(text: str) -> tuple[Path | None, str | None]:
    """(path, split) when ``text`` names something on disk, ``PATH:SPLIT`` included."""
    p = Path(text).expanduser()
    if p.exists():
        return p, None
    head, sep, tail = text.rpartition(":")
    if sep and head and tail and "/" not in tail and Path(head).expanduser().exists():
        return Path(head).expanduser(), tail
    return None, None


def _looks_local(text: str) -> bool:
    """A path that does not exist, rather than a hub id: a known file suffix, an absolute or
    relative path, or not of the form org/name[:split]."""
    base = text.split(":", 1)[0] if not text.startswith(("/", ".", "~")) else text
    return (Path(base).suffix.lower() in FILE_KINDS or text.startswith(("/", "./", "../", "~"))
            or not _HUB_ID.match(text))


def _file_table(p: Path, *, key: str) -> Table:
    kind = FILE_KINDS.get(p.suffix.lower())
    if kind is None:
        raise UserError(f"{p}: unsupported file type '{p.suffix}' (use {', '.join(FILE_KINDS)}, a "
                        "save_to_disk folder, a folder of data files, or a hub dataset org/name)")
    if kind == "jsonl":
        numbered = list(iter_jsonl(p, "a JSON object per line"))
        return Table([r for _, r in numbered], str(p), kind, lines=[n for n, _ in numbered])
    if kind == "json":
        return _json_table(p)
    if kind in ("csv", "tsv"):
        return _csv_table(p, kind)
    return Table(_with_datasets(p, "parquet", {"data_files": str(p)}), str(p), kind)


def _json_table(p: Path) -> Table:
    """A ``.json`` file: one array of objects, or JSON lines."""
    try:
        head = p.read_text(encoding="utf-8").lstrip()[:1]
    except UnicodeDecodeError:
        raise UserError(f"{p}: not UTF-8 text (a binary file?)") from None
    except OSError as e:
        raise UserError(f"{p}: cannot read ({e.strerror or e})") from None
    if head != "[":
        numbered = list(iter_jsonl(p, "a JSON object per line, or one JSON array of objects"))
        return Table([r for _, r in numbered], str(p), "json", lines=[n for n, _ in numbered])
    from vigor_cli.user_files import DuplicateKeyError, loads

    try:
        items = loads(p.read_text(encoding="utf-8"))
    except DuplicateKeyError as e:
        raise UserError(f"{p}: {e}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{p}:{e.lineno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise UserError(f"{p}: nested too deep; not data this tool reads") from None
    except ValueError as e:  # an integer past the 4300-digit limit
        from vigor_cli.user_files import number_problem

        raise UserError(f"{p}: not data this tool reads ({number_problem(e)})") from None
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise UserError(f"{p} row {i + 1}: expected a JSON object, got {type(item).__name__}")
    return Table(items, str(p), "json")


def _csv_table(p: Path, kind: str) -> Table:
    """CSV/TSV through ``datasets``, every column as text (the header names them)."""
    from datasets import Features, Value

    sep = "\t" if kind == "tsv" else ","
    try:
        with p.open(encoding="utf-8", newline="") as f:
            header = next(csv.reader(f, delimiter=sep), None)
    except UnicodeDecodeError:
        raise UserError(f"{p}: not UTF-8 text (a binary file?)") from None
    except OSError as e:
        raise UserError(f"{p}: cannot read ({e.strerror or e})") from None
    except csv.Error as e:
        raise UserError(f"{p}:1: cannot read the header ({e})") from None
    if not header or not any(h.strip() for h in header):
        raise UserError(f"{p}:1: no header line (the first line names the columns)")
    if len(set(header)) != len(header) or any(not h.strip() for h in header):
        raise UserError(f"{p}:1: the header has an empty or repeated column name ({sep.join(header)})")
    features = Features({name: Value("string") for name in header})
    return Table(_with_datasets(p, "csv", {"data_files": str(p), "sep": sep, "features": features}), str(p), kind)


def _folder_table(p: Path, split: str | None, *, key: str, purpose: str) -> Table:
    """A ``save_to_disk`` folder (Dataset or DatasetDict), else a folder ``load_dataset`` reads."""
    if (p / "dataset_dict.json").is_file() or (p / "state.json").is_file():
        from datasets import load_from_disk

        _quiet_datasets()
        try:
            loaded = load_from_disk(str(p))
        except Exception as e:  # a damaged folder: datasets' errors vary by version
            raise UserError(f"{key} {p}: cannot read as a save_to_disk folder ({_reason(e)})") from None
        splits = dict(loaded.items()) if hasattr(loaded, "keys") else {"train": loaded}
        named = split
        ds, split = _pick_split(splits, split, f"{key} {p}", purpose)
        return Table(ds.to_list(), str(p), "save_to_disk", split=split if hasattr(loaded, "keys") else None,
                     eval_split=_eval_split(splits, named, split, purpose))
    if not any(p.iterdir()):
        raise UserError(f"{key} {p}: empty folder")
    splits = _load_dataset_quietly(str(p), {}, f"{key} {p}", "a folder of data files")
    named = split
    rows, split = _pick_split(splits, split, f"{key} {p}", purpose)
    return Table(rows, str(p), "folder", split=split, eval_split=_eval_split(splits, named, split, purpose))


def _eval_split(splits: dict[str, Any], named: str | None, picked: str | None, purpose: str) -> str | None:
    """The split evaluation reads from a source read for training (none named): its first of
    EVAL_SPLITS, when that is not the training split itself."""
    if purpose != "train" or named is not None:
        return None
    return next((s for s in EVAL_SPLITS if s in splits and s != picked), None)


def _with_datasets(p: Path, builder: str, kwargs: dict) -> list[dict]:
    splits = _load_dataset_quietly(builder, kwargs, str(p), "CSV" if builder == "csv" else builder.title())
    return _pick_split(splits, None, str(p), "train")[0]


def _load_dataset_quietly(path: str, kwargs: dict, where: str, what: str) -> dict[str, list[dict]]:
    """``datasets.load_dataset`` on local data as {split: rows}, prepared in a temporary cache
    (nothing is left in the user's cache for a file that may change), without progress bars."""
    from datasets import load_dataset

    _quiet_datasets()
    with tempfile.TemporaryDirectory(prefix="vigor-data-") as cache:
        try:
            loaded = load_dataset(path, cache_dir=cache, **kwargs)
            return {name: d.to_list() for name, d in loaded.items()}  # read before the cache goes
        except Exception as e:  # parse errors come as many types (pandas, pyarrow, datasets)
            raise UserError(f"{where}: cannot read as {what} ({_reason(e)})") from None


def _pick_split(splits: dict[str, Any], split: str | None, where: str, purpose: str) -> tuple[Any, str | None]:
    """The entry of ``split`` in {split: data}; without one, the purpose's default split, or
    the only one."""
    names = list(splits)
    if split is not None:
        if split not in names:
            raise UserError(f"{where}: no split '{split}' (splits: {', '.join(names)})")
        return splits[split], split
    for name in (TRAIN_SPLITS if purpose == "train" else EVAL_SPLITS):
        if name in names:
            return splits[name], name
    if len(names) == 1:
        return splits[names[0]], names[0]
    raise UserError(f"{where}: several splits ({', '.join(names)}); name one as PATH:SPLIT")


def _quiet_datasets() -> None:
    """No progress bars or info logs from ``datasets`` (loading small files is quick)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # a parse error is our one line


def _reason(e: BaseException) -> str:
    """The innermost cause's first line: datasets wraps parse errors in generation errors."""
    seen = set()
    while (e.__cause__ or e.__context__) is not None and id(e) not in seen:
        seen.add(id(e))
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]


def _columns(rows: list[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for k in row:
            seen.setdefault(k, None)
    return list(seen)


# --------------------------------------------------------------------------- hub
def _hub_table(hub_id: str, split: str | None, *, key: str, purpose: str, flag: str) -> Table:
    if split is not None:
        rows = load_hub(hub_id, split=split, flag=flag, what=f"{key} {hub_id}")
        return Table(rows, f"{hub_id}:{split}", "hub", split=split)
    from datasets import get_dataset_split_names

    names = _hub_call(lambda: get_dataset_split_names(hub_id), hub_id, "(any split)", f"{key} {hub_id}", flag)
    splits = {n: n for n in names}
    picked, _ = _pick_split(splits, None, f"{key} {hub_id}", purpose)
    rows = load_hub(hub_id, split=picked, flag=flag, what=f"{key} {hub_id}")
    return Table(rows, f"{hub_id}:{picked}", "hub", split=picked,
                 eval_split=_eval_split(splits, None, picked, purpose))


def require(row: dict, keys: tuple[str, ...] | list[str], where: str) -> None:
    """Raise naming ``where`` and the first key of ``keys`` missing from ``row``."""
    for key in keys:
        if key not in row or row[key] is None:
            raise UserError(f"{where}: missing field '{key}'")


def _hub_call(fn: Any, hub_id: str, split: str, what: str, flag: str) -> Any:
    from vigor_cli import hub

    hub.quiet()
    reason = None if hub.offline_mode() else hub.unreachable()  # offline mode: the cache only
    if reason is not None:
        raise hub.HubUnavailable(f"cannot load {what} from the hub ({hub_id}, split {split}): {reason}; point to "
                        f"local files with {flag} (or set HF_HUB_OFFLINE=1 to use a cached copy)")
    try:
        _quiet_datasets()
        return fn()
    except Exception as e:  # network, auth and offline errors come as many types
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise hub.HubUnavailable(
            f"cannot load {what} from the hub ({hub_id}, split {split}): {reason[:200]}; "
            f"offline? point to local files with {flag}"
        ) from None


def load_hub(hub_id: str, *, split: str, flag: str, what: str, **kwargs: Any) -> list[dict]:
    """Rows of a hub dataset through ``datasets``; offline or missing -> one line naming ``flag``."""
    from datasets import load_dataset

    ds = _hub_call(lambda: load_dataset(hub_id, split=split, **kwargs), hub_id, split, what, flag)
    return [dict(r) for r in ds]
