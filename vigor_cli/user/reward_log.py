"""What a user's reward functions receive and log beside their rewards, as TRL defines it.

Details: docs/modules.md.
"""

from __future__ import annotations

import math
import numbers
from collections import defaultdict
from typing import Any, Callable

from vigor_cli.errors import UserError
from vigor_cli.user.rewards import CallContext

EVAL_PREFIX = "eval/logged/"
"""Where an evaluation's ``log_metric`` values go in its metrics.jsonl line."""


def trainer_state(global_step: int, max_steps: int, epoch: float = 0.0) -> Any:
    """A ``transformers.TrainerState`` as TRL's reward functions get it: ``global_step``
    updates done so far, ``max_steps`` in the run, ``epoch`` (fractional) of the data."""
    from transformers import TrainerState

    return TrainerState(global_step=int(global_step), max_steps=int(max_steps), epoch=float(epoch),
                        is_local_process_zero=True, is_world_process_zero=True)


def _cell(value: Any) -> Any:
    """A logged extra value as JSON holds it: numbers, text, booleans and None as they are,
    anything else as its text."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "item") and callable(value.item):  # a numpy or torch scalar
        try:
            return _cell(value.item())
        except (TypeError, ValueError):
            pass
    return str(value)


class RewardLog:
    """``log_metric`` values of a task's reward functions, until drained (per step or
    evaluation), and each call's ``log_extra`` columns, checked against the call's size."""

    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = defaultdict(list)
        self.by: dict[str, str] = {}
        """Metric name -> the reward function that logged it (named in errors)."""

    def call(self, spec: str, n: int, trainer_state: Any,
             completion_ids: list | None) -> tuple[CallContext, Callable[[], list[dict[str, Any]]]]:
        """The context of one call of reward ``spec`` on ``n`` completions, and a function that,
        after the call, gives each completion's logged extras."""
        extras: dict[str, list[Any]] = {}

        def log_metric(name: str, value: float) -> None:
            if not isinstance(name, str) or not name.strip():
                raise UserError(f"reward function {spec}: log_metric needs a name (text), got {name!r}")
            if isinstance(value, bool) or not (isinstance(value, numbers.Real) or hasattr(value, "item")):
                raise UserError(f"reward function {spec}: log_metric({name!r}, ...) got {type(value).__name__}; "
                                "it logs a number")
            x = float(value.item() if hasattr(value, "item") else value)
            if not math.isfinite(x):
                raise UserError(f"reward function {spec}: log_metric({name!r}, {x}); it logs a finite number")
            self.metrics[name].append(x)
            self.by.setdefault(name, spec)

        def log_extra(column: str, values: list) -> None:
            if not isinstance(column, str) or not column.strip():
                raise UserError(f"reward function {spec}: log_extra needs a column name (text), got {column!r}")
            extras.setdefault(column, []).extend(_cell(v) for v in values)

        def logged() -> list[dict[str, Any]]:
            for column, values in extras.items():
                if len(values) != n:
                    raise UserError(f"reward function {spec}: log_extra({column!r}, ...) got {len(values)} values "
                                    f"for {n} completions; give one per completion")
            return [{c: v[i] for c, v in extras.items()} for i in range(n)]

        context = CallContext(completion_ids=completion_ids, trainer_state=trainer_state,
                              log_metric=log_metric, log_extra=log_extra)
        return context, logged

    def drain(self) -> dict[str, float]:
        """The mean of each metric logged since the last drain (TRL averages over the step)."""
        out = {name: sum(v) / len(v) for name, v in self.metrics.items() if v}
        self.metrics.clear()
        return out


def add_logged(line: dict[str, Any], logged: dict[str, float], by: dict[str, str], prefix: str = "") -> dict:
    """``line`` (a metrics.jsonl line) with the logged metrics under ``prefix + name``; a name
    vigor logs itself is refused, naming the function (it would overwrite vigor's value)."""
    for name, value in logged.items():
        key = prefix + name
        if key in line:
            raise UserError(f"reward function {by.get(name, '?')} logged '{name}' through log_metric, a key vigor "
                            f"logs itself ({key}); choose another name")
        line[key] = value
    return line


def forward_logs(scores: list, metrics: dict[str, float], trl_kwargs: dict[str, Any]) -> None:
    """What a task's reward functions logged in a call TRL made (the task graded the call's
    completions, some from its memo), handed to TRL's own ``log_extra`` (one value per
    completion of TRL's call, None where a function logged nothing for it) and ``log_metric``."""
    log_extra, log_metric = trl_kwargs.get("log_extra"), trl_kwargs.get("log_metric")
    if log_extra is not None:
        for column in dict.fromkeys(c for s in scores for c in s.extra):
            log_extra(column, [s.extra.get(column) for s in scores])
    if log_metric is not None:
        for name, value in metrics.items():
            log_metric(name, value)
