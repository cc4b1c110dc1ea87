"""Task registry: ``--task`` names to tasks (data, prompt template, reward).

Details: docs/modules.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from vigor_cli.user import rewards
from vigor_cli.errors import UserError
from vigor_cli.task_base import Example, Score, Task
from vigor_cli.tasks.task_reward import task_reward

TaskBuilder = Callable[[Any, int], Task]
"""``build(task_cfg, workers)``: the task; ``workers`` sizes a code sandbox pool (0: one per core)."""

TASKS: dict[str, TaskBuilder] = {}
"""Task name -> builder: the names ``task.name`` and ``--task`` accept."""


@dataclass(frozen=True)
class EvalSet:
    """A benchmark ``vigor eval --benchmarks`` knows: the task that reads and grades it."""

    task: str
    set_name: str | None
    """Passed to ``task.eval_examples``; None for a task with one evaluation set."""
    kind: str
    """'math' or 'code': how `vigor eval` reports it (code adds the test pass rate)."""


EVAL_SETS: dict[str, EvalSet] = {}
"""Benchmark name -> its task, in registration order."""

TASK_READS: dict[str, frozenset[str] | None] = {}
"""Task name -> the ``task.*`` keys it reads besides ``name`` and ``max_prompt_tokens`` (None:
undeclared, every key accepted)."""

REWARD_TASKS: dict[str, str] = {}
"""Task name -> kind ('math' or 'code') of every task whose grading is a built-in reward
(``--reward NAME``, vigor_cli/user/rewards.py)."""

PREVIEWS: dict[str, Callable[[Any, Any], list[str]]] = {}
"""Task name -> what `vigor train --dry-run` prints about its data and rewards, given the task
config and the model's tokenizer (None: not available here), reading them so a bad file or
function fails there; tasks without an entry print nothing."""


def register_task(name: str, *, kind: str = "math",
                  eval_sets: Mapping[str, str | None] | None = None,
                  reads: Iterable[str] | None = None, grades: bool = True,
                  preview: Callable[[Any, Any], list[str]] | None = None) -> Callable[[TaskBuilder], TaskBuilder]:
    """Decorator on a task builder. ``eval_sets`` maps the benchmark names `vigor eval` takes to
    the set name the task reads (None: its one held-out set); default: none. ``reads``: the
    ``task.*`` keys it reads (others are refused; None: not declared, none refused).
    ``grades``: its ``score`` on an Example whose answer is a row's gold (``kind`` 'math': the
    ``answer`` column; 'code': the row's test fields) is the built-in reward of its name."""

    def add(build: TaskBuilder) -> TaskBuilder:
        TASKS[name] = build
        TASK_READS[name] = None if reads is None else frozenset(reads)
        if grades:
            REWARD_TASKS[name] = kind
            rewards.register_builtin(name, functools.partial(task_reward, name, kind, build))
        if preview is not None:
            PREVIEWS[name] = preview
        for benchmark, set_name in (eval_sets or {}).items():
            EVAL_SETS[benchmark] = EvalSet(name, set_name, kind)
        return build

    return add


def task_reads(name: str) -> list[str] | None:
    """The ``task.*`` keys (without the prefix) task ``name`` reads, in the config's order;
    None for a task that did not declare them."""
    from vigor_cli.config import TaskConfig

    reads = TASK_READS.get(name)
    if reads is None:
        return None
    return [k for k in TaskConfig.model_fields if k in reads]


TINY_KEYS = ("split_seed", "eval_sets")


