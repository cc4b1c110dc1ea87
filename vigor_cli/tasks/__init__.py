"""Task registry: ``--task`` names to tasks (data, prompt template, reward).

``get_task(cfg)`` builds the task named by ``cfg.name`` (a ``TaskConfig``):

- ``tiny-math``: two-operand arithmetic, ``\\boxed{}`` answers, real math verifier;
- ``tiny-code``: one-line stdin programs as LiveCodeBench records, real sandbox;
- ``tiny-facts``: keyed facts (``code of kqzt?``), learning that does not transfer between prompts;
- ``tiny-ladder``: addition from one digit to four, a difficulty ladder;
- ``math``: MATH training problems, the six math benchmarks for evaluation;
- ``code``: LiveCodeBench v6, public tests for reward, private tests for evaluation.
"""

from __future__ import annotations

from typing import Any, Callable

from vigor_cli.errors import UserError
from vigor_cli.tasks.base import Example, Score, Task


def _tiny_math(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_math import TinyMathTask

    return TinyMathTask(split_seed=cfg.split_seed)


def _tiny_code(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_code import TinyCodeTask

    return TinyCodeTask(split_seed=cfg.split_seed, reward=cfg.code_reward, workers=workers,
                        allow_weak_sandbox=cfg.allow_weak_sandbox)


def _tiny_facts(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_facts import TinyFactsTask

    return TinyFactsTask(split_seed=cfg.split_seed)


def _tiny_ladder(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.tiny_ladder import TinyLadderTask

    return TinyLadderTask(split_seed=cfg.split_seed)


def _math(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.math_task import MathTask

    return MathTask(cfg)


def _code(cfg: Any, workers: int) -> Task:
    from vigor_cli.tasks.code_task import CodeTask

    return CodeTask(cfg, workers=workers)


TASKS: dict[str, Callable[[Any, int], Task]] = {
    "tiny-math": _tiny_math,
    "tiny-code": _tiny_code,
    "tiny-facts": _tiny_facts,
    "tiny-ladder": _tiny_ladder,
    "math": _math,
    "code": _code,
}


def get_task(cfg: Any, workers: int = 0) -> Task:
    """The task named ``cfg.name``; ``workers`` sizes the code sandbox pool (0: one per core)."""
    if cfg.name not in TASKS:
        raise UserError(f"unknown task {cfg.name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[cfg.name](cfg, workers)


__all__ = ["Example", "Score", "Task", "TASKS", "get_task"]
