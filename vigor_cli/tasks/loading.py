"""Reading records: local files and folders the way the ecosystem holds them, and hub datasets.

Details: docs/modules.md.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from vigor_cli.errors import UserError
from vigor_cli.tasks.data_files import FILE_KINDS, Table, file_table
from vigor_cli.user.files import regular_file

TRAIN_SPLITS = ("train",)
"""The split a multi-split folder or hub dataset gives for training (unless PATH:SPLIT)."""
EVAL_SPLITS = ("test", "validation", "valid", "eval")
"""The splits tried, in order, for evaluation."""
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+)?$")


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
        table = file_table(path)
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


def _folder_table(p: Path, split: str | None, *, key: str, purpose: str) -> Table:
    """A ``save_to_disk`` folder (Dataset or DatasetDict), else a folder ``load_dataset`` reads
    (its data files by ``datasets``' split patterns: the table names those it read and the
    folder's other files)."""
    if (p / "dataset_dict.json").is_file() or (p / "state.json").is_file():
        return _saved_table(p, split, key=key, purpose=purpose)
    if not any(p.iterdir()):
        raise UserError(f"{key} {p}: empty folder")
    splits, files = _load_folder(p, f"{key} {p}")
    named = split
    rows, split = _pick_split(splits, split, f"{key} {p}", purpose)
    read = {name: [_relative(f, p) for f in fs] for name, fs in files.items()}
    in_a_split = {f for fs in read.values() for f in fs}
    unread = sorted(str(f.relative_to(p)) for f in p.rglob("*")
                    if f.is_file() and str(f.relative_to(p)) not in in_a_split and not f.name.startswith("."))
    return Table(rows, str(p), "folder", split=split, files=read.get(split or "", []), unread=unread,
                 eval_split=_eval_split(splits, named, split, purpose))


def _eval_split(splits: dict[str, Any], named: str | None, picked: str | None, purpose: str) -> str | None:
    """The split evaluation reads from a source read for training (none named): its first of
    EVAL_SPLITS, when that is not the training split itself."""
    if purpose != "train" or named is not None:
        return None
    return next((s for s in EVAL_SPLITS if s in splits and s != picked), None)


def _saved_table(p: Path, split: str | None, *, key: str, purpose: str) -> Table:
    """A folder ``save_to_disk`` wrote; a damaged one (a JSON file or Arrow data that does not
    read) is one line naming the folder, and the row where it is known."""
    from datasets import load_from_disk

    _quiet_datasets()
    try:
        loaded = load_from_disk(str(p))
    except Exception as e:  # a damaged folder: datasets' errors vary by version
        raise UserError(f"{key} {p}: cannot read as a save_to_disk folder ({_reason(e)})") from None
    splits = dict(loaded.items()) if hasattr(loaded, "keys") else {"train": loaded}
    named = split
    ds, split = _pick_split(splits, split, f"{key} {p}", purpose)
    try:
        rows = ds.to_list()
    except Exception as e:  # Arrow data damaged after its header: text that is not UTF-8, ...
        raise UserError(f"{key} {p}: cannot read its rows{_bad_row(ds)} ({_reason(e)}; a damaged "
                        "save_to_disk folder?)") from None
    return Table(rows, str(p), "save_to_disk", split=split if hasattr(loaded, "keys") else None,
                 eval_split=_eval_split(splits, named, split, purpose))


def _bad_row(ds: Any) -> str:
    """' (row N)': the first row of a dataset that does not read (found row by row)."""
    for i in range(len(ds)):
        try:
            ds[i]
        except Exception:  # the first one that fails, whatever the damage
            return f" (row {i + 1})"
    return ""


def _load_folder(p: Path, where: str) -> tuple[dict[str, list[dict]], dict[str, list[str]]]:
    """``datasets.load_dataset`` on a local folder as ({split: rows}, {split: data files}),
    prepared in a temporary cache (nothing is left in the user's cache for files that may
    change), without progress bars."""
    from datasets import load_dataset_builder

    _quiet_datasets()
    with tempfile.TemporaryDirectory(prefix="vigor-data-") as cache:
        try:
            builder = load_dataset_builder(str(p), cache_dir=cache)
            files = {str(k): [str(f) for f in v] for k, v in (builder.config.data_files or {}).items()}
            builder.download_and_prepare()
            loaded = builder.as_dataset()
            return {str(name): d.to_list() for name, d in loaded.items()}, files  # read before the cache goes
        except Exception as e:  # parse errors come as many types (pandas, pyarrow, datasets)
            raise UserError(f"{where}: cannot read as a folder of data files ({_reason(e)})") from None


def _relative(path: str, folder: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(folder.resolve()))
    except ValueError:
        return path


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
