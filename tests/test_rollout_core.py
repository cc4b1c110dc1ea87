"""The one rollout core (vigor_cli/train/rollout_core.py) through `vigor train`'s Trainer: the real
tiny model, the real tiny-math verifier and allocators; rewards that cannot be scored (None),
per-function components, grading errors and a reward function's error."""

from __future__ import annotations

from typing import Sequence

import pytest

from test_trainer import quiet, tiny_sets
from vigor_cli import grpo
from vigor_cli.settings import build_config
from vigor_cli.errors import UserError
from vigor_cli.run.directory import RunDir
from vigor_cli.tasks.base import Score
from vigor_cli.train.trainer import Trainer


class SomeUnscored:
    """The real tiny-math task, except that every third completion (by its text's hash) cannot
    be scored, each score carries two components, and completions without a boxed answer
    are grading errors: what a user's reward functions (and the code sandbox) report."""

    def __init__(self, task):
        self.task = task
        self.name = task.name
        self.unscored: list[str] = []

    def __getattr__(self, name):
        return getattr(self.task, name)

    def score(self, examples, completions: Sequence[str]) -> list[Score]:
        out = []
        for s, text in zip(self.task.score(examples, completions), completions):
            if sum(text.encode()) % 3 == 0:
                self.unscored.append(text)
                out.append(Score(None, "no verdict", components={"right": None, "short": 1.0}))
            else:
                out.append(Score(s.reward, s.reason, components={"right": s.reward, "short": float(len(text) < 20)},
                                 grading_error="no boxed answer" if "boxed" not in text else None))
        return out


@pytest.mark.parametrize("strategy", ["vigor", "pods"])
@pytest.mark.slow
def test_unscored_rollouts_are_counted_not_told_and_not_in_the_update(tmp_path, strategy):
    cfg = build_config(sets=tiny_sets(tmp_path, strategy, f"allocation.strategy={strategy}",
                                      "sampling.temperature=1.5"))
    tr = Trainer(cfg, RunDir(tmp_path / strategy), None, quiet())
    tr.task = SomeUnscored(tr.task)
    tr.dedupe_scoring = False
    try:
        batch = tr.rollout_phase(1)
        log = tr.train_step(2)
    finally:
        tr.close()
    unscored = [s for s in batch.generated if s.reward is None]
    assert unscored and len(unscored) < len(batch.generated)
    assert not any(s.in_update for s in unscored) and all(s.reward is not None for s in batch.samples)
    assert sum(s.in_update for s in batch.generated) == len(batch.samples)
    # advantages are vigor_cli.grpo's over the scored samples the allocator kept
    expected = grpo.compute_advantages([s.reward for s in batch.samples], [s.uid for s in batch.samples], "group")
    assert [s.advantage for s in batch.samples] == pytest.approx(expected.tolist())
    # the allocator was told the scored rewards only; the record says how many were not
    told = {p["uid"]: [r for rd in p["rounds"] for r in rd["rewards"]] for p in batch.record["prompts"]}
    for uid, rewards in told.items():
        mine = [s.reward for s in batch.generated if s.uid == uid and s.reward is not None]
        assert rewards == pytest.approx(mine)
    missing = sum(rd.get("unscored", 0) for p in batch.record["prompts"] for rd in p["rounds"])
    assert missing == sum(p.get("unscored", 0) for p in batch.record["prompts"]) == len(unscored)
    assert batch.record["totals"]["unscored"] == len(unscored)
    assert batch.record["totals"]["rollouts"] == len(batch.generated)  # every rollout counts
    # the step's metrics: reward over the scored ones, the unscored and errors counted, components
    m = log.metrics
    assert m["reward/unscored"] > 0
    assert 0.0 <= m["reward/mean"] <= 1.0
    assert m["reward/grading_errors"] == 0  # the test's rewards return None, they never raise
    assert set(k for k in m if k.startswith("reward/") and k.count("/") == 2) == {
        "reward/right/mean", "reward/short/mean", "reward/right/unscored", "reward/short/unscored"}
    # per function, the Nones it returned: 'right' is None where the rollout is unscored, 'short' never
    assert m["reward/right/unscored"] == m["reward/unscored"] and m["reward/short/unscored"] == 0


