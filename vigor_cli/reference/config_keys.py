"""The configuration key reference (docs/config-keys.md), written from the typed config itself.

One table per section of :class:`vigor_cli.config.RunConfig` (and per strategy's own section
``allocation.<name>``): every key, its built-in default and its description, as declared.
``python -m vigor_cli.reference.config_keys`` rewrites the page; ``--check`` exits 1 when it is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from vigor_cli.reference.commands import cell, md, write_page

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config-keys.md"

INTRO = """\
# Configuration keys

Generated from the typed config (`vigor_cli/config/`) by `python -m vigor_cli.reference.config_keys`
(do not edit by hand; `tests/test_config_reference.py` keeps it equal to the code). Every key
with its built-in default; a YAML file (`--config`) overrides these, flags override the file,
and `--set section.key=value` overrides anything. How the layers and the checks work:
[configuration.md](configuration.md). The bundled configs (`configs/*.yaml`) set some keys
differently: `vigor train --help` shows both (`[default: (100; tiny-math.yaml: 150)]`).
"""


def shown(value: Any) -> str:
    """A default as a YAML user would write it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def rows(model: Any, prefix: str) -> list[tuple[str, str, str]]:
    """(key, default, description) for every key of ``model`` (an instance with its defaults),
    nested sections flattened with dots."""
    from pydantic import BaseModel

    found = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key = f"{prefix}.{name}"
        description = " ".join((field.description or "").split())
        if isinstance(value, BaseModel):
            found.append((key, "(section)", description or " ".join((type(value).__doc__ or "").split())))
            found += rows(value, key)
        else:
            found.append((key, shown(value), description))
    return found


def sections() -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """(section name, what it is for, its rows), in RunConfig's order; the strategies' own
    sections after ``allocation``."""
    import vigor_cli.settings  # noqa: F401  (the strategies register their sections)
    from vigor_cli.config import AllocationConfig, RunConfig

    config = RunConfig()
    found = []
    for name in RunConfig.model_fields:
        section = getattr(config, name)
        found.append((name, " ".join((type(section).__doc__ or "").split()), rows(section, name)))
        if name == "allocation":
            for strategy, model in sorted(AllocationConfig.section_models().items()):
                found.append((f"allocation.{strategy}", " ".join((model.__doc__ or "").split()),
                              rows(model(), f"allocation.{strategy}")))
    return found


def render() -> str:
    """The whole page."""
    lines = [INTRO]
    for name, doc, table in sections():
        lines += [f"## `{name}`", ""]
        if doc:
            lines += [md(doc).replace("\\|", "|"), ""]
        lines += ["| key | default | what it does |", "| --- | --- | --- |"]
        lines += [f"| `{key}` | `{cell(default)}` | {md(text)} |" for key, default, text in table]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    return write_page(PAGE, render(), "vigor_cli.reference.config_keys", sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
