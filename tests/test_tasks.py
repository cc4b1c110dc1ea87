"""Tasks: registry, splits, prompt rendering, loaders on upstream-format files, real grading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vigor_cli.config import TaskConfig
from vigor_cli.package_data import MATH_EVAL_DIR
from vigor_cli.errors import UserError
from vigor_cli.tasks import TASKS, get_task
from vigor_cli.tasks import tiny_code, tiny_math
from vigor_cli.tasks.base import Example
from vigor_cli.tasks.code_task import filter_by_date
from vigor_cli.tasks.prompts import last_boxed, render
from vigor_cli.model.tiny import TINY_DIR

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tasks"
LCB_SAMPLE = FIXTURES / "lcb_v6_sample.jsonl"


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TINY_DIR))


# --------------------------------------------------------------------------- registry
def test_unknown_task_lists_valid_names():
    from vigor_cli.settings import build_config

    with pytest.raises(ValueError) as err:  # a built config refuses it (vigor_cli/settings.py)
        build_config(sets=["task.name=tiny-maths"])
    with pytest.raises(UserError) as err2:  # and so does the registry, given an unchecked config
        get_task(TaskConfig.model_construct(name="tiny-maths"))
    for msg in (str(err.value), str(err2.value)):
        assert "tiny-maths" in msg and all(name in msg for name in TASKS)


def test_registry_builds_every_task():
    for name in TASKS:
        own = {"data": "train.jsonl", "rewards": ["math"]} if name == "custom" else {}  # read later
        task = get_task(TaskConfig(name=name, **own))
        assert task.name == name
        task.close()


# --------------------------------------------------------------------------- tiny-math
def test_tiny_math_split_is_deterministic_and_disjoint():
    train, held = tiny_math.split(0)
    again_train, again_held = tiny_math.split(0)
    assert [e.question for e in train] == [e.question for e in again_train]
    assert [e.question for e in held] == [e.question for e in again_held]
    assert len(held) == tiny_math.HELD_OUT_SIZE
    assert len(train) + len(held) == len(tiny_math.all_problems())
    assert not {e.question for e in train} & {e.question for e in held}
    assert [e.question for e in tiny_math.split(1)[1]] != [e.question for e in held]
    for e in held[:50]:  # the gold answers are the arithmetic
        a, op, b = e.question.partition("+") if "+" in e.question else e.question.partition("-")
        assert int(e.answer) == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0


@pytest.mark.slow
def test_tiny_math_is_graded_by_the_math_verifier():
    task = get_task(TaskConfig(name="tiny-math"))
    ex = Example("t/0", "12+7", "19")
    try:
        scores = task.score(
            [ex] * 5,
            ["\\boxed{19}", "\\boxed{18}", "\\boxed{ 19 }", "\\boxed{19.0}", "\\boxed{19}\\boxed{20}"],
        )
    finally:
        task.close()
    assert [s.reward for s in scores] == [1.0, 0.0, 1.0, 1.0, 0.0]
    # ' 19 ' and 19.0 are not exact matches: only the verifier can have accepted them.
    assert scores[2].details.get("pred") and scores[3].details.get("pred")


def test_prompt_is_plain_without_chat_template_and_chat_with_one(tiny_tokenizer):
    task = get_task(TaskConfig(name="tiny-math"))
    ex = task.eval_examples()[0]
    assert task.render_prompt(ex, tiny_tokenizer) == f"{ex.question}="
    assert task.render_prompt(ex, None) == f"{ex.question}="
    chat = type(tiny_tokenizer).from_pretrained(str(TINY_DIR))
    chat.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    text = task.render_prompt(ex, chat)
    assert text.startswith("<|user|>Compute " + ex.question) and text.endswith("<|assistant|>")
    assert "\\boxed{}" in text
    assert render(chat, "q", "plain") != "plain"


def test_last_boxed_balances_braces():
    assert last_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}} end") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{open") is None
    assert last_boxed("none") is None


# --------------------------------------------------------------------------- tiny-code
@pytest.mark.slow
def test_tiny_code_records_are_lcb_format_and_reference_solutions_pass():
    from vigor_cli.verifiers.code import load_problem

    train, held = tiny_code.split(0)
    assert len(held) == tiny_code.HELD_OUT_SIZE
    assert not {e.question for e in train} & {e.question for e in held}
    for e in train + held:
        problem = load_problem(e.answer)  # the real LiveCodeBench loader accepts every record
        assert len(problem.tests("public")) == tiny_code.PUBLIC_TESTS
    task = get_task(TaskConfig(name="tiny-code"), workers=2)
    picked = held[::8] + train[::30]
    try:
        good = task.score(picked, [tiny_code.target_completion(e.meta["solution"]) for e in picked])
        bad = task.score(picked[:2], ["```python\nprint(input())\n```", "no code here"])
    finally:
        task.close()
    assert all(s.reward == 1.0 for s in good), [s.reason for s in good]
    assert [s.reward for s in bad] == [0.0, 0.0]
    assert bad[1].reason == "no code block"


def test_tiny_code_trains_on_all_tests_and_evaluates_held_out_private_tests():
    train, held = tiny_code.split(0)
    assert {e.meta["tests"] for e in train} == {"all"}
    assert {e.meta["tests"] for e in held} == {"private"}
    assert not {e.answer["question_id"] for e in train} & {e.answer["question_id"] for e in held}


# --------------------------------------------------------------------------- math
@pytest.mark.parametrize("name", ["math_train.jsonl", "math_train.parquet"])
def test_math_training_records_from_local_files(name):
    task = get_task(TaskConfig(name="math", train_path=str(FIXTURES / name)))
    examples = task.train_examples()
    assert [e.answer for e in examples] == ["2", "\\frac{1}{2}", "3"]
    assert examples[0].question == "What is $1+1$?"
    assert examples[1].meta["type"] == "Algebra"


def test_math_missing_field_names_file_and_record(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?", "solution": "no box"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl record 2: 'solution' has no \\boxed"):
        get_task(TaskConfig(name="math", train_path=str(bad))).train_examples()
    bad.write_text('{"question_text": "x"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl record 1: missing field 'problem'"):
        get_task(TaskConfig(name="math", train_path=str(bad))).train_examples()


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(UserError, match="data file not found: .*nope.jsonl"):
        get_task(TaskConfig(name="math", train_path=str(tmp_path / "nope.jsonl"))).train_examples()
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem": "x", "answer": "1"}\n{not json\n')
    with pytest.raises(UserError, match=r"broken.jsonl:2: not valid JSON"):
        get_task(TaskConfig(name="math", train_path=str(broken))).train_examples()
    (tmp_path / "t.txt").write_text("a,b\n")
    with pytest.raises(UserError, match="unsupported file type '.txt'"):
        get_task(TaskConfig(name="math", train_path=str(tmp_path / "t.txt"))).train_examples()
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(UserError, match="junk.parquet: not a Parquet file this tool reads"):
        get_task(TaskConfig(name="math", train_path=str(tmp_path / "junk.parquet"))).train_examples()


@pytest.mark.slow
def test_math_eval_sets_load_from_the_shipped_files_and_grade():
    """No task.data_dir: the six sets come from the files shipped in the package."""
    assert MATH_EVAL_DIR.is_dir() and MATH_EVAL_DIR.parent.parent.name == "vigor_cli"
    task = get_task(TaskConfig(name="math"))
    sizes = {}
    for name in ("math500", "aime24", "amc23", "gaokao2023en", "minerva_math", "olympiadbench"):
        examples = task.eval_examples(name)
        sizes[name] = len(examples)
        assert all(e.question and e.answer for e in examples)
    assert sizes == {"math500": 500, "aime24": 30, "amc23": 40, "gaokao2023en": 385,
                     "minerva_math": 272, "olympiadbench": 675}
    first = task.eval_examples("math500")[0]
    try:
        scores = task.score([first, first], [f"so \\boxed{{{first.answer}}}", "\\boxed{42}"])
    finally:
        task.close()
    assert [s.reward for s in scores] == [1.0, 0.0]
    prompt = task.render_prompt(first, None)
    assert first.question in prompt and "\\boxed{}" in prompt
    with pytest.raises(UserError, match="unknown math evaluation set 'math501'"):
        task.eval_examples("math501")


def test_math_eval_data_dir_overrides_the_shipped_files(tmp_path):
    (tmp_path / "aime24.jsonl").write_text(json.dumps({"id": 5, "problem": "1+1?", "answer": "002"}) + "\n")
    examples = get_task(TaskConfig(name="math", data_dir=str(tmp_path))).eval_examples("aime24")
    assert [(e.uid, e.question, e.answer) for e in examples] == [("aime24/5", "1+1?", "2")]


def test_math_eval_missing_dir_names_file(tmp_path):
    task = get_task(TaskConfig(name="math", data_dir=str(tmp_path)))
    with pytest.raises(UserError, match="aime24.jsonl"):
        task.eval_examples("aime24")


@pytest.mark.slow
def test_hub_unreachable_offline_names_dataset_and_flag():
    code = (
        "from vigor_cli.config import TaskConfig\n"
        "from vigor_cli.errors import UserError\n"
        "from vigor_cli.tasks import get_task\n"
        "for name in ('math', 'code'):\n"
        "    try:\n"
        "        get_task(TaskConfig(name=name)).train_examples()\n"
        "    except UserError as e:\n"
        "        print(e)\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, cwd=Path(__file__).resolve().parents[1])
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    assert "MATH training problems" in lines[0] and "DigitalLearningGmbH/MATH-lighteval" in lines[0]
    assert "--set task.train_path=" in lines[0]
    assert "livecodebench/code_generation_lite" in lines[1] and "--set task.train_path=" in lines[1]


# --------------------------------------------------------------------------- code (LiveCodeBench)
@pytest.mark.slow
def test_code_task_same_problem_protocol_grades_public_vs_private():
    cfg = TaskConfig(name="code", train_path=str(LCB_SAMPLE), code_protocol="same-problem")
    task = get_task(cfg, workers=2)
    train = task.train_examples()
    evals = task.eval_examples()
    assert [e.answer["question_id"] for e in train] == ["abc900_a", "9001", "2050A"]
    assert {e.meta["tests"] for e in train} == {"public"} and {e.meta["tests"] for e in evals} == {"private"}
    prompt = task.render_prompt(train[1], None)
    assert "class Solution:" in prompt and "Question: Given nums and k" in prompt
    assert "stdin" in task.render_prompt(train[0], None)
    add = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    add_k = ("```python\nclass Solution:\n    def addK(self, nums, k):\n"
             "        return [x + k for x in nums]\n```")
    only_public = "```python\nprint(7)\n```"  # passes the one public test, fails the private ones
    try:
        scores = task.score([train[0], train[1], train[0], evals[0]], [add, add_k, only_public, only_public])
    finally:
        task.close()
    assert [s.reward for s in scores] == [1.0, 1.0, 1.0, 0.0]
    assert len(scores[3].details["tests"]) == 2  # evaluation: the two base64/zlib/pickle private tests


def test_code_contest_date_window():
    rows = [json.loads(line) for line in LCB_SAMPLE.read_text().splitlines()]
    assert [r["question_id"] for r in filter_by_date(rows, "2025-01-01", None)] == ["9001", "2050A"]
    assert [r["question_id"] for r in filter_by_date(rows, None, "2025-03-01")] == ["abc900_a", "9001"]
    cfg = TaskConfig(name="code", train_path=str(LCB_SAMPLE), contest_date_start="2025-03-01",
                     code_protocol="same-problem")
    assert [e.answer["question_id"] for e in get_task(cfg).train_examples()] == ["2050A"]
    with pytest.raises(UserError, match="task.contest_date_start: 'May 2025' is not an ISO date"):
        filter_by_date(rows, "May 2025", None)


def test_code_missing_field_names_file_and_record(tmp_path):
    rows = [json.loads(line) for line in LCB_SAMPLE.read_text().splitlines()]
    del rows[1]["public_test_cases"]
    bad = tmp_path / "lcb.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=r"lcb.jsonl record 2: missing field 'public_test_cases'"):
        get_task(TaskConfig(name="code", train_path=str(bad))).train_examples()


@pytest.mark.slow
def test_code_undecodable_tests_name_the_record(tmp_path):
    rows = [json.loads(line) for line in LCB_SAMPLE.read_text().splitlines()]
    rows[0]["private_test_cases"] = "eJ-not-base64"
    bad = tmp_path / "lcb.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n")
    task = get_task(TaskConfig(name="code", train_path=str(bad), code_protocol="same-problem"))
    ex = task.train_examples()[0]
    with pytest.raises(UserError, match="abc900_a"):
        task.score([ex], ["```python\nprint(1)\n```"])
    task.close()
