"""Reading JSON-lines files written by people or other tools, with errors that name file:line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from vigor_cli.errors import UserError


def iter_jsonl(path: str | Path, expected: str = "a JSON object") -> Iterator[tuple[int, dict]]:
    """Yield (1-based line number, object) for every non-blank line of ``path``.

    A missing file, a line that is not JSON, or a line that is not an object raises
    ``UserError`` naming the file and line. ``expected`` completes "expected ..." in
    that last message (e.g. "a JSON object with fields gold and pred").
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: no such file")
    with p.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{p}:{number}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise UserError(f"{p}:{number}: expected {expected}")
            yield number, row
