"""An episode's reward, computed once per episode when it has ended.

The task's reward functions grade the episode's final model turn against the example the
environment names (code-feedback: the final program on the tests of the code task's
protocol). A user's reward functions (the custom task) get, as in TRL, the whole exchange as
the completion when the prompt is a message list (``[assistant, tool, assistant, ...]``;
the final turn's text for a string prompt) and the episodes' environment instances as
``environments=``. An environment that scores episodes itself (``get_reward``) adds its value
with weight 1 under its own name (TRL's rule). An episode the environment failed (it raised,
or timed out) is left unscored (``None``) with the environment's error as its reason.
"""

from __future__ import annotations

from typing import Any, Sequence

from vigor_cli.episodes.base import Environment, Episode
from vigor_cli.task_base import Score


class EpisodeScorer:
    def __init__(self, task: Any, env: Environment):
        self.task, self.env = task, env

    def weights(self) -> list[float]:
        """Each reward function's weight, the environment's own reward last (weight 1):
        ``allocation.reward_range: auto`` reads the rewards' range from them."""
        weights = list(getattr(self.task, "weights", None) or [1.0])
        return weights + [1.0] if self.env.reward_name else weights

    def score(self, examples: Sequence[Any], episodes: Sequence[Episode]) -> list[Score]:
        """A score per episode (see the module docstring); the episodes' sessions are then
        released to the environment."""
        try:
            return self._score(examples, episodes)
        finally:
            self.env.release(episodes)

    def _score(self, examples: Sequence[Any], episodes: Sequence[Episode]) -> list[Score]:
        scores: list[Score] = [Score(None, f"environment {ep.ended}: {ep.error}") for ep in episodes]
        live = [i for i, ep in enumerate(episodes) if not ep.failed]
        if not live:
            return scores
        graded = [self.env.scoring_example(examples[i]) for i in live]
        done = [episodes[i] for i in live]
        task_scores = self._task_scores(graded, done)
        own = self._own_rewards(done) if self.env.reward_name else None
        for k, i in enumerate(live):
            scores[i] = task_scores[k] if own is None else self._with_own(task_scores[k], own[k], done[k])
        return scores

    def _task_scores(self, examples: list[Any], episodes: list[Episode]) -> list[Score]:
        from vigor_cli.tasks.custom import CustomTask

        if not isinstance(self.task, CustomTask):
            return self.task.score(examples, [ep.text for ep in episodes])
        completions = [ep.messages if isinstance(ex.meta["prompt"], list) else ep.text
                       for ex, ep in zip(examples, episodes)]
        return self.task.score(examples, completions, columns={"environments": [ep.session for ep in episodes]})

    def _own_rewards(self, episodes: list[Episode]) -> list[float | None]:
        from vigor_cli.user.rewards import check_values

        # a fault or a value that is not a number stops the run, as a --reward function's does
        return [check_values([value], 1, f"environment {self.env.reward_name}.get_reward")[0]
                for value in self.env.reward(episodes)]

    def _with_own(self, score: Score, value: float | None, ep: Episode) -> Score:
        """The task's score plus the environment's reward (weight 1), each kept as a component."""
        parts = dict(score.components) if score.components else {self.task.name: score.reward}
        parts[self.env.reward_name] = value
        values = [v for v in (score.reward, value) if v is not None]
        total = sum(values) if values else None
        shown = "none" if value is None else f"{value:.3g}"
        reason = f"{score.reason}; {self.env.reward_name} {shown}" if score.reason else f"{self.env.reward_name} {shown}"
        if value is None and ep.error:
            reason += f" ({ep.error})"
        return Score(total, reason, dict(score.details), components=parts, grading_error=score.grading_error)

    def first_attempts(self, examples: Sequence[Any], episodes: Sequence[Episode]) -> list[float | None]:
        """Each episode's first turn graded alone, as a one-turn answer (None for an episode
        the environment failed): pass@1 at the first attempt, beside after the answers."""
        live = [i for i, ep in enumerate(episodes) if not ep.failed]
        out: list[float | None] = [None] * len(episodes)
        if live:
            graded = self.task.score([self.env.scoring_example(examples[i]) for i in live],
                                     [episodes[i].first_text for i in live])
            for i, s in zip(live, graded):
                out[i] = s.reward
        return out
