"""The task interface: data, prompt template and reward, under one name.

A task turns records into :class:`Example` s, renders an example as the
prompt text the model sees, and scores completions with a verifier. The
registry in ``vigor_cli/tasks/__init__.py`` maps ``--task`` names to tasks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass
class Example:
    uid: str
    """Stable id, unique within the task (e.g. 'tiny-math/train/17', 'math500/42')."""
    question: str
    """The problem statement shown to the model (before the template)."""
    answer: Any
    """Gold: an answer string for math; a LiveCodeBench record (dict) for code."""
    meta: dict = field(default_factory=dict)


@dataclass
class Score:
    reward: float | None
    """In [0, 1] for the built-in verifiers; any finite float for a user's reward function.
    None: this completion cannot be scored (TRL's convention): it is excluded from its group's
    mean/std, gets advantage 0, is not told to the allocator, and is counted in the metrics."""
    reason: str = ""
    """Why (e.g. 'correct', 'wrong answer', 'no boxed answer', 'timeout', test verdicts)."""
    details: dict = field(default_factory=dict)
    components: dict[str, float | None] = field(default_factory=dict)
    """Per reward function (name -> unweighted value or None), when a task combines several;
    the trainer logs `reward/<name>/mean` over the non-None values of each."""
    grading_error: str | None = None
    """Set when grading itself failed for this completion (not the program's fault: a verifier
    crash, an unparseable status): the reward is 0 with this reason; the trainer counts these
    per step as `reward/grading_errors`. A run stops only on a systemic failure."""


class Task(ABC):
    name: str = "base"

    @abstractmethod
    def train_examples(self) -> list[Example]: ...

    @abstractmethod
    def eval_examples(self, name: str | None = None) -> list[Example]:
        """Held-out examples of evaluation set ``name`` (None: the task's default)."""

    @abstractmethod
    def render_prompt(self, example: Example, tokenizer: Any) -> str:
        """The text the model continues (chat template when the tokenizer has one)."""

    @abstractmethod
    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> list[Score]:
        """Score ``completions[i]`` against ``examples[i]``; may run in parallel."""

    def follow_up(self, text: str) -> str:
        """A later user message (an environment's answer in an episode) as plain text, for a
        tokenizer without a chat template: as the task writes its questions (default: the
        text and a newline)."""
        return f"{text}\n"

    def close(self) -> None:
        """Release worker pools."""


def score_once(task: Task, examples: Any, keys: Sequence[tuple[str, str]], graded: dict) -> list[Score]:
    """Scores of (uid, completion text) pairs, each distinct pair graded once: a reward is a
    function of the example and the text alone, and sampled completions repeat (a verifier
    call each, a sandbox run for code). ``graded`` holds the pairs already scored (a training
    step's earlier rounds) and gains the new ones; ``examples`` maps uid to Example."""
    new = list(dict.fromkeys(k for k in keys if k not in graded))
    if new:
        graded.update(zip(new, task.score([examples[u] for u, _ in new], [t for _, t in new])))
    return [graded[k] for k in keys]
