"""The task interface under the tasks package's name: ``vigor_cli.tasks.base`` re-exports
vigor_cli/task_base.py, where the interface is defined."""

from vigor_cli.task_base import Example, Score, Task, grade, score_once

__all__ = ["Example", "Score", "Task", "grade", "score_once"]
