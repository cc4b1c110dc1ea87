"""Reading records: local JSONL/Parquet files and hub datasets, with one-line errors.

Every failure names the file (and line) or the hub dataset, and for the hub
the local-path flag to use instead, since users are often offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vigor_cli.errors import UserError
from vigor_cli.jsonl import iter_jsonl
from vigor_cli.user_files import regular_file


def read_records(path: str | Path) -> list[dict]:
    """Records of a ``.jsonl``/``.json`` (one object per line) or ``.parquet`` file."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"data file not found: {p}")
    if p.is_dir():
        raise UserError(f"{p} is a directory; expected a .jsonl or .parquet file")
    regular_file(p)  # a FIFO or a device would block or never end: refused before it is opened
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet(p)
    if suffix in (".jsonl", ".json", ".ndjson"):
        return _read_jsonl(p)
    raise UserError(f"{p}: unsupported file type '{suffix}' (use .jsonl or .parquet)")


def _read_jsonl(p: Path) -> list[dict]:
    return [row for _, row in iter_jsonl(p, "a JSON object per line")]


def _read_parquet(p: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    except UserError:
        raise
    except Exception as e:  # pyarrow's errors for corrupt files vary by version
        raise UserError(f"{p}: cannot read as Parquet ({type(e).__name__}: {e})") from None


def require(row: dict, keys: tuple[str, ...] | list[str], where: str) -> None:
    """Raise naming ``where`` and the first key of ``keys`` missing from ``row``."""
    for key in keys:
        if key not in row or row[key] is None:
            raise UserError(f"{where}: missing field '{key}'")


def load_hub(hub_id: str, *, split: str, flag: str, what: str, **kwargs: Any) -> list[dict]:
    """Rows of a hub dataset through ``datasets``; offline or missing -> one line naming ``flag``."""
    from vigor_cli import hub

    hub.quiet()
    reason = None if hub.offline_mode() else hub.unreachable()  # offline mode: the cache only
    if reason is not None:
        raise UserError(f"cannot load {what} from the hub ({hub_id}, split {split}): {reason}; point to "
                        f"local files with {flag} (or set HF_HUB_OFFLINE=1 to use a cached copy)")
    try:
        from datasets import load_dataset

        ds = load_dataset(hub_id, split=split, **kwargs)
    except Exception as e:  # network, auth and offline errors come as many types
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"cannot load {what} from the hub ({hub_id}, split {split}): {reason[:200]}; "
            f"offline? point to local files with {flag}"
        ) from None
    return [dict(r) for r in ds]
