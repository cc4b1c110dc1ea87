"""Task registry: ``--task`` names to tasks (data, prompt template, reward).

``get_task(cfg)`` builds the task named by ``cfg.name`` (a ``TaskConfig``):

- ``tiny-math``: two-operand arithmetic, ``\\boxed{}`` answers, real math verifier;
- ``tiny-code``: one-line stdin programs as LiveCodeBench records, real sandbox;
- ``tiny-facts``: keyed facts (``code of kqzt?``), learning that does not transfer between prompts;
- ``tiny-ladder``: addition from one digit to four, a difficulty ladder;
- ``math``: MATH training problems, the six math benchmarks for evaluation;
- ``code``: LiveCodeBench v6, public tests for reward, private tests for evaluation.

Each task registers itself with ``@register_task(name, eval_sets=...)``; the benchmarks
``vigor eval`` accepts (``EVAL_SETS``) come from the same entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from vigor_cli.errors import UserError
from vigor_cli.tasks.base import Example, Score, Task

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


def register_task(name: str, *, kind: str = "math",
                  eval_sets: Mapping[str, str | None] | None = None) -> Callable[[TaskBuilder], TaskBuilder]:
    """Decorator on a task builder. ``eval_sets`` maps the benchmark names `vigor eval` takes to
    the set name the task reads (None: its one held-out set); default: none."""

    def add(build: TaskBuilder) -> TaskBuilder:
        TASKS[name] = build
        for benchmark, set_name in (eval_sets or {}).items():
            EVAL_SETS[benchmark] = EvalSet(name, set_name, kind)
        return build

    return add


@register_task("tiny-math", eval_sets={"tiny-math": None})
def _tiny_math(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_math import TinyMathTask

    return TinyMathTask(split_seed=cfg.split_seed)


@register_task("tiny-code", kind="code", eval_sets={"tiny-code": None})
def _tiny_code(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_code import TinyCodeTask

    return TinyCodeTask(split_seed=cfg.split_seed, reward=cfg.code_reward, workers=workers,
                        allow_weak_sandbox=cfg.allow_weak_sandbox)


@register_task("tiny-facts")
def _tiny_facts(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_facts import TinyFactsTask

    return TinyFactsTask(split_seed=cfg.split_seed)


@register_task("tiny-ladder")
def _tiny_ladder(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_ladder import TinyLadderTask

    return TinyLadderTask(split_seed=cfg.split_seed)


def _math_sets() -> dict[str, str]:
    from vigor_cli.verifiers.math_answers import KNOWN  # the one list of math benchmark names

    return {name: name for name in KNOWN}


@register_task("math", eval_sets=_math_sets())
def _math(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.math_task import MathTask

    return MathTask(cfg)


@register_task("code", kind="code", eval_sets={"lcb-v6": None})
def _code(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.code_task import CodeTask

    return CodeTask(cfg, workers=workers)


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
    cfg = TaskConfig(name=entry.task, data_dir=str(data_dir) if data_dir else None,
                     contest_date_start=date_start, contest_date_end=date_end)
    return cfg, entry.set_name


__all__ = ["EVAL_SETS", "EvalSet", "Example", "Score", "Task", "TASKS", "eval_task_config", "get_task",
           "register_task"]
