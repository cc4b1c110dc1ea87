"""Options that set one config key each, defined once and taken by every command that needs them.

A :class:`Flag` names an option and the config key it sets; the option's type, bounds (or
choices), help (the key's description) and shown default come from the key's declaration in
vigor_cli/config/. `vigor train` takes its whole table (commands/train.py ``FLAGS``). The
task flags, :data:`TASK_FLAGS` (``--data``, ``--reward``, ... the user's own task), are one
table taken by every command that builds a task: `vigor train`, `vigor probe`, `vigor eval`
and the TRL entry point. :func:`command` gives a Typer command the options of a table,
:func:`task_overrides` turns their values into config keys and :func:`add_arguments` gives
them to an argparse parser.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable, List, Literal, Optional, Sequence

import typer
import yaml
from rich.markup import escape

from vigor_cli.commands import options as opt
from vigor_cli.config import parse_override
from vigor_cli.errors import UserError
from vigor_cli.settings import known_names
from vigor_cli.package_data import DEFAULT_CONFIG

"""The bundled default (tiny model, tiny-math, auto allocation): what `vigor train` runs with no arguments."""

OWN_TASK = "Your own task"
"""The help panel of the flags that describe the user's own task (task 'custom')."""

PANELS = {"model": "Model", "task": "Task and data", "allocation": "Allocation", "sampling": "Sampling",
          "engine": "Rollout engine", "grpo": "GRPO update", "train": "Training", "health": "Health checks"}
"""The help panel of each config section."""


@dataclass(frozen=True)
class Flag:
    """One option that sets one config key. Its type, bounds (or choices), help (the key's
    description), shown default, --resume rule and the name an error gives all come from this
    entry and the key's declaration in vigor_cli/config/: adding a flag is adding an entry
    to a table."""

    name: str
    """The option as typed: ``--steps``."""
    key: str
    """The dotted config key it sets: ``train.steps``."""
    names: Optional[Literal["strategy", "engine", "task", "tracker"]] = None
    """A registry whose names the help lists (settings.known_names)."""
    note: str = ""
    """Words after the key's description (what only the flag does)."""
    option: Optional[Callable[..., Any]] = None
    """The option factory (commands/options.py) when the key's own bounds are not enough: an
    output directory, an engine. Default: options.for_key (the key's bounds or choices)."""
    parse: Optional[Callable[[str], Any]] = None
    """Text -> the key's value, for a key that is not a plain number, text or switch (default:
    read as YAML, like --set)."""
    multiple: bool = False
    """Repeatable (``--reward a --reward b``): the key gets the list of values."""
    with_resume: bool = False
    """May be given with --resume (the saved config is kept otherwise)."""
    panel: Optional[str] = None
    """The help panel; default: the key's section."""

    @property
    def param(self) -> str:
        """The Python name of the parameter: ``--prompts-per-step`` -> ``prompts_per_step``."""
        return self.name.removeprefix("--").replace("-", "_")


def parse_weights(text: str) -> list[float]:
    """``--reward-weights 1,0.5``: finite numbers, comma-separated."""
    import math

    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        raise UserError(f"--reward-weights {text}: expected numbers separated by commas, e.g. 1,0.5") from None
    if not all(math.isfinite(w) for w in weights):
        raise UserError(f"--reward-weights {text}: weights must be finite numbers")
    return weights


TASK_FLAGS: tuple[Flag, ...] = (
    Flag("--data", "task.data", panel=OWN_TASK, note="Without --task, selects task 'custom'."),
    Flag("--eval-data", "task.eval_data", panel=OWN_TASK),
    Flag("--reward", "task.rewards", panel=OWN_TASK, multiple=True, note="Repeatable."),
    Flag("--reward-weights", "task.reward_weights", panel=OWN_TASK, parse=parse_weights,
         note="Comma-separated, one per --reward: 1,0.5."),
    Flag("--system-prompt", "task.system_prompt", panel=OWN_TASK),
    Flag("--prompt-template", "task.prompt_template", panel=OWN_TASK),
    Flag("--prompt-field", "task.fields.prompt", panel=OWN_TASK),
    Flag("--answer-field", "task.fields.answer", panel=OWN_TASK),
    Flag("--pass-threshold", "task.pass_threshold", panel=OWN_TASK),
)
"""The options that describe the user's own task (README "Train on your own task"), taken by
every command that builds a task: train, probe, eval and the TRL entry point."""

EPISODES = "Episodes (an environment answers)"
"""The help panel of the flags of multi-turn episodes (task.env)."""
EPISODE_FLAGS: tuple[Flag, ...] = (
    Flag("--env", "task.env", panel=EPISODES),
    Flag("--max-turns", "task.max_turns", panel=EPISODES),
)
"""An environment that answers the model's turns (docs/episodes.md): `vigor train` and `vigor eval`."""


def value_type(key: str) -> type:
    """The Python type Typer parses the flag into: the key's own (without Optional) when it is
    a plain bool, int, float or str; str for anything else (then parsed like --set)."""
    ann = opt.key_field(key).annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and len(args) == 1:
        ann = args[0]
    if typing.get_origin(ann) is Literal:
        return str
    return ann if ann in (bool, int, float, str) else str


