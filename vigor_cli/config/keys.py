"""The config's keys as data: every dotted key with its default and description, a key's
field and its declared bounds (for the generated reference and the command-line options)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from vigor_cli.config.allocation import AllocationConfig
from vigor_cli.config.run import RunConfig


def _sections_of(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The nested sections of a config model: its model-typed fields, and for the allocation
    section each strategy's own section (``allocation.<strategy>``, from the registry)."""
    out = {name: f.annotation for name, f in model.model_fields.items()
           if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)}
    if model is AllocationConfig:
        out.update(AllocationConfig.section_models())
    return out


def field_info(dotted: str) -> Any:
    """The pydantic FieldInfo of a config key (``allocation.knapsack.min`` too); KeyError if none."""
    *sections, name = dotted.split(".")
    model: Any = RunConfig
    for part in sections:
        model = _sections_of(model)[part]
    return model.model_fields[name]


def describe(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, default, description) for every key: checked by the tests (every key documented)."""
    rows: list[tuple[str, Any, str]] = []
    nested = _sections_of(model)
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        if name in nested:
            rows.extend(describe(nested[name], key + "."))
        else:
            default = field.get_default(call_default_factory=True)
            rows.append((key, default, field.description or ""))
    for name, sub_model in nested.items():
        if name not in model.model_fields:  # a strategy's own section
            rows.extend(describe(sub_model, f"{prefix}{name}."))
    return rows


def field_bounds(dotted: str) -> dict[str, float]:
    """The bounds a key's Field declares, as {'ge'|'gt': low, 'le'|'lt': high} (absent: unbounded
    that side), for command-line options that set a config key: a flag and its key share bounds."""
    found: dict[str, float] = {}
    for meta in field_info(dotted).metadata:
        for side in ("ge", "gt", "le", "lt"):
            if getattr(meta, side, None) is not None:
                found[side] = getattr(meta, side)
    return found
