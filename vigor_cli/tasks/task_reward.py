"""A task's own grading as a reward on rows (``--reward tiny-math``, ``--reward code``).

The task registry (vigor_cli/tasks/__init__.py) registers one built-in reward per task that
grades (vigor_cli/user/rewards.py's ``BUILTINS``); this module turns a task's ``score`` into a
:class:`~vigor_cli.user.rewards.Reward` that reads the row's gold: the ``answer`` column for a
math-kind task, the LiveCodeBench test fields for a code-kind one.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from vigor_cli.user.rewards import Reward, _completion_text, _prompt_text


def task_reward(name: str, kind: str, build: Callable[[Any, int], Any], *, workers: int = 0,
                code_reward: str = "full", allow_weak_sandbox: bool = False) -> Reward:
    """The grading of task ``name`` (built by ``build``) as a reward on rows: math-kind tasks
    read the ``answer`` column, code-kind tasks the row's LiveCodeBench test fields."""
    from vigor_cli.config import TaskConfig

    keys: dict[str, Any] = {}
    if kind == "code":
        keys = {"code_reward": code_reward, "allow_weak_sandbox": allow_weak_sandbox}
    holder: dict[str, Any] = {}

    def task() -> Any:  # built on first use: a code task's sandbox pool starts only if it grades
        if "task" not in holder:
            holder["task"] = build(TaskConfig.model_construct(**{**TaskConfig().model_dump(), "name": name, **keys}), workers)
        return holder["task"]

    def close() -> None:
        if "task" in holder:
            holder.pop("task").close()

    if kind == "code":
        def score(prompts: list, completions: list, columns: dict[str, list], context: Any = None) -> list:
            from vigor_cli.task_base import Example

            rows = [{k: columns[k][i] for k in columns} for i in range(len(completions))]
            records: dict[tuple[int, ...], dict] = {}  # a prompt's completions share its row's test
            # objects: hash their (possibly megabytes of) tests once per call, not per completion

            def record(r: dict) -> dict:
                key = tuple(id(r.get(k)) for k in ("public_test_cases", "private_test_cases", "metadata"))
                if key not in records:  # the rows hold every object alive, so an id is not reused
                    records[key] = _lcb_record(r)
                return records[key]

            examples = [Example(uid=rec["question_id"], question=_prompt_text(p), answer=rec, meta={"tests": "all"})
                        for p, rec in zip(prompts, map(record, rows))]
            return task().score(examples, [_completion_text(c) for c in completions])

        needs: tuple[str, ...] = ("public_test_cases",)
        optional: tuple[str, ...] = ("private_test_cases", "metadata")
    else:
        def score(prompts: list, completions: list, columns: dict[str, list], context: Any = None) -> list:
            from vigor_cli.task_base import Example

            examples = [Example(uid="", question=_prompt_text(p), answer=_gold(a))
                        for p, a in zip(prompts, columns["answer"])]
            return task().score(examples, [_completion_text(c) for c in completions])

        needs, optional = ("answer",), ()
    return Reward(name=name, spec=name, needs=needs, optional=optional, all_columns=False, builtin=True,
                  _score=score, _close=close)


def _gold(value: Any) -> Any:
    """A gold answer as the math verifier takes it: text, or a list of accepted texts."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return str(value)


def _lcb_record(row: dict) -> dict:
    """A LiveCodeBench-shaped record from a row's test fields (what the code verifier reads)."""
    return {"question_id": _row_uid(row), "public_test_cases": row.get("public_test_cases") or "[]",
            "private_test_cases": row.get("private_test_cases") or "[]", "metadata": row.get("metadata") or "{}"}


def _row_uid(row: dict) -> str:
    """A stable id for a row's tests (the code verifier caches decoded problems by it)."""
    text = repr((row.get("public_test_cases"), row.get("private_test_cases"), row.get("metadata")))
    return "row-" + hashlib.sha1(text.encode()).hexdigest()[:16]
