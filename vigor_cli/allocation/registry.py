"""The strategy registry: every strategy registers itself, in its own module, with ``@register``.

Details: docs/modules.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from pydantic import BaseModel

from vigor_cli import config
from vigor_cli.errors import UserError

if TYPE_CHECKING:
    from vigor_cli.allocation.base import Allocator
    from vigor_cli.config import AllocationConfig

Builder = Callable[["AllocationConfig", int, int], "Allocator"]
"""Builds a strategy from the config's allocation section, prompts per step and seed."""
Check = Callable[["AllocationConfig", int, Optional[int]], None]
"""Rules of one strategy across its keys: ``check(allocation_cfg, prompts_per_step, n_train)``
raises ``ValueError`` with a message naming the keys to change. It runs when the config is
built (``n_train`` None: the rules against the task's size are skipped) and once the task's
data is read (``n_train`` its training prompts; ``settings.check_against_data``)."""


@dataclass(frozen=True)
class Strategy:
    name: str
    build: Builder
    budgeted: bool = False
    """Capped by ``allocation.budget`` (default ``allocation.rollouts_per_prompt`` x prompts)."""
    family: str | None = None
    """``"vigor"`` for VIGOR and its ablations: rounds of m0 * gamma^(t-1), keep alpha."""
    check: Check | None = None
    options: type[BaseModel] | None = None
    """The strategy's own keys (the section ``allocation.<name>``), None when it has none."""
    summary: str = ""
    legacy_prefix: str | None = None
    """Built-ins only, for one release: the flat keys ``allocation.<prefix>_<key>`` of
    earlier versions still set ``allocation.<name>.<key>`` (with a deprecation note)."""


REGISTRY: dict[str, Strategy] = {}
"""Strategy name -> entry, in registration order."""


def register(
    name: str,
    *,
    budgeted: bool = False,
    family: str | None = None,
    check: Check | None = None,
    options: type[BaseModel] | None = None,
    summary: str = "",
    legacy_prefix: str | None = None,
) -> Callable[[Builder], Builder]:
    """Decorator on a builder ``(allocation_cfg, prompts_per_step, seed) -> Allocator``."""

    def add(build: Builder) -> Builder:
        old = REGISTRY.get(name)
        if old is not None and old.build.__qualname__ != build.__qualname__:
            raise ValueError(f"strategy {name!r} is registered twice ({old.build.__module__} and {build.__module__})")
        if options is not None and not name.replace("-", "_").isidentifier():
            raise ValueError(f"strategy {name!r}: a strategy with options needs a name usable as a config key")
        REGISTRY[name] = Strategy(name, build, budgeted, family, check, options, summary, legacy_prefix)
        if options is not None:  # the config's allocation.<name> section (vigor_cli/config/ imports no registry)
            config.STRATEGY_SECTIONS[name] = options
            if legacy_prefix:
                config.LEGACY_PREFIXES[name] = legacy_prefix
        return build

    return add


def unregister(name: str) -> None:
    """Remove strategy ``name`` and its config section (a plugin's tests clean up with this);
    an unknown name is a no-op."""
    REGISTRY.pop(name, None)
    config.STRATEGY_SECTIONS.pop(name, None)
    config.LEGACY_PREFIXES.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered strategy, in registration order."""
    return tuple(REGISTRY)


def budgeted() -> tuple[str, ...]:
    return tuple(n for n, s in REGISTRY.items() if s.budgeted)


def in_family(family: str) -> tuple[str, ...]:
    return tuple(n for n, s in REGISTRY.items() if s.family == family)


def get(name: str) -> Strategy:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"allocation.strategy: unknown strategy {name!r}; known: {', '.join(REGISTRY)}") from None


def check(cfg: "AllocationConfig", prompts_per_step: int, n_train: int | None = None) -> None:
    """Every rule of ``cfg.strategy`` across its keys (its options' own bounds were checked when
    the config was built), as a ``UserError`` (exit 2)."""
    strategy = get(cfg.strategy)
    try:
        if strategy.check is not None:
            strategy.check(cfg, prompts_per_step, n_train)
    except ValueError as e:
        raise UserError(str(e)) from None


def default_budget(cfg: "AllocationConfig", prompts_per_step: int) -> int:
    """The per-step rollout cap of budgeted strategies: ``allocation.budget``, or
    ``allocation.rollouts_per_prompt`` x prompts (GRPO's spend at that group size)."""
    return cfg.budget if cfg.budget is not None else cfg.rollouts_per_prompt * prompts_per_step


def options(cfg: "AllocationConfig") -> Any:
    """The options of ``cfg.strategy`` (its section ``allocation.<name>``, validated when the
    config was built), or None for a strategy without options."""
    if get(cfg.strategy).options is None:
        return None
    return cfg.section(cfg.strategy)
