"""`vigor train`: GRPO with rollout allocation; with no arguments, the bundled tiny default."""

from __future__ import annotations

import functools
import inspect
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, List, Literal, Optional

import typer
import yaml
from rich.markup import escape

from vigor_cli.commands import options as opt
from vigor_cli.config import parse_override
from vigor_cli.errors import UserError
from vigor_cli.package_data import CONFIGS_DIR
from vigor_cli.settings import known_names

CONFIGS = CONFIGS_DIR
"""The bundled configs (``vigor_cli.configs``: the repository's ``configs/``, installed by the build)."""
DEFAULT_CONFIG = CONFIGS / "tiny-math.yaml"
"""The bundled default (tiny model, tiny-math, auto allocation): what `vigor train` runs with no arguments."""


def bundled_configs() -> list[str]:
    return sorted(p.name for p in CONFIGS.glob("*.yaml"))


def default_config_file(model: str | None, task: str | None) -> Path | None:
    """Without --config, the tiny model gets its tuned settings, configs/<task>.yaml for the
    tiny tasks (tiny-math.yaml otherwise); any other model starts from the config classes'
    defaults (LoRA, GPU-sized batches). A missing bundled file is a broken install: an error,
    never a silent run on the built-in (GPU-sized) defaults."""
    if model not in (None, "tiny"):
        return None
    path = CONFIGS / f"{task}.yaml" if task in ("tiny-math", "tiny-code", "tiny-guess") else DEFAULT_CONFIG
    if not path.is_file():
        raise UserError(f"bundled config {path} is missing: reinstall vigor (the package ships configs/)")
    return path


def resolve_config(path: Path) -> Path:
    """``--config`` as given when that file exists; otherwise the bundled config of that name,
    so ``configs/qwen2.5-1.5b-math-vigor.yaml``, ``qwen2.5-1.5b-math-vigor.yaml`` and
    ``qwen2.5-1.5b-math-vigor`` work from any folder and from a wheel install."""
    if path.is_file():
        return path
    if os.path.lexists(path):  # a FIFO, a device, a folder: said as such, never 'no such file'
        from vigor_cli.user_files import regular_file

        regular_file(path, "--config ")
    if path.parent in (Path("."), Path("configs")):
        bundled = CONFIGS / (path.name if path.suffix in (".yaml", ".yml") else path.name + ".yaml")
        if bundled.is_file():
            return bundled
    raise UserError(f"--config {path}: no such file, and no bundled config of that name "
                    f"(bundled: {', '.join(bundled_configs())})")


OWN_TASK = "Your own task"
"""The help panel of the flags that describe the user's own task (task 'custom')."""
EPISODES = "Episodes (an environment answers)"
"""The help panel of the flags of multi-turn episodes (task.env)."""


@dataclass(frozen=True)
class Flag:
    """One `vigor train` option that sets one config key. Its type, bounds (or choices), help
    (the key's description), shown default, --resume rule and the name an error gives all come
    from this entry and the key's declaration in vigor_cli/config.py: adding a flag is adding
    an entry to FLAGS."""

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


FLAGS: tuple[Flag, ...] = (
    Flag("--model", "model.name_or_path"),
    Flag("--device", "model.device", option=opt.device),
    Flag("--load-in-4bit", "model.load_in_4bit"),
    Flag("--task", "task.name", names="task"),
    Flag("--strategy", "allocation.strategy", names="strategy"),
    Flag("--engine", "engine.kind", names="engine", option=opt.engine),
    Flag("--max-new-tokens", "sampling.max_new_tokens"),
    Flag("--learning-rate", "grpo.learning_rate"),
    Flag("--steps", "train.steps", note="With --resume: the new total, to extend a finished run.",
         with_resume=True),
    Flag("--max-rollouts", "train.max_rollouts"),
    Flag("--prompts-per-step", "train.prompts_per_step"),
    Flag("--seed", "train.seed", option=opt.seed),  # the same bounds and message as every --seed
    Flag("--gpu-memory", "train.gpu_memory_gib"),
    Flag("--eval-every", "train.eval_every", panel="Logging and checkpoints"),
    Flag("--save-every", "train.save_every", panel="Logging and checkpoints"),
    Flag("--log-completions-every", "train.log_completions_every", panel="Logging and checkpoints"),
    Flag("--output-dir", "train.output_dir", option=functools.partial(opt.output_dir, as_path=False), panel="Logging and checkpoints"),
    Flag("--run-name", "train.run_name", panel="Logging and checkpoints"),
    Flag("--report-to", "train.report_to", names="tracker", panel="Logging and checkpoints"),
    Flag("--strict", "health.strict", panel="Logging and checkpoints"),
    # your own task (task 'custom'; README "Train on your own task")
    Flag("--data", "task.data", panel=OWN_TASK, note="Without --task, selects task 'custom'."),
    Flag("--eval-data", "task.eval_data", panel=OWN_TASK),
    Flag("--reward", "task.rewards", panel=OWN_TASK, multiple=True,
         note="Repeatable."),
    Flag("--reward-weights", "task.reward_weights", panel=OWN_TASK, parse=lambda text: parse_weights(text),
         note="Comma-separated, one per --reward: 1,0.5."),
    Flag("--system-prompt", "task.system_prompt", panel=OWN_TASK),
    Flag("--prompt-template", "task.prompt_template", panel=OWN_TASK),
    Flag("--prompt-field", "task.fields.prompt", panel=OWN_TASK),
    Flag("--answer-field", "task.fields.answer", panel=OWN_TASK),
    # an environment that answers the model's turns (docs/episodes.md)
    Flag("--env", "task.env", panel=EPISODES),
    Flag("--max-turns", "task.max_turns", panel=EPISODES),
)
"""Every option of `vigor train` that sets a config key, in help order (the other options,
--config, --set, --resume and --dry-run, are in ``train``'s own signature below)."""

