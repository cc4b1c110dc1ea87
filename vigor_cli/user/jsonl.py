"""The one JSON-lines reader: run logs, allocation records, data files, pass-rate files.

Details: docs/modules.md.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from vigor_cli.errors import UserError
from vigor_cli.user.files import LINE_MAX_BYTES, open_binary, parse_json


@dataclass
class JsonlContent:
    """The records of one file, their byte spans ``(start, end)``, and notes for the user."""

    records: list[dict]
    notes: list[str] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    torn_at: int | None = None
    """Byte offset where a torn last line starts (None: the file ends cleanly)."""
    torn_line: int | None = None


def _parse(path: Path, number: int, raw: bytes, expected: str) -> dict:
    if number == 1 and raw.startswith(codecs.BOM_UTF8):  # a byte-order mark some editors write first
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}:{number}: not UTF-8 text (a binary file?)") from None
    row = parse_json(text, f"{path}:{number}")
    if not isinstance(row, dict):
        raise UserError(f"{path}:{number}: expected {expected}")
    return row


def _torn_prefix(raw: bytes) -> bool:
    """Whether ``raw`` can be the start of a line a writer cut short (see the rule above)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(raw, final=False)  # a character cut in half is still a prefix
    except UnicodeDecodeError:
        return False
    return text.lstrip().startswith("{")


def _scan(path: Path) -> Iterator[tuple[int, int, bytes, bool]]:
    """(line number, byte offset, raw line without newline, had newline) per line; the file
    is opened by the one bounded reader (a FIFO or a device is refused, never waited on)."""
    with open_binary(path) as f:
        offset = 0
        number = 0
        while line := f.readline(LINE_MAX_BYTES + 1):
            number += 1
            if len(line) > LINE_MAX_BYTES:
                raise UserError(f"{path}:{number}: a line longer than {LINE_MAX_BYTES >> 20} MiB; "
                                "not a record this tool reads")
            ended = line.endswith(b"\n")
            yield number, offset, line[:-1] if ended else line, ended
            offset += len(line)


def iter_jsonl_records(
    path: str | Path, expected: str = "a JSON object", allow_torn: bool = False
) -> Iterator[tuple[int, int, int, dict | None]]:
    """Yield ``(line, start, end, record)``; record None marks an allowed torn last line."""
    p = Path(path)
    for number, offset, raw, ended in _scan(p):
        end = offset + len(raw) + (1 if ended else 0)
        if not raw.strip():
            continue
        try:
            row = _parse(p, number, raw, expected)
        except UserError:
            if ended or not allow_torn or not _torn_prefix(raw):
                raise
            yield number, offset, end, None  # torn: the last line, cut short
            return
        yield number, offset, end, row


def read_jsonl(path: str | Path, expected: str = "a JSON object", allow_torn: bool = True) -> JsonlContent:
    """Every record of ``path`` under the rule above (a torn last line: skipped, with a note)."""
    p = Path(path)
    content = JsonlContent([])
    for number, start, end, row in iter_jsonl_records(p, expected, allow_torn):
        if row is None:
            content.torn_at, content.torn_line = start, number
            content.notes.append(f"{p}:{number}: ignored the partial last line {number} (still being written, or cut short)")
            break
        content.records.append(row)
        content.spans.append((start, end))
        content.lines.append(number)
    return content


def iter_jsonl(path: str | Path, expected: str = "a JSON object") -> Iterator[tuple[int, dict]]:
    """Yield (1-based line number, object) of an input file: every bad line is an error.

    ``expected`` completes "expected ..." in the message for a line that is not an object
    (e.g. "a JSON object with fields gold and pred").
    """
    for number, _, _, row in iter_jsonl_records(path, expected, allow_torn=False):
        assert row is not None
        yield number, row
