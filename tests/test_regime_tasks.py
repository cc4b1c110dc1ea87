"""The study's regime tasks (tiny-facts, tiny-ladder) and their warm-up recipes: data,
prompts, real grading, and the seeded warm-up of the bundled model."""

from __future__ import annotations

import json

import pytest

from vigor_cli.config import TaskConfig
from vigor_cli.errors import UserError
from vigor_cli.tasks import get_task, tiny_facts, tiny_ladder
from vigor_cli.tasks.base import Example


# --------------------------------------------------------------------------- tiny-facts
def test_facts_are_unique_seeded_and_arbitrary():
    facts = tiny_facts.all_facts(0)
    assert len(facts) == tiny_facts.FACTS
    keys = [k for k, _ in facts]
    assert len(set(keys)) == len(keys)
    assert all(len(k) == tiny_facts.KEY_LENGTH and k.isalpha() and k.islower() for k in keys)
    lo, hi = tiny_facts.CODE_RANGE
    assert all(lo <= int(c) <= hi for _, c in facts)
    assert tiny_facts.all_facts(0) == facts
    assert tiny_facts.all_facts(1) != facts
    # codes are not a function of the key's letters: equal first letters, spread codes
    by_first: dict[str, set[str]] = {}
    for k, c in facts:
        by_first.setdefault(k[0], set()).add(c)
    assert max(len(v) for v in by_first.values()) > 5


def test_facts_task_evaluates_its_own_facts():
    task = get_task(TaskConfig(name="tiny-facts"))
    train, held = task.train_examples(), task.eval_examples()
    assert [e.uid for e in train] == [e.uid for e in held]
    assert train[0].uid == "tiny-facts/0"
    assert task.render_prompt(train[0], None) == f"code of {train[0].question}?"
    with pytest.raises(UserError, match="tiny-facts has one evaluation set"):
        task.eval_examples("math500")
    task.close()


@pytest.mark.slow
def test_facts_are_graded_by_the_math_verifier():
    task = get_task(TaskConfig(name="tiny-facts"))
    ex = Example("tiny-facts/x", "abcd", "417")
    try:
        scores = task.score([ex] * 4, ["\\boxed{417}", "\\boxed{418}", "I forgot", "\\boxed{417.0}"])
    finally:
        task.close()
    assert [s.reward for s in scores[:3]] == [1.0, 0.0, 0.0]
    assert scores[3].reward == 1.0  # not an exact match: the verifier decided it


@pytest.mark.slow
def test_integer_fast_path_only_decides_plain_integer_mismatches(monkeypatch):
    """A plain-integer boxed answer unlike the gold is wrong without a verifier call; zero-padded,
    decimal or non-integer answers still reach the verifier, which may accept them."""
    task = get_task(TaskConfig(name="tiny-ladder"))
    sent: list[str] = []
    real = type(task).__mro__[1].score  # TinyMathTask.score: exact match, else the verifier

    def spy(self, examples, completions):
        sent.extend(completions)
        return real(self, examples, completions)

    from vigor_cli.tasks.tiny_math import TinyMathTask

    monkeypatch.setattr(TinyMathTask, "score", spy)
    ex = Example("tiny-ladder/x", "40+5", "45")
    try:
        scores = task.score([ex] * 5, ["\\boxed{46}", "\\boxed{-45}", "\\boxed{045}", "\\boxed{45.0}", "\\boxed{45}"])
    finally:
        task.close()
    assert [s.reward for s in scores] == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert sent == ["\\boxed{045}", "\\boxed{45.0}", "\\boxed{45}"]  # 46 and -45 were decided without it


# --------------------------------------------------------------------------- tiny-ladder
def test_ladder_split_has_every_rung_disjoint_and_correct():
    train, held = tiny_ladder.split(0)
    assert tiny_ladder.split(0)[1] == held
    rungs = len(tiny_ladder.RUNGS)
    assert {e.meta["rung"] for e in train} == {e.meta["rung"] for e in held} == set(range(1, rungs + 1))
    assert len(held) == rungs * tiny_ladder.HELD_PER_RUNG
    assert not {e.question for e in train} & {e.question for e in held}
    assert sum(e.meta["rung"] == 1 for e in train) == 100 - tiny_ladder.HELD_PER_RUNG  # rung 1 has 100 problems
    for e in train[::97] + held:
        a, b = e.question.split("+")
        assert int(a) + int(b) == int(e.answer)
        da, db = tiny_ladder.RUNGS[e.meta["rung"] - 1]
        assert (len(a), len(b)) == (da, db)


def test_ladder_task_prompts_and_grading():
    task = get_task(TaskConfig(name="tiny-ladder"))
    try:
        ex = task.eval_examples()[-1]
        assert task.render_prompt(ex, None) == f"{ex.question}="
        scores = task.score([ex, ex], [f"\\boxed{{{ex.answer}}}", "\\boxed{1}"])
        assert [s.reward for s in scores] == [1.0, 0.0]
        with pytest.raises(UserError):
            task.eval_examples("other")
    finally:
        task.close()


# --------------------------------------------------------------------------- warm-ups
def test_facts_exposures_are_heavy_tailed_and_seeded():
    from vigor_cli.model.tiny import FACTS_RECIPE, facts_exposures

    e = facts_exposures(0)
    assert len(e) == tiny_facts.FACTS
    never = sum(x == 0 for x in e)
    assert never == int(FACTS_RECIPE["never"] * len(e))
    shown = [x for x in e if x]
    assert min(shown) == FACTS_RECIPE["min_exposure"] and max(shown) == FACTS_RECIPE["max_exposure"]
    assert facts_exposures(0) == e and facts_exposures(1) != e


def test_make_tiny_rejects_an_unknown_recipe(vigor, tmp_path):
    code, _, err = vigor("make-tiny", "--recipe", "nope", "--out", str(tmp_path / "m"))
    assert code == 2 and "--recipe: unknown recipe 'nope'" in err


@pytest.mark.slow
def test_task_warmup_is_deterministic_and_records_its_start(tmp_path, monkeypatch):
    """A shortened facts recipe built twice: identical weights, a recipe.json with the start."""
    from vigor_cli.model import tiny as tiny_model

    monkeypatch.setitem(tiny_model.FACTS_RECIPE, "min_exposure", 1)
    monkeypatch.setitem(tiny_model.FACTS_RECIPE, "max_exposure", 3)
    a = tiny_model.warm_task("facts", tmp_path / "a", seed=0, log=lambda _: None)
    b = tiny_model.warm_task("facts", tmp_path / "b", seed=0, log=lambda _: None)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert a["start_pass_counts_of_16"] == b["start_pass_counts_of_16"]
    rec = json.loads((tmp_path / "a" / "recipe.json").read_text())
    assert rec["recipe"] == "facts" and rec["base"] == "tiny" and rec["max_exposure"] == 3
    assert sum(rec["start_histogram"].values()) == tiny_facts.FACTS
    assert rec["steps"] == len(range(0, sum(rec["exposures"]), rec["batch_size"]))