@pytest.mark.slow
def test_step_metrics_reward_mean_is_over_scored_rollouts(tmp_path):
    cfg = build_config(sets=tiny_sets(tmp_path, "m", "allocation.strategy=grpo", "sampling.temperature=1.5"))
    tr = Trainer(cfg, RunDir(tmp_path / "m"), None, quiet())
    tr.task = SomeUnscored(tr.task)
    tr.dedupe_scoring = False
    try:
        batch = tr.rollout_phase(1)
    finally:
        tr.close()
    from vigor_cli.train.rollout_core import step_metrics

    m = step_metrics(batch, 0, 0)
    rewards = [s.reward for s in batch.generated if s.reward is not None]
    assert m["reward/mean"] == pytest.approx(sum(rewards) / len(rewards))
    assert m["reward/unscored"] == len(batch.generated) - len(rewards)
    errors = [s for s in batch.generated if s.grading_error]
    assert m["reward/grading_errors"] == len(errors)
    right = [s.components["right"] for s in batch.generated if s.components.get("right") is not None]
    assert m["reward/right/mean"] == pytest.approx(sum(right) / len(right))
    assert m["rollouts/step"] == len(batch.generated)


@pytest.mark.slow
def test_a_reward_functions_error_names_the_step(tmp_path):
    cfg = build_config(sets=tiny_sets(tmp_path, "e", "allocation.strategy=grpo"))
    tr = Trainer(cfg, RunDir(tmp_path / "e"), None, quiet())

    def raising(examples, completions):
        raise UserError("reward function my_reward.py:score raised ValueError: boom")

    tr.task.score = raising
    try:
        with pytest.raises(UserError) as e:
            tr.train_step(3)
    finally:
        tr.close()
    assert str(e.value) == "step 3: reward function my_reward.py:score raised ValueError: boom"



class Doubled(SomeUnscored):
    """The real tiny-math verdicts, doubled: rewards in [0, 2] (a weighted sum of two rewards)."""

    def score(self, examples, completions: Sequence[str]) -> list[Score]:
        return [Score(2 * s.reward, s.reason, components={"right": s.reward})
                for s in self.task.score(examples, completions)]


@pytest.mark.slow
def test_rewards_outside_the_allocators_range_stop_in_one_line_or_are_mapped(tmp_path):
    """Allocators read rewards as pass rates: a reward outside allocation.reward_range stops the
    step with one line naming the key; inside it, the allocator is told (r - low) / (high - low)
    while the update's advantages use the rewards as they are."""
    cfg = build_config(sets=tiny_sets(tmp_path, "grpo", "allocation.strategy=grpo", "sampling.temperature=1.5"))
    tr = Trainer(cfg, RunDir(tmp_path / "narrow"), None, quiet())
    tr.task, tr.dedupe_scoring = Doubled(tr.task), False
    try:
        with pytest.raises(UserError, match=r"^step 1 round 1: reward 2 \(the weighted sum of right 1\) is "
                                            r"outside allocation.reward_range \[0, 1\]"):
            tr.rollout_phase(1)
    finally:
        tr.close()
    cfg = build_config(sets=tiny_sets(tmp_path, "grpo", "allocation.strategy=grpo", "sampling.temperature=1.5",
                                      "allocation.reward_range=[0,2]"))
    tr = Trainer(cfg, RunDir(tmp_path / "wide"), None, quiet())
    tr.task, tr.dedupe_scoring = Doubled(tr.task), False
    try:
        batch = tr.rollout_phase(1)
    finally:
        tr.close()
    assert {s.reward for s in batch.generated} == {0.0, 2.0}
    told = [r for p in batch.record["prompts"] for rd in p["rounds"] for r in rd["rewards"]]
    assert set(told) == {0.0, 1.0}
    expected = grpo.compute_advantages([s.reward for s in batch.samples], [s.uid for s in batch.samples], "group")
    assert [s.advantage for s in batch.samples] == pytest.approx(expected.tolist())


def test_a_reward_range_must_be_ordered():
    with pytest.raises(UserError, match="allocation.reward_range.*low end must be below the high end"):
        build_config(sets=["allocation.reward_range=[1,0]"])


def test_each_reward_functions_mean_is_in_the_step_line():
    from vigor_cli.train.log import reward_parts

    m = {"reward/mean": 0.5, "reward/std": 0.1, "reward/letters/mean": 0.625, "reward/format/mean": 0.9}
    assert reward_parts(m) == " (letters 0.625, format 0.900)"
    assert reward_parts({"reward/mean": 0.5, "reward/unscored": 0}) == ""