@register_task("tiny-math", eval_sets={"tiny-math": None}, reads=TINY_KEYS)
def _tiny_math(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_math import TinyMathTask

    return TinyMathTask(split_seed=cfg.split_seed)


@register_task("tiny-code", kind="code", eval_sets={"tiny-code": None},
               reads=(*TINY_KEYS, "code_reward", "allow_weak_sandbox"))
def _tiny_code(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_code import TinyCodeTask

    return TinyCodeTask(split_seed=cfg.split_seed, reward=cfg.code_reward, workers=workers,
                        allow_weak_sandbox=cfg.allow_weak_sandbox)


@register_task("tiny-facts", reads=TINY_KEYS)
def _tiny_facts(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_facts import TinyFactsTask

    return TinyFactsTask(split_seed=cfg.split_seed)


@register_task("tiny-ladder", reads=TINY_KEYS)
def _tiny_ladder(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_ladder import TinyLadderTask

    return TinyLadderTask(split_seed=cfg.split_seed)


@register_task("tiny-guess", eval_sets={"tiny-guess": None}, reads=("eval_sets",))
def _tiny_guess(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_guess import TinyGuessTask

    return TinyGuessTask()


@register_task("tiny-products", eval_sets={"tiny-products": None}, reads=TINY_KEYS)
def _tiny_products(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_products import TinyProductsTask

    return TinyProductsTask(split_seed=cfg.split_seed)


def _math_sets() -> dict[str, str]:
    from vigor_cli.verifiers.math_answers import KNOWN  # the one list of math benchmark names

    return {name: name for name in KNOWN}


@register_task("math", eval_sets=_math_sets(), reads=("train_path", "data_dir", "eval_sets"))
def _math(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.math_task import MathTask

    return MathTask(cfg)


def _code_preview(cfg: Any, tokenizer: Any = None) -> list[str]:
    """The code protocol the run will split by (the prompts are not rendered: ``tokenizer`` unused)."""
    from vigor_cli.tasks.code_split import CODE_PROTOCOLS

    protocol = CODE_PROTOCOLS[cfg.code_protocol]
    date = f" (task.contest_date_split={cfg.contest_date_split})" if protocol.by_date else ""
    return [f"code protocol {cfg.code_protocol}{date}: {protocol.summary}"]


@register_task("code", kind="code", eval_sets={"lcb-v6": None}, preview=_code_preview,
               reads=("train_path", "data_dir", "eval_sets", "contest_date_start", "contest_date_end",
                      "code_protocol", "contest_date_split", "lcb_release", "allow_weak_sandbox",
                      "code_reward"))
def _code(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.code_task import CodeTask

    return CodeTask(cfg, workers=workers)


def _custom_preview(cfg: Any, tokenizer: Any) -> list[str]:
    from vigor_cli.tasks.custom_preview import preview

    return preview(cfg, tokenizer)


@register_task("custom", grades=False, preview=_custom_preview,
               reads=("data", "eval_data", "fields", "prompt_template", "system_prompt", "chat_template",
                      "rewards", "reward_weights", "reward_timeout", "allow_weak_sandbox", "code_reward"))
def _custom(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.custom import CustomTask

    return CustomTask(cfg, workers=workers)


def get_task(cfg: Any, workers: int = 0) -> Task:
    """The task named ``cfg.name``; ``workers`` sizes the code sandbox pool (0: one per core)."""
    if cfg.name not in TASKS:
        raise UserError(f"unknown task {cfg.name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[cfg.name](cfg, workers)


def eval_task_config(benchmark: str, data_dir: Any = None, date_start: str | None = None,
                     date_end: str | None = None) -> tuple[Any, str | None]:
    """The TaskConfig of the task that owns ``benchmark`` and the set name to ask it for."""
    from vigor_cli.config import TaskConfig

    entry = EVAL_SETS[benchmark]
    # A window's start is where its held-out problems begin: the code task's split moves there
    # (without one, evaluation is the default split's held-out side).
    given = {"data_dir": str(data_dir) if data_dir else None, "contest_date_start": date_start,
             "contest_date_end": date_end, "contest_date_split": date_start}
    # every given key is kept: one the task does not read is refused by its source check
    # (vigor_cli/train/preflight.py), never dropped
    cfg = TaskConfig(name=entry.task, **{k: v for k, v in given.items() if v is not None})
    return cfg, entry.set_name


def preview_task(cfg: Any, tokenizer: Any = None) -> list[str]:
    """What `vigor train --dry-run` prints about the task's data and rewards (PREVIEWS);
    ``tokenizer`` renders the prompts as the run will (None: not available)."""
    preview = PREVIEWS.get(cfg.name)
    return preview(cfg, tokenizer) if preview is not None else []


__all__ = ["EVAL_SETS", "EvalSet", "Example", "PREVIEWS", "REWARD_TASKS", "Score", "TASK_READS", "Task", "TASKS",
           "eval_task_config", "get_task", "preview_task", "register_task", "task_reads"]
