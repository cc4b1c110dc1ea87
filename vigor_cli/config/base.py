"""What every config section shares: the strict base model, the bounds of counts and seeds,
the check of a key that names a registered thing, and the reading of mode words (off, on)."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from vigor_cli.errors import UserError


class ConfigError(UserError, ValueError):
    """A bad configuration: the message names the key or file and what to change (exit 2)."""


SEED_MAX = 2**32 - 1
"""Largest seed: numpy's legacy seeding takes 32 bits."""
ROLLOUTS_MAX = 4096
"""Most rollouts of one prompt any per-prompt count may ask for."""
TOKENS_MAX = 2**24
"""Largest token count of any length or token budget (16M)."""
STEPS_MAX = 10**7
"""Largest step count, interval or step number."""
TOTAL_ROLLOUTS_MAX = 10**12
"""Largest count of rollouts over a whole run (a stop or evaluation schedule)."""


def _check_name(info: ValidationInfo, key: str, name: Any) -> Any:
    """A key that names a registered thing: the check comes from the caller that knows the
    registries (``check_name(key, name)`` in the validation context, from
    :mod:`vigor_cli.settings`); its ValueError names the registered names. Without that
    context (a default config, an assignment) only the key's type is checked here."""
    check = (info.context or {}).get("check_name")
    if check is not None:
        check(key, name)
    return name


def _scalar_types(annotation: Any) -> set:
    """The plain types a field accepts (through Optional, unions, Annotated and Literal)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _scalar_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_scalar_types(a) for a in typing.get_args(annotation)))
    if origin is Literal:
        return {type(v) for v in typing.get_args(annotation)}
    return {annotation}


def _item_types(annotation: Any) -> set:
    """The plain types the items of a list, tuple or mapping field accept (its values for a
    mapping), through Optional and unions; empty for a field that holds no items."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _item_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_item_types(a) for a in typing.get_args(annotation)))
    if origin in (list, tuple, dict):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return _scalar_types(args[-1]) if args else set()
    return set()


class _Section(BaseModel):
    """Unknown keys are errors; floats must be finite; numbers and switches are strict:
    true is not a number (``--set train.steps=true`` used to run one step) and 1 is not a
    switch. Strings that read as numbers (``1e-5``, which YAML leaves a string) still work."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_kinds(cls, value: Any, info: ValidationInfo) -> Any:
        kinds = _scalar_types(cls.model_fields[info.field_name].annotation)
        if isinstance(value, bool) and bool not in kinds and kinds & {int, float}:
            raise ValueError(f"expected a number, not {str(value).lower()}")
        switch_only = bool in kinds and not kinds & {int, float}
        if switch_only and isinstance(value, (int, float, str)) and not isinstance(value, bool):
            if not (isinstance(value, str) and str in kinds):  # 'auto' where a Literal allows it
                raise ValueError(f"expected true or false, not {value!r}")
        items = _item_types(cls.model_fields[info.field_name].annotation)
        if items & {int, float} and bool not in items and isinstance(value, (list, tuple, dict)):
            values = value.values() if isinstance(value, dict) else value
            for i, item in enumerate(values):  # [true] is not [1.0]: YAML's true is not a number
                if isinstance(item, bool):
                    raise ValueError(f"expected numbers, not {str(item).lower()} (item {i + 1})")
        return value


FALSE_WORDS = ("false", "no", "off")
TRUE_WORDS = ("true", "yes", "on")


def mode_word(value: Any, choices: tuple[str, ...], true: str | None = None) -> Any:
    """A mode as a YAML user writes it (``engine.weight_check: off``): any case, spaces around.
    YAML 1.1 reads off/no/false (any case) as the boolean false, which means 'off'; true
    (on/yes/true) means ``true`` where a mode stands for it, and is refused elsewhere."""
    word = value
    if isinstance(value, bool):
        word = "true" if value else "false"
    elif isinstance(value, str):
        word = value.strip().lower()
    else:
        return value  # a number or a list: the Literal's own error names the choices
    if word in FALSE_WORDS and "off" in choices:
        return "off"
    if word in TRUE_WORDS and word not in choices:
        if true is None:
            shown = "true (YAML reads on, yes and true as true)" if isinstance(value, bool) else repr(value)
            raise ValueError(f"expected one of {', '.join(choices)}, not {shown}: name the mode")
        return true
    return word if word in choices else value
