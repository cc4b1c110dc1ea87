"""knapsack, reinforce-ada, pilot-commit and auto in the real trainer (tiny model, tiny-math, verifier)."""

from __future__ import annotations

import json

import pytest

from test_trainer import quiet, strip_times, tiny_sets
from vigor_cli.settings import build_config
from vigor_cli.run.directory import RunDir
from vigor_cli.train.trainer import Trainer, train


@pytest.mark.parametrize("strategy", ["knapsack", "reinforce-ada", "pilot-commit", "auto"])
@pytest.mark.slow
def test_two_steps_in_the_trainer(tmp_path, strategy, vigor):
    cfg = build_config(sets=tiny_sets(tmp_path, strategy, f"allocation.strategy={strategy}"))
    train(cfg, out=quiet())
    run = RunDir(tmp_path / strategy)
    rows = [r for r in run.metrics() if "reward/mean" in r]
    records = [json.loads(line) for line in (run.path / "allocation.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for row, rec in zip(rows, records):
        assert row["rollouts/step"] == rec["totals"]["rollouts"] <= 16  # budget: 4 x 4
        assert rec["strategy"] == strategy
    if strategy == "auto":
        assert all(rec["totals"]["auto"]["decision"] in ("wide", "deep") for rec in records)
        code, out, _ = vigor("inspect-allocation", str(run.path))
        assert code == 0
        assert records[-1]["totals"]["auto"]["reason"][:40] in " ".join(out.split())
        assert "plan" in out
    assert (run.latest_checkpoint() / "allocator.json").exists()


# auto (the default) stays in the fast suite; the others resume the same way and run in the slow set
@pytest.mark.parametrize("strategy", ["auto", pytest.param("knapsack", marks=pytest.mark.slow),
                                      pytest.param("pilot-commit", marks=pytest.mark.slow)])
@pytest.mark.slow
def test_resume_continues_the_history(tmp_path, monkeypatch, strategy):
    """The per-prompt reward history (and auto's census moments) cross steps in
    allocator.json; a run killed after the step-2 checkpoint and resumed writes the same
    metrics and allocation records as the uninterrupted run."""
    sets = tiny_sets(tmp_path, "x", "train.steps=4", "train.save_every=2", "train.eval_every=2",
                     f"allocation.strategy={strategy}")
    train(build_config(sets=sets + ["train.run_name=whole"]), out=quiet())
    original = Trainer.train_step

    def crash_at_three(self, step):
        if step == 3:
            raise KeyboardInterrupt
        return original(self, step)

    monkeypatch.setattr(Trainer, "train_step", crash_at_three)
    with pytest.raises(KeyboardInterrupt):
        train(build_config(sets=sets + ["train.run_name=cut"]), out=quiet())
    monkeypatch.setattr(Trainer, "train_step", original)
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step-2" / "allocator.json").read_text())
    assert state["strategy"] == strategy and (state.get("history") or state.get("streak"))
    train(resume=tmp_path / "cut", out=quiet())
    whole = strip_times(RunDir(tmp_path / "whole").metrics())
    resumed = strip_times(RunDir(tmp_path / "cut").metrics())
    assert [r["step"] for r in resumed] == [0, 1, 2, 2, 3, 4, 4]
    assert resumed == whole
    cut = (tmp_path / "cut" / "allocation.jsonl").read_text().splitlines()
    full = (tmp_path / "whole" / "allocation.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in cut] == [json.loads(x) for x in full]


@pytest.mark.slow
def test_each_distinct_completion_is_graded_once_per_step(tmp_path):
    """The trainer grades each distinct (prompt, completion) of a step once; the rewards,
    and so every metric and record, are those of grading every completion."""
    def build(name: str, dedupe: bool) -> Trainer:
        cfg = build_config(sets=tiny_sets(tmp_path, name, "train.prompts_per_step=8", "allocation.group_size=8"))
        tr = Trainer(cfg, RunDir(tmp_path / name), None, quiet())
        tr.dedupe_scoring = dedupe
        graded = []
        score = tr.task.score

        def counting(examples, completions):
            graded.append(len(completions))
            return score(examples, completions)

        tr.task.score = counting
        return tr, graded

    (once, n_once), (every, n_every) = build("once", True), build("every", False)
    generated = 0
    for step in (1, 2):
        a, b = once.train_step(step), every.train_step(step)
        assert a.record == b.record
        assert strip_times([a.metrics]) == strip_times([b.metrics])
        assert [(s.uid, s.reward, s.reason) for s in a.samples] == [(s.uid, s.reward, s.reason) for s in b.samples]
        generated += b.metrics["rollouts/step"]
    assert sum(n_every) == generated  # without the cache, every completion is graded
    # VIGOR gives a kept prompt 30 rollouts over 4 rounds: the tiny model repeats itself
    assert sum(n_once) < sum(n_every)
    # within a round, the same text is graded once; across rounds, never again
    texts = {}
    for s in a.samples:
        texts.setdefault((s.uid, s.rollout.text), s.reward)
    assert all(texts[(s.uid, s.rollout.text)] == s.reward for s in a.samples)
