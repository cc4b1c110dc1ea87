"""tiny-ladder: addition from one digit to three, a difficulty ladder with carries.

Rungs (:data:`RUNGS`) add numbers of growing length: 1+1 digits, 2+1, 2+2, 3+1, 3+2,
3+3, so carries appear from the first rung on and chain longer as the operands grow. One skill, but its
difficulty climbs: a model warmed on it (`vigor make-tiny --recipe ladder`) solves
the low rungs nearly always and the high rungs rarely, which spreads per-prompt pass
rates between tiny-math's narrow band and tiny-facts' all-or-nothing. Learning
transfers within and between rungs, so held-out problems measure it.

Each rung has :data:`HELD_PER_RUNG` held-out and :data:`TRAIN_PER_RUNG` training
problems (rung 1 has 100 in all: 40 and 60), drawn without overlap from ``split_seed``. Graded like tiny-math.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from vigor_cli.task_base import Example, Score
from vigor_cli.tasks.prompts import render
from vigor_cli.tasks.tiny_math import score_integer_answers, INSTRUCTION, TinyMathTask, plain_prompt

RUNGS = [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2), (3, 3)]
"""(digits of the first operand, digits of the second), easiest first; a one-digit operand is 0-9."""
TRAIN_PER_RUNG = 2000
HELD_PER_RUNG = 40


def _operand(digits: int, rng: random.Random) -> int:
    return rng.randint(0, 9) if digits == 1 else rng.randint(10 ** (digits - 1), 10**digits - 1)


def rung_problems(rung: int, count: int, rng: random.Random, taken: set[str]) -> list[tuple[str, str]]:
    """``count`` new problems of rung ``rung`` (1-based), none in ``taken``; rung 1 has only 100."""
    da, db = RUNGS[rung - 1]
    out: list[tuple[str, str]] = []
    space = (10 if da == 1 else 9 * 10 ** (da - 1)) * (10 if db == 1 else 9 * 10 ** (db - 1))
    while len(out) < count and len(taken) < space:
        a, b = _operand(da, rng), _operand(db, rng)
        q = f"{a}+{b}"
        if q not in taken:
            taken.add(q)
            out.append((q, str(a + b)))
    return out


def split(split_seed: int = 0) -> tuple[list[Example], list[Example]]:
    """(train, held_out), every rung in both, deterministic in ``split_seed``."""
    rng = random.Random(f"tiny-ladder/{split_seed}")
    train: list[Example] = []
    held: list[Example] = []
    for rung in range(1, len(RUNGS) + 1):
        taken: set[str] = set()
        h = rung_problems(rung, HELD_PER_RUNG, rng, taken)
        t = rung_problems(rung, TRAIN_PER_RUNG, rng, taken)
        held += [Example(uid=f"tiny-ladder/test/{len(held) + i}", question=q, answer=a, meta={"rung": rung})
                 for i, (q, a) in enumerate(h)]
        train += [Example(uid=f"tiny-ladder/train/{len(train) + i}", question=q, answer=a, meta={"rung": rung})
                  for i, (q, a) in enumerate(t)]
    return train, held


class TinyLadderTask(TinyMathTask):
    name = "tiny-ladder"

    def __init__(self, split_seed: int = 0, verifier: Any = None):
        self.train, self.held_out = split(split_seed)
        self._verifier = verifier

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name not in (None, "tiny-ladder", "test"):
            from vigor_cli.errors import UserError

            raise UserError(f"tiny-ladder has one evaluation set, 'tiny-ladder'; got {name!r}")
        return list(self.held_out)

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        return score_integer_answers(self, examples, completions)

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        return render(tokenizer, INSTRUCTION.format(q=example.question), plain_prompt(example.question))
