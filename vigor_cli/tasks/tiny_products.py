"""tiny-products: products of two two-digit numbers, answered as ``\\boxed{n}``; and the tool.

The tiny model cannot multiply 37 by 48 by heart, so one completion almost never passes;
with the built-in ``calculator`` environment (``--env calculator``) it can call
:func:`multiply` and copy the result. The problems (``a*b`` for a, b in 10..99) are
enumerated, shuffled with ``split_seed`` and cut into a held-out set of
:data:`HELD_OUT_SIZE` problems and a training set of the rest. :func:`multiply` is the
tool itself: it reads two whole numbers (JSON integers, or digit strings), refuses more
than :data:`MAX_DIGITS` digits, and answers anything else with :data:`BAD_CALL`; it never
evaluates what the model wrote.
"""

from __future__ import annotations

import random
import re
from typing import Any, Sequence

from vigor_cli.task_base import Example, Score, Task
from vigor_cli.tasks.prompts import last_boxed, render

LOW, HIGH = 10, 99
"""Operands are LOW..HIGH (both ends included)."""
HELD_OUT_SIZE = 256
"""Problems kept out of training (the task's default evaluation set)."""
INSTRUCTION = "Compute {q}. Put the final answer in \\boxed{{}}."
"""What a chat model sees; a plain-text tokenizer sees only ``{q}=``."""

MAX_DIGITS = 6
"""The tool multiplies numbers of at most this many digits (a sign aside)."""
BAD_CALL = f"error: multiply takes two whole numbers a and b of at most {MAX_DIGITS} digits each"
"""The tool's one answer to arguments it cannot use."""
_WHOLE = re.compile(r"[+-]?[0-9]{1,%d}" % MAX_DIGITS)


def whole(value: Any) -> int | None:
    """``value`` as a whole number the tool takes, or None: a JSON integer (not a boolean) or
    a string of digits with an optional sign, of at most :data:`MAX_DIGITS` digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) < 10**MAX_DIGITS else None
    if isinstance(value, str) and len(value) <= MAX_DIGITS + 8:
        text = value.strip()
        return int(text) if _WHOLE.fullmatch(text) else None
    return None


def multiply(a: int, b: int) -> str:
    """Multiply.

    Args:
        a: a whole number
        b: a whole number
    """
    x, y = whole(a), whole(b)
    if x is None or y is None:
        return BAD_CALL
    return str(x * y)


def all_problems() -> list[tuple[str, str]]:
    """Every (question, answer) of the family, in a fixed order."""
    return [(f"{a}*{b}", str(a * b)) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]


def split(split_seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held_out) examples for ``split_seed``; deterministic."""
    problems = all_problems()
    random.Random(f"tiny-products/{split_seed}").shuffle(problems)
    held, train = problems[:HELD_OUT_SIZE], problems[HELD_OUT_SIZE:]

    def make(part: str, rows: list[tuple[str, str]]) -> list[Example]:
        return [Example(uid=f"tiny-products/{part}/{i}", question=q, answer=a) for i, (q, a) in enumerate(rows)]

    return make("train", train), make("test", held)


def operands(question: str) -> tuple[int, int]:
    """The two numbers of a question ``a*b``."""
    a, b = question.split("*")
    return int(a), int(b)


def plain_prompt(question: str) -> str:
    """The prompt a tokenizer without chat template sees."""
    return f"{question}="


class TinyProductsTask(Task):
    name = "tiny-products"

    def __init__(self, split_seed: int = 0):
        self.train, self.held_out = split(split_seed)

    def train_examples(self) -> list[Example]:
        return list(self.train)

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name not in (None, "tiny-products", "test"):
            from vigor_cli.errors import UserError

            raise UserError(f"tiny-products has one evaluation set, 'tiny-products'; got {name!r}")
        return list(self.held_out)

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        return render(tokenizer, INSTRUCTION.format(q=example.question), plain_prompt(example.question))

    def follow_up(self, text: str) -> str:
        return plain_prompt(text)

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        out = []
        for ex, text in zip(examples, completions):
            boxed = last_boxed(text)
            if boxed is None:
                out.append(Score(0.0, "no boxed answer"))
            elif boxed.strip() == ex.answer:
                out.append(Score(1.0, "correct"))
            else:
                out.append(Score(0.0, "wrong answer", {"pred": boxed[:40]}))
        return out
