"""One local data file as rows: JSONL, JSON, CSV/TSV and Parquet, every failure in the project's words.

Details: docs/modules.md.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from vigor_cli.errors import UserError
from vigor_cli.user.jsonl import iter_jsonl

FILE_KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
              ".parquet": "parquet"}
"""File suffix -> format :func:`file_table` reads it as."""
CSV_FIELD_MAX = (1 << 31) - 1
"""Longest CSV field read (the csv module's default, 128 KiB, is below a LiveCodeBench test field)."""


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
    files: list[str] = field(default_factory=list)
    """A folder's data files the rows came from (relative to it)."""
    unread: list[str] = field(default_factory=list)
    """A folder's other files, which ``datasets``' split patterns left out."""
    eval_split: str | None = None
    """Read for training from a source with several splits (no ``:SPLIT`` named): the split
    evaluation reads from it (``test``, then ``validation``, ...), if it has one."""

    def where(self, index: int) -> str:
        """``file:LINE`` for a JSONL row, ``SOURCE row N`` (1-based) otherwise."""
        if self.lines is not None:
            return f"{self.source}:{self.lines[index]}"
        return f"{self.source} row {index + 1}"

    def describe(self) -> str:
        """Where the rows came from, in one line: source, kind, split, the files of a folder
        (and those it did not read), rows and columns."""
        split = f", split {self.split}" if self.split else ""
        files = ""
        if self.files:
            files = f"; read {_listed(self.files)}"
            if self.unread:
                files += f"; not read: {_listed(self.unread)}"
        return (f"{self.source} ({self.kind}{split}, {len(self.rows)} rows{files}): columns "
                f"{', '.join(self.columns)}")


def _listed(names: list[str], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return f"{len(names)} file{'s' if len(names) != 1 else ''} ({shown}{more})"


def file_table(p: Path) -> Table:
    """The rows of the data file ``p`` (its kind from its suffix)."""
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
    return _parquet_table(p)


# --------------------------------------------------------------------------- JSON
def _json_table(p: Path) -> Table:
    """A ``.json`` file: one array of objects, or JSON lines."""
    from vigor_cli.user.files import DuplicateKeyError, loads, number_problem

    body = _text(p).lstrip("\ufeff")
    head = body.lstrip()[:1]
    if head == "{" and "\n" in body.strip():
        _one_object_over_lines(p, body)
    if head != "[":
        numbered = list(iter_jsonl(p, "a JSON object per line, or one JSON array of objects"))
        return Table([r for _, r in numbered], str(p), "json", lines=[n for n, _ in numbered])
    try:
        items = loads(body)
    except DuplicateKeyError as e:
        raise UserError(f"{p}: {e}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{p}:{e.lineno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise UserError(f"{p}: nested too deep; not data this tool reads") from None
    except ValueError as e:  # an integer past the 4300-digit limit
        raise UserError(f"{p}: not data this tool reads ({number_problem(e)})") from None
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise UserError(f"{p} row {i + 1}: expected a JSON object, got {type(item).__name__}")
    return Table(items, str(p), "json")


def _one_object_over_lines(p: Path, body: str) -> None:
    """Refuse a file that is one JSON object written over several lines (a pretty-printed
    record, or rows nested under a key): not rows, and said so, naming the nested rows if
    any. A file whose first line opens such an object but that does not parse is named at
    its bad line as such. JSON lines (an object on each line) pass."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        if body.lstrip().splitlines()[0].strip() != "{":
            return  # JSON lines: each line is read, and a bad one named, as a line
        raise UserError(f"{p}:{e.lineno}: not valid JSON ({e.msg}); read as one object written over "
                        "several lines, as its first line opens one") from None
    except (ValueError, RecursionError):
        return  # the reader of rows names these
    if not isinstance(value, dict):
        return
    nested = next((k for k, v in value.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)),
                  None)
    hint = (f"; its key '{nested}' holds a list of {len(value[nested])} objects: save that list as the file"
            if nested is not None else "; for one row, write the object on one line")
    keys = ", ".join(list(value)[:6]) + (", ..." if len(value) > 6 else "")
    raise UserError(f"{p}: one JSON object written over {body.strip().count(chr(10)) + 1} lines (keys: {keys}), "
                    f"not rows: a .json file holds JSON lines (one object per line) or one array of objects{hint}")


def _text(p: Path) -> str:
    from vigor_cli.user.files import TEXT_MAX_BYTES, read_text

    return read_text(p, limit=max(TEXT_MAX_BYTES, p.stat().st_size))


# --------------------------------------------------------------------------- CSV / TSV
def _csv_table(p: Path, kind: str) -> Table:
    """CSV/TSV, every column as text (the header names them), an empty cell null."""
    from vigor_cli.user.files import open_binary

    sep = "\t" if kind == "tsv" else ","
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_MAX))
    rows: list[dict] = []
    with open_binary(p) as raw, open(raw.fileno(), encoding="utf-8-sig", newline="", closefd=False) as f:
        reader = csv.reader(f, delimiter=sep, strict=True)
        start = 1  # the line a record starts on (a quoted field may span lines)
        try:
            header = next(reader, None)
            if not header or not any(h.strip() for h in header):
                raise UserError(f"{p}:1: no header line (the first line names the columns)")
            if len(set(header)) != len(header) or any(not h.strip() for h in header):
                raise UserError(f"{p}:1: the header has an empty or repeated column name ({', '.join(header)})")
            start = reader.line_num + 1
            for fields in reader:
                if fields and len(fields) != len(header):
                    raise UserError(f"{p}:{start}: {len(fields)} fields, but the header names {len(header)} "
                                    f"({', '.join(header)}); a field holding '{sep}' needs quotes")
                if fields:  # not a blank line
                    rows.append({h: (v if v != "" else None) for h, v in zip(header, fields)})
                start = reader.line_num + 1
        except UnicodeDecodeError:  # the reader decodes in blocks: find the byte in the file
            line, byte = _first_bad_utf8(p)
            raise UserError(f"{p}:{line}: not UTF-8 text (byte 0x{byte:02x}); save it as UTF-8") from None
        except csv.Error as e:
            unclosed = " (a quote opened there is never closed?)" if "end of data" in str(e) else ""
            raise UserError(f"{p}:{start}: not {kind.upper()} this tool reads ({e}){unclosed}") from None
    if not rows:
        raise UserError(f"{p}: no rows (only the header line: {', '.join(header)})")
    return Table(rows, str(p), kind)


NEWLINE = b"\n"


def _first_bad_utf8(p: Path) -> tuple[int, int]:
    """(line, byte) of the first byte of ``p`` that is not UTF-8, read in blocks."""
    import codecs

    from vigor_cli.user.files import open_binary

    decoder, line = codecs.getincrementaldecoder("utf-8")(), 1
    with open_binary(p) as raw:
        while True:
            block = raw.read(1 << 20)
            try:
                decoder.decode(block, final=not block)  # the end: a character cut short is bad too
            except UnicodeDecodeError as e:  # e.object: the block, after bytes held from the last
                return line + e.object.count(NEWLINE, 0, e.start), e.object[e.start]
            if not block:
                return line, 0
            line += block.count(NEWLINE)


# --------------------------------------------------------------------------- Parquet
def _parquet_table(p: Path) -> Table:
    """A Parquet file through pyarrow (what ``datasets`` reads Parquet with)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(str(p))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise UserError(f"{p}: not a Parquet file this tool reads ({_first(e)})") from None
    names = ", ".join(parquet.schema_arrow.names)
    if parquet.metadata.num_rows == 0:
        raise UserError(f"{p}: no rows (a Parquet file of 0 rows; columns: {names})")
    try:
        rows = parquet.read().to_pylist()
    except UnicodeDecodeError:
        raise UserError(f"{p}: a text column holds bytes that are not UTF-8 (a damaged file?)") from None
    except (pa.ArrowException, OSError, ValueError) as e:
        raise UserError(f"{p}: cannot read its rows ({_first(e)}; a damaged file?)") from None
    return Table(rows, str(p), "parquet")


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:200]
