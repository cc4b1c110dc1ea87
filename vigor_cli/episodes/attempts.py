"""Built-in environments that judge each attempt: ``higher-lower`` and ``retry``.

- ``higher-lower`` (tasks whose answers are numbers: tiny-math, tiny-guess, math): the
  model's ``\\boxed{}`` number is compared with the answer; the environment says
  "Higher. Guess again" or "Lower. Guess again" until it is right ('correct') or
  ``task.max_turns`` attempts were made.
- ``retry`` (any task): the task grades each attempt; below full marks it says only
  "Wrong. Guess again" (nothing about why) until one is right. It is the control for an
  environment whose answers carry information: the same turns and budget, no information.
"""

from __future__ import annotations

from typing import Any, Sequence

from vigor_cli.episodes.base import ENV_ERROR, MAX_TURNS, Environment, Episode, Reply, Start
from vigor_cli.tasks.prompts import last_boxed

CORRECT = "correct"
"""An attempt was right."""
HIGHER, LOWER, WRONG = "Higher. Guess again", "Lower. Guess again", "Wrong. Guess again"
NOT_A_NUMBER = "Give a number in \\boxed{}. Guess again"


def _number(text: Any) -> float | None:
    try:
        value = float(str(text).strip())
    except ValueError:
        return None
    return value if value == value else None  # NaN is no number


def _say(text: str) -> Reply:
    return Reply(messages=[{"role": "user", "content": text}])


class _Attempts(Environment):
    attempts = True

    def __init__(self, task: Any):
        self.task = task

    def start(self, examples: Sequence[Any]) -> list[Start]:
        return [Start() for _ in examples]


class HigherLower(_Attempts):
    """Says whether the answer is higher or lower than the attempt (module docstring)."""

    name = "higher-lower"

    def answer(self, episodes: Sequence[Episode], examples: Sequence[Any], last: bool) -> list[Reply]:
        replies = []
        for ep, example in zip(episodes, examples):
            gold = _number(example.answer)
            guess = _number(last_boxed(ep.text))
            if gold is None:
                replies.append(Reply(error=f"the answer of {example.uid} is not a number "
                                     f"({str(example.answer)[:40]!r}): higher-lower needs one", ended=ENV_ERROR))
            elif guess == gold:
                replies.append(Reply(done=True, ended=CORRECT))
            elif last:
                replies.append(Reply(done=True, ended=MAX_TURNS))
            elif guess is None:
                replies.append(_say(NOT_A_NUMBER))
            else:
                replies.append(_say(HIGHER if gold > guess else LOWER))
        return replies


class Retry(_Attempts):
    """Says only that an attempt was wrong (module docstring)."""

    name = "retry"

    def answer(self, episodes: Sequence[Episode], examples: Sequence[Any], last: bool) -> list[Reply]:
        scores = self.task.score(list(examples), [ep.text for ep in episodes])
        replies = []
        for score in scores:
            if score.reward is not None and score.reward >= 1.0:
                replies.append(Reply(done=True, ended=CORRECT))
            elif last:
                replies.append(Reply(done=True, ended=MAX_TURNS))
            else:
                replies.append(_say(WRONG))
        return replies
