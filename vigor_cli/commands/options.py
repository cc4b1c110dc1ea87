"""The command-line options every command shares, with their bounds checked at parse time.

One definition per kind of value: a seed, a count, a time limit, a memory limit, an engine,
a device, an output path. Each command builds its options from these factories (Typer's
``Annotated`` style), so ``--seed 1e23``, ``--timeout inf`` or ``--output file/o.json``
is refused the same way in every command: one line naming the flag, exit 2, before any
work starts. An option that sets a config key (``--steps`` is ``train.steps``) takes
its bounds and choices from that key's declaration in :mod:`vigor_cli.config`, so the
flag and the key can never disagree.
"""

from __future__ import annotations

import json
import math
import typing
from pathlib import Path
from typing import Any, Callable, Optional

import typer

SEED_MAX = 2**32 - 1
"""Largest seed (NumPy's limit; every seed stream derived from it still fits in 64 bits)."""
TIMEOUT_MAX_S = 86_400.0
"""Longest per-case or per-test time limit: one day."""
MEMORY_MB_MAX = 1 << 20
"""Largest per-test memory limit: 1 TiB."""


class Bounds(typing.NamedTuple):
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False

    def text(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_num(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {_num(self.high)}")
        return " and ".join(parts) or "a number"

    def holds(self, x: float) -> bool:
        if self.low is not None and (x < self.low or (self.low_open and x == self.low)):
            return False
        if self.high is not None and (x > self.high or (self.high_open and x == self.high)):
            return False
        return True


def _num(x: float) -> str:
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _bounded(bounds: Bounds, integer: bool, key: Optional[str] = None) -> Callable[[Any], Any]:
    """A Typer callback refusing a value outside ``bounds`` (and NaN or infinity for floats);
    the message names the config key the flag sets, if any."""
    of = f" for {key}" if key else ""

    def check(value: Any) -> Any:
        if value is None:
            return value
        for x in value if isinstance(value, (list, tuple)) else [value]:
            if not integer and not math.isfinite(x):
                raise typer.BadParameter(f"{x} is not a finite number{of}")
            if not bounds.holds(x):
                raise typer.BadParameter(f"{_num(x)} is out of range{of}: must be {bounds.text()}")
        return value

    return check


def _choice(choices: tuple[str, ...], key: Optional[str] = None) -> Callable[[Any], Any]:
    of = f" for {key}" if key else ""

    def check(value: Any) -> Any:
        if value is not None and value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}{of}")
        return value

    return check


def number(*flags: str, help: str, low: Optional[float] = None, high: Optional[float] = None,
           low_open: bool = False, high_open: bool = False, integer: bool = True,
           key: Optional[str] = None, **kw: Any) -> Any:
    """An int (or, with ``integer=False``, a finite float) option within the given bounds."""
    bounds = Bounds(low, high, low_open, high_open)
    if low is not None or high is not None:
        help = f"{help} [{bounds.text()}]"
    return typer.Option(*flags, help=help, callback=_bounded(bounds, integer, key), **kw)


def count(*flags: str, help: str, low: int = 1, **kw: Any) -> Any:
    """A count of things (steps, prompts, samples): an integer >= ``low`` (1 by default)."""
    return number(*flags, help=help, low=low, **kw)


def seed(*flags: str, help: str, **kw: Any) -> Any:
    """A seed: an integer in [0, SEED_MAX]."""
    return number(*(flags or ("--seed",)), help=help, low=0, high=SEED_MAX, **kw)


def timeout(*flags: str, help: str, **kw: Any) -> Any:
    """A time limit in seconds: finite, > 0, at most TIMEOUT_MAX_S."""
    return number(*(flags or ("--timeout",)), help=help, low=0, low_open=True, high=TIMEOUT_MAX_S,
                  integer=False, **kw)


def memory_mb(*flags: str, help: str, **kw: Any) -> Any:
    """A memory limit in MiB: 1 to MEMORY_MB_MAX."""
    return number(*(flags or ("--memory-mb",)), help=help, low=1, high=MEMORY_MB_MAX, **kw)


def choice(*flags: str, help: str, choices: tuple[str, ...], key: Optional[str] = None, **kw: Any) -> Any:
    """One of ``choices`` (listed in the error); with no choices known, any value (the config's
    own validation then judges it)."""
    if not choices:
        return typer.Option(*flags, help=help, **kw)
    return typer.Option(*flags, help=help, callback=_choice(choices, key), **kw)


# --------------------------------------------------------------------------- config keys
def key_field(key: str) -> Any:
    """The pydantic field that declares a dotted config key (any depth: model.lora.r, a
    strategy's own allocation.knapsack.min, an entry of a mapping: task.fields.prompt)."""
    from pydantic.fields import FieldInfo

    from vigor_cli.config import field_info

    try:
        return field_info(key)
    except KeyError:
        mapping, name = key.rsplit(".", 1)
        field = field_info(mapping)
        if typing.get_origin(field.annotation) is not dict:
            raise
        return FieldInfo(annotation=Optional[str], default=None,
                         description=f"the {name!r} entry of {mapping}: {field.description}")


_field = key_field


def key_bounds(key: str) -> Bounds:
    """The bounds a config key declares (``Field(ge=..., gt=..., le=..., lt=...)``)."""
    low = high = None
    low_open = high_open = False
    for m in key_field(key).metadata:
        for attr, is_low, is_open in (("ge", True, False), ("gt", True, True),
                                      ("le", False, False), ("lt", False, True)):
            value = getattr(m, attr, None)
            if value is None:
                continue
            if is_low:
                low, low_open = value, is_open
            else:
                high, high_open = value, is_open
    return Bounds(low, high, low_open, high_open)


def shown_default(key: str) -> str:
    """A key's built-in default as --help shows it: ``0.5``, ``true``, ``unset`` (None)."""
    value = key_field(key).get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def key_choices(key: str) -> tuple[str, ...]:
    """The names a config key accepts (its ``Literal[...]``)."""
    ann = key_field(key).annotation
    args = typing.get_args(ann) if typing.get_origin(ann) is typing.Literal else ()
    return tuple(str(a) for a in args)


def for_key(key: str, *flags: str, help: str, integer: Optional[bool] = None, **kw: Any) -> Any:
    """The option that sets config key ``key``: that key's bounds (or choices), checked when
    the command line is parsed. Extra bounds in ``kw`` (low=, high=) narrow the key's own."""
    if "show_default" not in kw:  # the key's built-in default (the flag's own default is None)
        kw["show_default"] = shown_default(key)
    choices = key_choices(key)
    if choices:
        return choice(*flags, help=help, choices=choices, key=key, **kw)
    ann = key_field(key).annotation
    if ann not in (int, float, Optional[int], Optional[float]):
        return typer.Option(*flags, help=help, **kw)  # the config's own validation judges it
    b = key_bounds(key)
    extra = {k: kw.pop(k) for k in ("low", "high", "low_open", "high_open") if k in kw}
    bounds = b._replace(**extra)
    if integer is None:
        integer = ann in (int, Optional[int])
    return number(*flags, help=help, low=bounds.low, high=bounds.high, low_open=bounds.low_open,
                  high_open=bounds.high_open, integer=integer, key=key, **kw)


def engine(*flags: str, help: str = "", **kw: Any) -> Any:
    from vigor_cli.settings import known_names

    names = tuple(known_names("engine").split(", "))  # the engine registry's names, and auto
    kw.setdefault("show_default", shown_default("engine.kind"))
    return choice(*(flags or ("--engine",)), help=help or f"engine.kind: {', '.join(names)}.",
                  choices=names, key="engine.kind", **kw)


def device(*flags: str, help: str = "", **kw: Any) -> Any:
    names = key_choices("model.device")
    kw.setdefault("show_default", shown_default("model.device"))
    return choice(*(flags or ("--device",)), help=help or f"model.device: {', '.join(names)}.",
                  choices=names, key="model.device", **kw)


# --------------------------------------------------------------------------- output paths
def writable_problem(directory: Path) -> Optional[str]:
    """Why nothing can be written in ``directory`` or, when it does not exist yet, in the
    nearest folder above it that does (where it would be made); None when a file can be.

    Tried for real (a hidden file made and removed at once): permission bits say nothing of
    a read-only mount, and root passes them all."""
    import errno
    import os
    import tempfile

    where = directory
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        return f"{where} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".vigor-write-check-", dir=where)
    except OSError as e:
        reason = "read-only file system" if e.errno == errno.EROFS else (e.strerror or str(e)).lower()
        return f"cannot write in {where} ({reason})"
    os.close(fd)
    os.unlink(probe)
    return None


def _path_parser(what: str, as_path: bool) -> Callable[[Any], Any]:
    """Typer's parser for a path option: sees the text as typed, so ``''`` (which ``Path``
    would turn into ``.``, the current folder) is refused instead of written into."""

    def parse(value: Any) -> Any:
        if isinstance(value, str) and value.strip() == "":
            raise typer.BadParameter(f"an empty path; give a {what} name")
        if "\x00" in str(value):
            raise typer.BadParameter(f"{str(value)!r} is not a path (it holds a NUL character)")
        return Path(value) if as_path else str(value)

    return parse


def _not_a_regular_file(path: Path) -> Optional[str]:
    """What ``path`` is when something other than a regular file is there (None: nothing, or a
    regular file). Results are written to a temporary file renamed over the path, so a FIFO,
    a device (as root, ``--output /dev/null`` replaced the system's /dev/null) or a socket
    there would be destroyed: refused instead, like a symlink loop."""
    import os
    import stat

    from vigor_cli.user.files import file_kind

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None  # nothing there yet (or a dangling link, replaced like a file)
    except OSError as e:
        return f"cannot be used ({e.strerror or e})"
    return None if stat.S_ISREG(mode) else f"is {file_kind(mode)}"


def _output_path(is_dir: bool) -> Callable[[Any], Any]:
    from vigor_cli.errors import file_in_the_way

    def check(value: Any) -> Any:
        if value is None:
            return value
        path = Path(value)
        if is_dir:
            blocker = file_in_the_way(path)
        else:
            if path.is_dir():
                raise typer.BadParameter(f"{path} is a directory; give a file name")
            special = _not_a_regular_file(path)
            if special is not None:
                raise typer.BadParameter(f"{path} {special}; give a file name (the file is replaced, "
                                         "never written through)")
            blocker = file_in_the_way(path.parent)
        if blocker is not None:
            raise typer.BadParameter(f"cannot write under {path}: {blocker} is a file, not a directory")
        problem = writable_problem(path if is_dir else path.parent)
        if problem is not None:
            raise typer.BadParameter(f"{path}: {problem}")
        return value

    return check


def output_dir(*flags: str, help: str, as_path: bool = True, **kw: Any) -> Any:
    """A directory to write into: not empty text, no regular file at it or above it, and
    writable (checked when the command line is parsed, before any work). The command gets
    a Path (a str with ``as_path=False``)."""
    return typer.Option(*flags, help=help, parser=_path_parser("directory", as_path),
                        callback=_output_path(True), **kw)


def output_file(*flags: str, help: str, as_path: bool = True, **kw: Any) -> Any:
    """A file to write: not empty text, not a directory, no regular file above it, and its
    folder writable (checked when the command line is parsed, before any work)."""
    return typer.Option(*flags, help=help, parser=_path_parser("file", as_path),
                        callback=_output_path(False), **kw)


# --------------------------------------------------------------------------- input paths
def _input_path(value: Any) -> Any:
    if value is None:
        return value
    path = Path(value)
    if not path.exists():
        raise typer.BadParameter(f"{path}: no such file or directory")
    if not path.is_dir():
        from vigor_cli.errors import UserError
        from vigor_cli.user.files import regular_file

        try:
            regular_file(path)  # a FIFO or a device: said as such
        except UserError as e:
            raise typer.BadParameter(str(e)) from None
    return value


def input_path(*flags: str, help: str, **kw: Any) -> Any:
    """An existing file or directory to read from, checked when the command line is parsed
    (what reads it then checks that it is the kind it needs)."""
    return typer.Option(*flags, help=help, parser=_path_parser("file or directory", True),
                        callback=_input_path, **kw)
