"""tiny-guess: guess a hidden whole number from 1 to 7, a game for episodes (``--env higher-lower``).

Every prompt reads the same (``Guess my number (1-7)=`` for a tokenizer without chat
template: the tiny model's habit after ``=`` is a ``\\boxed{}`` number); each example hides
one number, its answer, which the prompt does not tell. One turn can only be lucky (1 in 7
at best); with an environment that says "higher" or "lower" a binary search finds any of
the seven in three turns, and one that says only "wrong" (``retry``) allows three distinct
guesses. So the environment's answers are what there is to learn from. An answer is right
when its last ``\\boxed{}`` holds the number.
"""

from __future__ import annotations

from typing import Any, Sequence

from vigor_cli.task_base import Example, Score, Task
from vigor_cli.tasks.prompts import last_boxed, render

LOW, HIGH = 1, 7
"""The hidden number's range."""
TRAIN_COPIES, HELD_OUT_COPIES = 16, 4
"""Examples per hidden number in the training and the held-out set."""
QUESTION = f"Guess my number ({LOW}-{HIGH})"
INSTRUCTION = (f"I am thinking of a whole number from {LOW} to {HIGH}. Guess it; put your guess in \\boxed{{}}. "
               "I will say whether my number is higher or lower.")


def examples(part: str, copies: int) -> list[Example]:
    """``copies`` examples of every hidden number, in a fixed order."""
    return [Example(uid=f"tiny-guess/{part}/{i}", question=QUESTION, answer=str(LOW + i % (HIGH - LOW + 1)))
            for i in range(copies * (HIGH - LOW + 1))]


class TinyGuessTask(Task):
    name = "tiny-guess"

    def train_examples(self) -> list[Example]:
        return examples("train", TRAIN_COPIES)

    def eval_examples(self, name: str | None = None) -> list[Example]:
        if name not in (None, "tiny-guess", "test"):
            from vigor_cli.errors import UserError

            raise UserError(f"tiny-guess has one evaluation set, 'tiny-guess'; got {name!r}")
        return examples("test", HELD_OUT_COPIES)

    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        return render(tokenizer, INSTRUCTION, f"{example.question}=")

    def follow_up(self, text: str) -> str:
        return f"{text}="

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        out = []
        for ex, text in zip(examples, completions):
            guess = last_boxed(text)
            if guess is None:
                out.append(Score(0.0, "no boxed answer"))
            else:
                out.append(Score(1.0, "correct") if guess.strip() == ex.answer else Score(0.0, "wrong number"))
        return out