FLAG_OF_KEY = {f.key: f.name for f in FLAGS}
"""The flag that sets each key (an error names the flag the user typed)."""

PANELS = {"model": "Model", "task": "Task and data", "allocation": "Allocation", "sampling": "Sampling",
          "engine": "Rollout engine", "grpo": "GRPO update", "train": "Training", "health": "Health checks"}
"""The help panel of each config section."""


def _value_type(key: str) -> type:
    """The Python type Typer parses the flag into: the key's own (without Optional) when it is
    a plain bool, int, float or str; str for anything else (then parsed like --set)."""
    ann = opt.key_field(key).annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and len(args) == 1:
        ann = args[0]
    if typing.get_origin(ann) is Literal:
        return str
    return ann if ann in (bool, int, float, str) else str


def _default_text(key: str) -> str:
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


def _help(flag: Flag) -> str:
    description = opt.key_field(flag.key).description or ""
    text = f"{flag.key}: {description}"
    names = known_names(flag.names).split(", ") if flag.names else []
    if not all(name in description for name in names):  # the registry's names, when not all said
        text += f" One of: {', '.join(names)}."
    return escape(f"{text} {flag.note}".strip())  # help is rich markup: 'vigor[tensorboard]' lost its '[tensorboard]'


def _option(flag: Flag) -> Any:
    """The typer.Option of a table entry."""
    kw = {"help": _help(flag), "show_default": _default_text(flag.key),
          "rich_help_panel": flag.panel or PANELS[flag.key.split(".")[0]]}
    if _value_type(flag.key) is bool:
        return typer.Option(flag.name, **kw)  # a switch: given sets the key to true
    if flag.option is not None:
        return flag.option(flag.name, **kw)
    return opt.for_key(flag.key, flag.name, **kw)


def _flag_value(flag: Flag, value: Any) -> Any:
    """What the given flag sets its key to (None: not given)."""
    if value is None or value is False or (flag.multiple and not value):
        return None
    if flag.multiple:
        return list(value)
    if flag.parse is not None:
        return flag.parse(value)
    if _value_type(flag.key) is str and not _plain_text(flag.key):
        return parse_override(f"{flag.key}={value}")[1]
    return value


def _plain_text(key: str) -> bool:
    """True for a key whose values are plain text (a name, a path), not YAML to parse."""
    ann = opt.key_field(key).annotation
    return ann is str or ann == Optional[str] or typing.get_origin(ann) is Literal


def _given_flags(values: dict[str, Any]) -> dict[str, Any]:
    return {f.name: values[f.param] for f in FLAGS if values.get(f.param) not in (None, False)}


def _train(config: Optional[Path] = None, resume: Optional[Path] = None, set_: Optional[List[str]] = None,
           dry_run: bool = False, **values: Any) -> None:
    """Train a policy with GRPO, spending rollouts where the reward variance is (auto, VIGOR and peers)."""
    from vigor_cli.console import console
    from vigor_cli.report.train_summary import print_summary
    from vigor_cli.settings import build_config

    if resume is not None:
        given = [name for name in _given_flags(values)
                 if not next(f for f in FLAGS if f.name == name).with_resume]
        given = (["--config"] if config is not None else []) + given + (["--set"] if set_ else [])
        if given:
            allowed = ", ".join(f.name for f in FLAGS if f.with_resume)
            raise UserError(f"--resume continues the saved config; drop {', '.join(given)} (only {allowed} may change)")
        if dry_run:  # planned where the run started, as training resumes (vigor_cli.trainer.train)
            from vigor_cli.runs import RunDir

            run = RunDir.open_existing(resume)
            with run.in_launch_dir(lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True)):
                return _dry_run(build_config(run.path.absolute() / "config.yaml"), console)
        print_summary(_run_training(resume=resume, steps=values.get("steps"), out=console), console)
        return
    overrides = {f.key: _flag_value(f, values.get(f.param)) for f in FLAGS}
    overrides.update(own_task_overrides(**values))
    model, task = overrides.get("model.name_or_path"), overrides.get("task.name")
    path = resolve_config(config) if config is not None else default_config_file(model, task)
    cfg = build_config(path, overrides=overrides, sets=set_, flags=FLAG_OF_KEY)
    if dry_run:
        return _dry_run(cfg, console)
    print_summary(_run_training(cfg, out=console), console)


