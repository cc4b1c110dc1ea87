"""tiny-math: two-operand integer arithmetic answered as ``\\boxed{n}``.

Every problem of the family (``a+b`` and ``a-b`` for operands below
:data:`OPERAND_LIMIT`, differences never negative) is enumerated, shuffled
with ``split_seed`` and cut into a held-out set of :data:`HELD_OUT_SIZE`
problems and a training set of the rest. The same seed always gives the same
split, so the bundled tiny model (warmed on split seed 0's training part) is
never evaluated on a problem it was warmed on.

Details: docs/modules.md.
"""

from __future__ import annotations

import random
import re
from typing import Any, Sequence

from vigor_cli.task_base import Example, Score
from vigor_cli.tasks.math_task import MathScored
from vigor_cli.tasks.prompts import last_boxed, render

OPERAND_LIMIT = 40
"""Operands are 0 .. OPERAND_LIMIT-1."""
HELD_OUT_SIZE = 256
"""Problems kept out of training (the task's default evaluation set)."""

INSTRUCTION = "Compute {q}. Put the final answer in \\boxed{{}}."
"""What a chat model sees; a plain-text tokenizer sees only ``{q}=``."""


def all_problems() -> list[tuple[str, str]]:
    """Every (question, answer) of the family, in a fixed order."""
    problems = []
    for a in range(OPERAND_LIMIT):
        for b in range(OPERAND_LIMIT):
            problems.append((f"{a}+{b}", str(a + b)))
            if a >= b:
                problems.append((f"{a}-{b}", str(a - b)))
    return problems


def split(split_seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held_out) examples for ``split_seed``; deterministic."""
    problems = all_problems()
    random.Random(split_seed).shuffle(problems)
    held, train = problems[:HELD_OUT_SIZE], problems[HELD_OUT_SIZE:]

    def make(part: str, rows: list[tuple[str, str]]) -> list[Example]:
        return [Example(uid=f"tiny-math/{part}/{i}", question=q, answer=a) for i, (q, a) in enumerate(rows)]

    return make("train", train), make("test", held)


def plain_prompt(question: str) -> str:
    """The prompt a tokenizer without chat template sees (what the tiny model learned)."""
    return f"{question}="


def target_completion(answer: str) -> str:
    """The completion the warm-up teaches (EOS is appended by the tokenizer step)."""
    return f"\\boxed{{{answer}}}"


_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")


def score_integer_answers(task: "TinyMathTask", examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
    """Like :meth:`TinyMathTask.score`, and a boxed answer that is a plain integer (no sign
    or zero padding tricks) different from a plain-integer gold is wrong without a verifier
    call: two different integers are never equal, which is what the verifier would decide.
    Everything else still goes to the verifier. Used by tiny-facts and tiny-ladder, whose
    wrong answers are mostly such integers."""
    verdicts: list[Score | None] = [None] * len(completions)
    rest = []
    for i, (ex, text) in enumerate(zip(examples, completions)):
        boxed = last_boxed(text)
        if boxed is not None and _INTEGER.fullmatch(boxed) and _INTEGER.fullmatch(ex.answer) and boxed != ex.answer:
            verdicts[i] = Score(0.0, "wrong answer", {"pred": boxed})
        else:
            rest.append(i)
    if rest:
        judged = TinyMathTask.score(task, [examples[i] for i in rest], [completions[i] for i in rest])
        for i, s in zip(rest, judged):
            verdicts[i] = s
    return verdicts  # type: ignore[return-value]


class TinyMathTask(MathScored):
    name = "tiny-math"

    def __init__(self, split_seed: int = 0, verifier: Any = None):
        self.train, self.held_out = split(split_seed)
        self._verifier = verifier

    def train_examples(self) -> list[Example]:
        return list(self.train)

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name not in (None, "tiny-math", "test"):
            from vigor_cli.errors import UserError

            raise UserError(f"tiny-math has one evaluation set, 'tiny-math'; got {name!r}")
        return list(self.held_out)

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        return render(tokenizer, INSTRUCTION.format(q=example.question), plain_prompt(example.question))

    def follow_up(self, text: str) -> str:
        return plain_prompt(text)

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        scores: list[Score | None] = [None] * len(completions)
        pending = []
        for i, (ex, text) in enumerate(zip(examples, completions)):
            if last_boxed(text) == ex.answer:  # the common case, decided without a worker call
                scores[i] = Score(1.0, "correct")
            else:
                pending.append(i)
        if pending:
            judged = super().score([examples[i] for i in pending], [completions[i] for i in pending])
            for i, s in zip(pending, judged):
                scores[i] = s
        return scores  # type: ignore[return-value]
