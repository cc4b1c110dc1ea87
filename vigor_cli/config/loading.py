"""Building a :class:`RunConfig` from defaults, a YAML file, flags and ``--set key=value``;
a validation error becomes one line naming the key and where its value came from. Also the
resolved config written back as YAML."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ValidationError

from vigor_cli.config.base import ConfigError
from vigor_cli.config.run import RunConfig
from vigor_cli.errors import UserError


def _format_validation_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "<root>"
    kind = first["type"]
    if kind == "extra_forbidden":
        return f"{source}: unknown config key '{key}'"
    if kind == "task_rule":  # the message names the key and the task
        return f"{source}: {first['msg']}"
    msg = first["msg"].removeprefix("Value error, ").removeprefix(f"{key}: ")
    if kind == "value_error" and (not first["loc"] or msg.startswith(f"{key}.")):
        return f"{source}: {msg}"  # a rule across sections or keys: the message names its keys
    got = first.get("input")
    shown = repr(got) if not isinstance(got, dict) else "a mapping"
    return f"{source}: bad value for '{key}': {msg} (got {shown})"


_COPIED_FROM = {"allocation.rollouts_per_prompt": "allocation.group_size"}
"""Keys a validator fills from another key when only that one is given (AllocationConfig's
``_budget_from_old_key``): an error in the copy names the key the user set."""


def _source_of(err: ValidationError, given: dict[str, str], default: str) -> str:
    """Where the offending value came from: the ``--set`` (or flag) that set the key the error
    names (or, for a rule across keys, a key its message names); else the file, or 'config'."""
    first = err.errors()[0]
    loc, text = ".".join(str(p) for p in first["loc"]), first["msg"]
    if _COPIED_FROM.get(loc) in given and loc not in given:
        loc = _COPIED_FROM[loc]  # its value came from the key given (an older config's name)
    latest_first = list(reversed(given.items()))  # the last one given wins, as in the tree
    for key, source in latest_first:
        if loc and (loc == key or loc.startswith(key + ".")):
            return source
    for key, source in latest_first:
        if key in text and (not loc or key.startswith(loc + ".")):
            return source
    for key, source in latest_first:  # a key under the error's place (an unknown 'nosuch.key')
        if loc and key.startswith(loc + "."):
            return source
    for key, source in latest_first:  # the message names a section of the key given
        parts = key.split(".")
        if any(".".join(parts[:n]) in text for n in range(len(parts) - 1, 1, -1)):
            return source
    return default


def _refuse_nul(tree: Any, given: dict[str, str], default: str, prefix: str = "") -> None:
    """No key takes text with a NUL character (a path with one is no path: the OS refuses it,
    later, with a traceback); one line naming where it came from."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, str) and "\x00" in v:
            source = next((src for g, src in reversed(given.items()) if key == g or key.startswith(g + ".")), default)
            raise ConfigError(f"{source}: {key} holds a NUL character ({v[:60]!r}); no key takes one")
        _refuse_nul(v, given, default, f"{key}.")


def _set_dotted(tree: dict, dotted: str, value: Any, source: str) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: '{p}' is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``key.path=value`` override; the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value, e.g. allocation.alpha=0.25")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: empty key")
    from vigor_cli.user.files import FormatError, parse_yaml

    try:
        value = parse_yaml(raw, f"--set {key}") if raw.strip() else ""
    except FormatError as e:
        reason = e.reason if e.reason.startswith("not valid YAML") else f"not valid YAML: {e.reason}"
        raise ConfigError(f"--set {key}={raw[:80]}: the value is {reason}") from None
    return key, value


def load_yaml(path: str | Path) -> dict:
    """A YAML config file as a dict, read by the one bounded reader (vigor_cli/user/files.py):
    not a regular file, too big, not UTF-8, not YAML, a duplicate key or deep nesting is
    one ConfigError line naming the file (and line)."""
    from vigor_cli.user.files import CONFIG_MAX_BYTES, parse_yaml, read_bytes

    p = Path(path)
    try:
        raw = read_bytes(p, limit=CONFIG_MAX_BYTES)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{p}: not a UTF-8 text file (a YAML run config is expected)") from None
        data = parse_yaml(text, str(p))
    except ConfigError:
        raise
    except UserError as e:
        raise ConfigError(str(e).replace(": no such file", ": config file not found", 1)) from None
    if data is None:  # an empty file, or only comments: a truncated or wrong file, not "defaults"
        raise ConfigError(f"{p}: empty (no keys); a run config is a YAML mapping of sections "
                          "(e.g. 'train: {steps: 10}')")
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping of sections")
    return data


def assemble(
    path: str | Path | None,
    overrides: dict[str, Any] | None,
    sets: list[str] | None,
    flags: dict[str, str] | None,
    context: dict[str, Callable[..., None]],
    tree: dict | None = None,
) -> RunConfig:
    """Defaults <- YAML file <- ``overrides`` (dotted keys from named CLI flags) <- ``--set``,
    validated with ``context`` (the registry checks: ``check_name``, ``strategy_rules``).

    Use :func:`vigor_cli.settings.build_config`, which passes the registry checks. An error
    names where the bad value came from: ``--set key=value``, the flag's key, or the file.
    ``flags`` maps an override's key to the command-line flag that set it, for the message.
    ``tree``: the keys to start from instead of a file (a copy is changed)."""
    import copy

    tree = copy.deepcopy(tree) if tree is not None else load_yaml(path) if path else {}
    given: dict[str, str] = {}
    for k, v in (overrides or {}).items():
        if v is not None:
            flag = (flags or {}).get(k)
            shown = ",".join(map(str, v)) if isinstance(v, list) else v  # a repeated flag's values
            given[k] = f"{flag} {shown} ({k})" if flag else f"{k}={shown} (command-line flag)"
            _set_dotted(tree, k, v, given[k])
    for s in sets or []:
        k, v = parse_override(s)
        given.pop(k, None)
        given[k] = f"--set {s.strip()}"
        _set_dotted(tree, k, v, given[k])
    try:
        cfg = RunConfig.model_validate(tree, context=context)
    except ValidationError as e:
        source = _source_of(e, given, str(path) if path else "config")
        raise ConfigError(_format_validation_error(e, source)) from None
    _refuse_nul(cfg.model_dump(), given, str(path) if path else "config")
    old = cfg.allocation.deprecated_keys()
    if old:  # kept for one release: the flat keys of the built-in strategies, allocation.options
        print(f"note: deprecated allocation keys (removed in the next release): {'; '.join(old)}",
              file=sys.stderr)
    return cfg


def dump_config(cfg: BaseModel) -> str:
    """The resolved config as YAML (what a run directory stores)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
