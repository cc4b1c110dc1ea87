"""``task.env`` (``--env``): built-in environments by name, or ``FILE.py:Factory``.

Built-ins register with ``@register_environment(name, kinds=..., summary=...)``: ``kinds``
are the task kinds (vigor_cli/tasks: 'math', 'code') whose tasks it works with (None: any
task). The config's check of ``task.env``, the CLI's help and the error for an unknown name
read the names from :data:`ENVIRONMENTS`. ``FILE.py:Factory`` names a class (or any callable
without arguments) in TRL's ``environment_factory`` convention (vigor_cli/episodes/tools.py),
imported into the trainer's process as a reward file is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from vigor_cli.episodes.base import Environment
from vigor_cli.errors import UserError

EnvBuilder = Callable[[Any, Any, Any], Environment]
"""``build(task, task_cfg, tokenizer)``: the environment for this run's task."""


@dataclass(frozen=True)
class EnvEntry:
    name: str
    build: EnvBuilder
    kinds: tuple[str, ...] | None
    """Task kinds it works with (None: any task)."""
    summary: str


ENVIRONMENTS: dict[str, EnvEntry] = {}
"""Built-in environment name -> entry: the names ``task.env`` takes besides FILE.py:Factory."""


def register_environment(name: str, *, kinds: tuple[str, ...] | None = None,
                         summary: str = "") -> Callable[[EnvBuilder], EnvBuilder]:
    def add(build: EnvBuilder) -> EnvBuilder:
        ENVIRONMENTS[name] = EnvEntry(name, build, kinds, summary)
        return build

    return add


@register_environment("code-feedback", kinds=("code",),
                      summary="code tasks: each attempt runs on the public tests, the first failure comes back")
def _code_feedback(task: Any, cfg: Any, tokenizer: Any) -> Environment:
    from vigor_cli.episodes.code_feedback import CodeFeedback

    return CodeFeedback(task)


@register_environment("higher-lower", kinds=("math",),
                      summary="numeric answers: 'higher' or 'lower' until the \\boxed{} number is right")
def _higher_lower(task: Any, cfg: Any, tokenizer: Any) -> Environment:
    from vigor_cli.episodes.attempts import HigherLower

    return HigherLower(task)


@register_environment("retry", summary="any task: 'wrong' (and nothing else) until an attempt is right")
def _retry(task: Any, cfg: Any, tokenizer: Any) -> Environment:
    from vigor_cli.episodes.attempts import Retry

    return Retry(task)


@register_environment("calculator", kinds=("math",),
                      summary="a multiply(a, b) tool; the answer is the \\boxed{} number after its result")
def _calculator(task: Any, cfg: Any, tokenizer: Any) -> Environment:
    from vigor_cli.episodes.calculator import Calculator
    from vigor_cli.episodes.tools import ToolEnvironment

    env = ToolEnvironment(Calculator, "calculator", tokenizer, cfg.env_timeout_s)
    env.name = "calculator"
    return env


# --------------------------------------------------------------------------- names and specs
def is_file_spec(spec: str) -> bool:
    head, sep, name = spec.rpartition(":")
    return bool(sep) and head.endswith(".py")


def check_spec(spec: Any) -> None:
    """The form of a ``task.env`` value (a built-in name, or FILE.py:Factory): cheap, nothing
    imported; ValueError naming the key and the built-ins."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"task.env: an environment is a built-in name or FILE.py:Factory, got {spec!r}")
    if is_file_spec(spec):
        if not spec.rpartition(":")[2].isidentifier():
            raise ValueError(f"task.env: {spec!r}: '{spec.rpartition(':')[2]}' is not a class or function name")
        return
    if ":" in spec or spec.endswith(".py"):
        raise ValueError(f"task.env: {spec!r}: an environment file is given as FILE.py:Factory (e.g. env.py:Game)")
    if spec not in ENVIRONMENTS:
        raise ValueError(f"task.env: unknown environment {spec!r}; built-in: {', '.join(ENVIRONMENTS)}, "
                         "or FILE.py:Factory (an environment class in TRL's environment_factory convention)")


def check_task(spec: str, task_name: str) -> None:
    """A built-in environment on a task it does not work with: ValueError naming both."""
    from vigor_cli.tasks import REWARD_TASKS

    entry = ENVIRONMENTS.get(spec)
    if entry is None or entry.kinds is None:
        return
    kind = REWARD_TASKS.get(task_name)
    if kind not in entry.kinds:
        fits = [name for name, k in REWARD_TASKS.items() if k in entry.kinds]
        raise ValueError(f"task.env={spec} works with the tasks {', '.join(fits)}, not '{task_name}'")


def known() -> str:
    """The built-in names and what each does, for help texts."""
    return "; ".join(f"{e.name} ({e.summary})" for e in ENVIRONMENTS.values())


def make_environment(task_cfg: Any, task: Any, tokenizer: Any) -> Environment:
    """The environment ``task_cfg.env`` names, for ``task``."""
    spec = task_cfg.env
    try:
        check_spec(spec)
    except ValueError as e:
        raise UserError(str(e)) from None
    if not is_file_spec(spec):
        entry = ENVIRONMENTS[spec]
        env = entry.build(task, task_cfg, tokenizer)
        env.summary = entry.summary
        return env
    from vigor_cli.episodes.tools import ToolEnvironment
    from vigor_cli.user.rewards import import_function

    return ToolEnvironment(import_function(spec, flag="--env"), spec, tokenizer, task_cfg.env_timeout_s)