def default_text(key: str) -> str:
    """The key's built-in default, and the bundled tiny config's value where it differs (what
    a bare `vigor train` runs): ``100; configs/tiny-math.yaml: 150``."""
    builtin = opt.key_field(key).get_default(call_default_factory=True)
    text = opt.shown_default(key)
    node: Any = _tiny_defaults()
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is not None and node != builtin:
        text += f"; {DEFAULT_CONFIG.name}: {str(node).lower() if isinstance(node, bool) else node}"
    return text


@functools.lru_cache(maxsize=1)
def _tiny_defaults() -> dict:
    try:
        return yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):  # a broken install: `vigor train` itself says so
        return {}


def help_text(flag: Flag) -> str:
    """The key's description, the registry's names when it does not say them all, the note."""
    description = opt.key_field(flag.key).description or ""
    text = f"{flag.key}: {description}"
    names = known_names(flag.names).split(", ") if flag.names else []
    if not all(name in description for name in names):  # the registry's names, when not all said
        text += f" One of: {', '.join(names)}."
    return f"{text} {flag.note}".strip()


def option(flag: Flag) -> Any:
    """The typer.Option of a table entry."""
    kw = {"help": escape(help_text(flag)),  # help is rich markup: 'vigor[tensorboard]' lost its '[tensorboard]'
          "show_default": default_text(flag.key),
          "rich_help_panel": flag.panel or PANELS[flag.key.split(".")[0]]}
    if value_type(flag.key) is bool:
        return typer.Option(flag.name, **kw)  # a switch: given sets the key to true
    if flag.option is not None:
        return flag.option(flag.name, **kw)
    return opt.for_key(flag.key, flag.name, **kw)


def flag_value(flag: Flag, value: Any) -> Any:
    """What the given flag sets its key to (None: not given)."""
    if value is None or value is False or (flag.multiple and not value):
        return None
    if flag.multiple:
        return list(value)
    if flag.parse is not None:
        return flag.parse(value)
    if value_type(flag.key) is str and not _plain_text(flag.key):
        return parse_override(f"{flag.key}={value}")[1]
    return value


def _plain_text(key: str) -> bool:
    """True for a key whose values are plain text (a name, a path), not YAML to parse."""
    ann = opt.key_field(key).annotation
    return ann is str or ann == Optional[str] or typing.get_origin(ann) is Literal


def given(flags: Sequence[Flag], values: dict[str, Any]) -> dict[str, Any]:
    """The flags of the table given on the command line, by name: their values."""
    def set_(v: Any) -> bool:
        return v is not None and v is not False and not (isinstance(v, (list, tuple)) and not v)

    return {f.name: values[f.param] for f in flags if set_(values.get(f.param))}


def task_overrides(values: dict[str, Any], flags: Sequence[Flag] = TASK_FLAGS) -> dict[str, Any]:
    """The keys the task flags set, from their values by parameter name (``data``, ``reward``,
    ...). ``--data`` without ``--task`` also selects task 'custom': a bundled config's tiny-math
    must not swallow it."""
    out = {f.key: flag_value(f, values.get(f.param)) for f in flags}
    if out["task.data"] is not None and values.get("task") is None:
        out["task.name"] = "custom"
    return out


def parameters(flags: Sequence[Flag]) -> list[inspect.Parameter]:
    """One keyword-only parameter per flag, annotated with its option (Typer reads these)."""
    out = []
    for f in flags:
        kind = value_type(f.key)
        default: Any = False if kind is bool else None
        if f.multiple:
            kind = List[str]
        ann = Annotated[kind if kind is bool else Optional[kind], option(f)]
        out.append(inspect.Parameter(f.param, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
    return out


def command(func: Callable[..., Any], flags: Sequence[Flag], at: int | None = None) -> Callable[..., Any]:
    """``func`` as a Typer command: its own parameters (a ``**values`` catch-all aside) with one
    option per flag inserted at position ``at`` (default: after them). The flags' values reach
    ``func`` by parameter name, in its ``**values``."""
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in inspect.signature(func, eval_str=True).parameters.values() if p.kind != p.VAR_KEYWORD]
    at = len(own) if at is None else at
    signature = inspect.Signature(own[:at] + parameters(flags) + own[at:])

    @functools.wraps(func)
    def run(**values: Any) -> Any:
        return func(**values)

    del run.__wrapped__  # Typer must read the signature below, not func's
    run.__signature__ = signature  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return run


def add_arguments(parser: Any, flags: Sequence[Flag] = TASK_FLAGS) -> None:
    """The flags as argparse arguments (the TRL entry point), with the same names and keys."""
    for f in flags:
        kw: dict[str, Any] = {"dest": f.param, "help": help_text(f).replace("%", "%%")}
        if value_type(f.key) is bool:
            kw["action"] = "store_true"
        elif f.multiple:
            kw["action"] = "append"
        parser.add_argument(f.name, **kw)
