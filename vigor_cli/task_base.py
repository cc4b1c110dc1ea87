"""The task interface: data, prompt template and reward, under one name.

A task turns records into :class:`Example` s, renders an example as the prompt text the model
sees, and scores completions with a verifier. The registry in ``vigor_cli/tasks/__init__.py``
maps ``--task`` names to tasks; this module stays outside that package so that the rewards
(vigor_cli/user/rewards.py) use :class:`Score` without loading the registry.
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
    extra: dict[str, Any] = field(default_factory=dict)
    """Columns a reward function logged for this completion through TRL's ``log_extra``
    (completions.jsonl, the dashboards' completions table, evaluation files)."""


class Task(ABC):
    name: str = "base"
    takes_completion_ids: bool = False
    """``score`` takes ``completion_ids=`` (each completion's token ids): reward functions that
    read TRL's ``completion_ids`` get them (:func:`grade`)."""
    trainer_state: Any = None
    """What reward functions get as TRL's ``trainer_state`` (a ``transformers.TrainerState``,
    set by the trainer before each step and evaluation); tasks that pass none ignore it."""

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

    def logged_metrics(self) -> dict[str, float]:
        """The means of what reward functions logged through TRL's ``log_metric`` since the last
        call (then cleared); none for a task without such functions."""
        return {}

    def describe_data(self) -> list[str]:
        """Lines `vigor train` prints about the task's data once loaded (e.g. the code task's
        split of problems into training and evaluation)."""
        return []

    def leave_out_of_training(self, uids: set[str]) -> None:
        """The training prompts a run leaves out (longer than task.max_prompt_tokens): a task
        whose held-out set is drawn from its training rows draws it from the others."""

    def follow_up(self, text: str) -> str:
        """A later user message (an environment's answer in an episode) as plain text, for a
        tokenizer without a chat template: as the task writes its questions (default: the
        text and a newline)."""
        return f"{text}\n"

    def close(self) -> None:
        """Release worker pools."""


def grade(task: Task, examples: Sequence[Example], completions: Sequence[str],
          completion_ids: Sequence[Sequence[int]] | None = None) -> list[Score]:
    """``task.score``, with each completion's token ids when the task takes them."""
    if completion_ids is not None and getattr(task, "takes_completion_ids", False):
        return task.score(examples, completions, completion_ids=[list(i) for i in completion_ids])
    return task.score(examples, completions)


def score_once(task: Task, examples: Any, keys: Sequence[tuple[str, str]], graded: dict,
               completion_ids: Sequence[Sequence[int]] | None = None) -> list[Score]:
    """Scores of (uid, completion text) pairs, each distinct pair graded once: a reward is a
    function of the example and the completion alone, and sampled completions repeat (a
    verifier call each, a sandbox run for code). ``graded`` holds the pairs already scored (a
    training step's earlier rounds) and gains the new ones; ``examples`` maps uid to Example.
    With ``completion_ids`` (for a task that takes them) a pair is also told apart by its ids."""
    ids = None
    if completion_ids is not None and getattr(task, "takes_completion_ids", False):
        ids = [tuple(i) for i in completion_ids]
        keys = [(*k, i) for k, i in zip(keys, ids)]
    new = list(dict.fromkeys(k for k in keys if k not in graded))
    if new:
        graded.update(zip(new, grade(task, [examples[k[0]] for k in new], [k[1] for k in new],
                                     [k[2] for k in new] if ids is not None else None)))
    return [graded[k] for k in keys]
