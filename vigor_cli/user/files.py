"""The one reader of files a user gives (configs, data, cases, programs, results): bounded and total.

Details: docs/modules.md.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO


from vigor_cli.errors import UserError

MAX_DEPTH = 100
"""Deepest nesting of lists and mappings accepted in a JSON or YAML file a user gives."""
MAX_YAML_VALUES = 1_000_000
"""Most values a YAML file may expand to through its aliases."""
CONFIG_MAX_BYTES = 16 << 20
"""Largest YAML config (a resolved run config is a few KiB)."""
TEXT_MAX_BYTES = 64 << 20
"""Largest program, completion or single-record JSON file read whole."""
LINE_MAX_BYTES = 1 << 30
"""Longest JSONL line (LiveCodeBench records carry their private tests: tens of MB)."""

class FormatError(UserError):
    """Text that does not parse (or breaks a rule above): ``source[:line]: reason``."""

    def __init__(self, source: str, reason: str, line: int | None = None):
        self.source, self.reason, self.line = source, reason, line
        super().__init__(f"{source}{'' if line is None else f':{line}'}: {reason}")


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def regular_file(path: str | Path, what: str = "") -> Path:
    """``path`` when it is a regular file (symlinks followed); else one line saying what it is.

    ``what`` prefixes the message (``"--input "``, ``"task.train_path="``), so it names the
    flag or key as well as the path.
    """
    p = Path(path)
    if str(path) == "":
        raise UserError(f"{what}'': an empty path; give a file")
    if "\x00" in str(path):
        raise UserError(f"{what}{str(path)!r}: not a path (it holds a NUL character)")
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UserError(f"{what}{p}: no such file") from None
    except NotADirectoryError:
        raise UserError(f"{what}{p}: no such file (a part of the path is a file, not a directory)") from None
    except OSError as e:
        raise UserError(f"{what}{p}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{what}{p}: is a directory; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{what}{p}: not a regular file ({file_kind(st.st_mode)}); give a file")
    return p


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a FIFO (named pipe)", "a directory")."""
    if stat.S_ISDIR(mode):
        return "a directory"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_binary(path: str | Path, what: str = "") -> BinaryIO:
    """``path`` opened for reading, after :func:`regular_file` (never blocks on a FIFO).

    ``O_NONBLOCK`` closes the window where the file is swapped for a FIFO between the check
    and the open; the flag is cleared again for the reads.
    """
    p = regular_file(path, what)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise UserError(f"{what}{p}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{what}{p}: not a regular file; give a file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: str | Path, what: str = "", limit: int = TEXT_MAX_BYTES) -> bytes:
    """The whole file, refused past ``limit`` bytes."""
    with open_binary(path, what) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UserError(f"{what}{path}: larger than {_size(limit)}; not a file of this kind")
    return data


def read_text(path: str | Path, what: str = "", limit: int = TEXT_MAX_BYTES) -> str:
    """The whole file as UTF-8 text, refused past ``limit`` bytes or when it is not UTF-8."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{what}{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                        f"{e.start}); give a text file") from None


def check_depth(value: Any, where: str, limit: int = MAX_DEPTH) -> Any:
    """``value`` when its lists and mappings nest at most ``limit`` deep (walked without
    recursion); else one line naming ``where``."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise UserError(f"{where}: nested deeper than {limit} levels; not data this tool reads")
        stack.extend((c, depth + 1) for c in children)
    return value


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"duplicate key {key[:80]!r} in an object; JSON keeps only the last, so "
                         "write each key once")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return value


def loads(text: str | bytes) -> Any:
    """``json.loads`` refusing a duplicate key (:class:`DuplicateKeyError`, a ValueError): the
    one JSON parser of files the tool reads (data, cases, results, run logs, checkpoints)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def parse_json(text: str | bytes, where: str) -> Any:
    """``json.loads`` that is total: bad JSON, a duplicate key and deep nesting are one line
    naming ``where``."""
    try:
        value = loads(text)
    except DuplicateKeyError as e:
        raise UserError(f"{where}: {e}") from None
    except RecursionError:
        raise UserError(f"{where}: nested deeper than {MAX_DEPTH} levels; not data this tool reads") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text") from None
    except ValueError as e:  # an integer past Python's 4300-digit limit for reading one
        raise UserError(f"{where}: not data this tool reads ({number_problem(e)})") from None
    return check_depth(value, where)


def number_problem(exc: ValueError) -> str:
    """Why a parser's ValueError that is not a syntax error happened, short (an integer of
    more digits than Python converts: ``sys.get_int_max_str_digits()``)."""
    text = str(exc)
    return "an integer of more than 4300 digits" if "integer string conversion" in text else text[:120]


def read_json(path: str | Path, what: str = "", limit: int = TEXT_MAX_BYTES) -> Any:
    """A whole-file JSON document, read under :func:`read_text`'s rules."""
    return parse_json(read_text(path, what, limit), f"{what}{path}")


# --------------------------------------------------------------------------- YAML
@functools.lru_cache(maxsize=1)
def _strict_loader() -> type:
    """PyYAML's safe loader, refusing duplicate keys, deep nesting and alias bombs (built on
    first use: the sandbox and the verifiers import this module and need no YAML)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        source = "<text>"

        def compose_node(self, parent: Any, index: Any) -> Any:
            depth = getattr(self, "_depth", 0)
            if depth >= MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise FormatError(self.source, f"nested deeper than {MAX_DEPTH} levels", mark.line + 1)
            self._depth = depth + 1
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth = depth

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[tuple[str, str], int] = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    line = key_node.start_mark.line + 1
                    first = seen.setdefault((key_node.tag, key_node.value), line)
                    if first != line:
                        raise FormatError(self.source, f"duplicate key {key_node.value!r} (first on line {first}); "
                                          "YAML keeps only the last, so write each key once", line)
            return super().construct_mapping(node, deep)

    return StrictLoader


def _expanded_size(node: Any) -> int:
    """How many values ``node`` stands for once its aliases are expanded (memoised per node)."""
    import yaml

    sizes: dict[int, int] = {}
    stack = [(node, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in sizes:
            continue
        children = []
        if isinstance(n, yaml.SequenceNode):
            children = n.value
        elif isinstance(n, yaml.MappingNode):
            children = [c for pair in n.value for c in pair]
        if done or not children:
            sizes[id(n)] = 1 + sum(sizes.get(id(c), 0) for c in children)
            continue
        stack.append((n, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(node)]


def parse_yaml(text: str, source: str) -> Any:
    """YAML text to Python values under the rules above; errors name ``source`` and the line."""
    import yaml

    try:
        loader = _strict_loader()(text)  # its reader refuses control characters here
    except yaml.YAMLError as e:
        raise FormatError(source, f"not valid YAML ({getattr(e, 'reason', None) or str(e).splitlines()[0]})") from None
    loader.source = source
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_YAML_VALUES:
            raise FormatError(source, f"its aliases expand to over {MAX_YAML_VALUES:,} values")
        return loader.construct_document(node)
    except RecursionError:
        raise FormatError(source, f"nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise FormatError(source, f"not valid YAML ({problem})", mark.line + 1 if mark else None) from None
    except ValueError as e:  # a constructor's: an integer past the 4300-digit limit
        raise FormatError(source, f"not valid YAML ({number_problem(e)})") from None
    finally:
        loader.dispose()
