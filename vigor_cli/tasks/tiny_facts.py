"""tiny-facts: keyed facts, a task whose learning barely transfers between prompts.

Each prompt asks for the code of a random key (``code of kqzt?`` -> ``\\boxed{417}``):
keys are four random letters, codes random three-digit numbers, both drawn from
``split_seed``. Nothing about one key says anything about another's code, so each
prompt's answer must be learned for itself: the regime where concentrating rollouts on
the prompts whose rewards vary is supposed to pay (the VIGOR paper's premise).

Details: docs/modules.md.
"""

from __future__ import annotations

import random
import string
from typing import Any, Sequence

from vigor_cli.task_base import Example, Score
from vigor_cli.tasks.prompts import render
from vigor_cli.tasks.tiny_math import score_integer_answers, TinyMathTask

FACTS = 256
"""Number of keyed facts (every one is a training prompt and an evaluation item)."""
KEY_LENGTH = 4
CODE_RANGE = (100, 999)
"""Codes are uniform three-digit numbers: guessing one is a 1-in-900 chance."""

INSTRUCTION = "What is the code of {q}? Put the final answer in \\boxed{{}}."


def all_facts(split_seed: int = 0) -> list[tuple[str, str]]:
    """(key, code) pairs, deterministic in ``split_seed``; keys unique."""
    rng = random.Random(f"tiny-facts/{split_seed}")
    keys: list[str] = []
    seen: set[str] = set()
    while len(keys) < FACTS:
        key = "".join(rng.choice(string.ascii_lowercase) for _ in range(KEY_LENGTH))
        if key not in seen:
            seen.add(key)
            keys.append(key)
    return [(k, str(rng.randint(*CODE_RANGE))) for k in keys]


def examples(split_seed: int = 0) -> list[Example]:
    return [Example(uid=f"tiny-facts/{i}", question=k, answer=c) for i, (k, c) in enumerate(all_facts(split_seed))]


def plain_prompt(key: str) -> str:
    """What a tokenizer without chat template sees (what the warm-up teaches)."""
    return f"code of {key}?"


class TinyFactsTask(TinyMathTask):
    name = "tiny-facts"

    def __init__(self, split_seed: int = 0, verifier: Any = None):
        self.train = examples(split_seed)
        self.held_out = self.train
        self._verifier = verifier

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name not in (None, "tiny-facts"):
            from vigor_cli.errors import UserError

            raise UserError(f"tiny-facts has one evaluation set, 'tiny-facts' (its own facts); got {name!r}")
        return list(self.train)

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        return score_integer_answers(self, examples, completions)

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        return render(tokenizer, INSTRUCTION.format(q=example.question), plain_prompt(example.question))