def _fixed(
    config: Annotated[Optional[Path], typer.Option("--config", help="YAML run config (keys of vigor_cli/config.py), or the name of a bundled one (e.g. qwen2.5-1.5b-math-vigor).", show_default="configs/tiny-math.yaml (or tiny-code.yaml) for the tiny model, the built-in defaults for any other")] = None,
    resume: Annotated[Optional[Path], typer.Option("--resume", help="Continue the run in this directory from its last checkpoint (--steps may extend it).")] = None,
    set_: Annotated[Optional[List[str]], typer.Option("--set", help="Override any key: --set grpo.beta=0.01 (repeatable; the value is read as YAML).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Read the task's data and import its reward functions (--data: schema, first rows, the columns each reward needs), print the memory plan (from the model's config.json, no weights) and exit: 0 if it fits, 2 naming what to change if not.")] = False,
) -> None:
    """The options of `vigor train` that set no single key (their order in --help: first)."""


def _signature() -> inspect.Signature:
    """train's parameters: the fixed ones, then one per FLAGS entry (Typer reads the signature)."""
    fixed = list(inspect.signature(_fixed, eval_str=True).parameters.values())
    table = []
    for f in FLAGS:
        kind = _value_type(f.key)
        default: Any = False if kind is bool else None
        if f.multiple:
            kind = List[str]
        ann = Annotated[kind if kind is bool else Optional[kind], _option(f)]
        table.append(inspect.Parameter(f.param, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
    fixed = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in fixed]
    return inspect.Signature(fixed[:1] + table + fixed[1:])


def train(**values: Any) -> None:
    return _train(**values)


train.__doc__ = _train.__doc__
train.__signature__ = _signature()  # type: ignore[attr-defined]
train.__annotations__ = {p.name: p.annotation for p in train.__signature__.parameters.values()}


def own_task_overrides(**values: Any) -> dict[str, Any]:
    """The keys the "Your own task" flags set, from their values by parameter name (``data``,
    ``reward``, ...; the TRL entry point takes the same flags). ``--data`` without ``--task``
    also selects task 'custom': the bundled default config's tiny-math must not swallow it."""
    out = {f.key: _flag_value(f, values.get(f.param)) for f in FLAGS if f.panel == OWN_TASK}
    if out["task.data"] is not None and values.get("task") is None:
        out["task.name"] = "custom"
    return out


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


def _run_training(*args, **kwargs):
    """vigor_cli.trainer.train; a run stopped by SIGINT/SIGTERM prints one line (where it stands,
    the command that resumes it) and exits 130/143, never 0."""
    from vigor_cli.console import err_console
    from vigor_cli.interrupt import TrainingInterrupted
    from vigor_cli.trainer import train as run_training

    try:
        return run_training(*args, **kwargs)
    except TrainingInterrupted as stop:
        err_console.print(stop.status, markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(stop.exit_code) from None


def _dry_run(cfg, console) -> None:
    """`--dry-run`: the task's data and rewards (read and checked: a bad file or function fails
    here), the memory plan and the verdict, then what the health checks can tell before
    generating; no model is loaded, nothing is written."""
    from vigor_cli import memory_plan
    from vigor_cli.console import err_console
    from vigor_cli.tasks import preview_task
    from vigor_cli.train_data import dry_run_health

    for line in preview_task(cfg.task):
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    plan = memory_plan.plan_run(cfg)
    console.print(memory_plan.render(plan))
    for note in plan.notes:
        console.print(f"[yellow]{note}[/]")
    memory_plan.check(plan)  # exit 2 with the keys to change
    for line in dry_run_health(cfg, console):  # what the health checks can tell before generating
        err_console.print(f"warning: {line}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    if plan.available is not None:
        verdict = "fits" if plan.device == "cuda" else "CPU run (not refused)"
        console.print(f"[bold]{verdict}[/]: peak {plan.peak / memory_plan.GIB:.1f} GiB of "
                      f"{plan.available / memory_plan.GIB:.1f} GiB ({plan.source})", highlight=False)
