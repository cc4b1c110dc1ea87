"""Issue 34 part 5: a code protocol that rewards computing.

By default the code task's training and evaluation problems are disjoint, split by contest
date as LiveCodeBench intends; a training problem is rewarded on all its tests, so a table of
the statement's samples earns little; a health check names hard-coding; the paper's
same-problem protocol stays behind ``task.code_protocol`` with its risk in the key's words.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from vigor_cli.train import health
from vigor_cli.config import TaskConfig
from vigor_cli.errors import UserError
from vigor_cli.settings import build_config
from vigor_cli.tasks import get_task, tiny_code
from vigor_cli.tasks.code_split import CODE_PROTOCOLS, split_problems
from vigor_cli.verifiers.hard_coding import quotes_outputs


def _record(qid: str, date: str, k: int = 3) -> dict:
    """An LCB stdin record: print n*k; one public test (the sample), three private ones."""
    tests = [{"input": f"{n}\n", "output": f"{n * k}\n", "testtype": "stdin"} for n in (14, 25, 36, 47)]
    return {"question_title": qid, "question_content": f"Read n. Print n*{k}.", "platform": "atcoder",
            "question_id": qid, "contest_id": "c", "contest_date": f"{date}T00:00:00", "starter_code": "",
            "difficulty": "easy", "public_test_cases": json.dumps(tests[:1]),
            "private_test_cases": json.dumps(tests[1:]), "metadata": "{}"}


DATES = {"old1": "2023-06-10", "old2": "2024-03-02", "edge": "2024-08-01", "new1": "2024-11-16",
         "new2": "2025-02-22"}
SAMPLE_TABLE = '```python\nprint({"14": "42"}[input().strip()])\n```'
"""Prints the statement's one sample output from a table: passes the public test only."""
HONEST = "```python\nprint(int(input()) * 3)\n```"


@pytest.fixture
def lcb_file(tmp_path):
    path = tmp_path / "lcb.jsonl"
    path.write_text("".join(json.dumps(_record(q, d)) + "\n" for q, d in DATES.items()))
    return path


def test_the_default_split_is_disjoint_by_contest_date_and_printed(lcb_file):
    task = get_task(TaskConfig(name="code", train_path=str(lcb_file)))
    train, evals = task.train_examples(), task.eval_examples()
    train_ids = {e.answer["question_id"] for e in train}
    eval_ids = {e.answer["question_id"] for e in evals}
    assert train_ids == {"old1", "old2"} and eval_ids == {"edge", "new1", "new2"}
    assert not train_ids & eval_ids
    assert {e.meta["tests"] for e in train} == {"all"} and {e.meta["tests"] for e in evals} == {"all"}
    split = task.split()
    assert (split.protocol, split.split_date, split.train_tests, split.eval_tests) == \
        ("disjoint", "2024-08-01", "all", "all")
    assert task.describe_data() == [split.describe()]
    assert "2 training problems with contest_date before 2024-08-01" in split.describe()
    assert "3 held-out evaluation problems from 2024-08-01 on" in split.describe()


def test_a_problem_in_both_sources_is_evaluated_never_trained_on(tmp_path):
    train_file, eval_dir = tmp_path / "train.jsonl", tmp_path / "eval"
    eval_dir.mkdir()
    train_file.write_text(json.dumps(_record("dup", "2023-01-01")) + "\n" + json.dumps(_record("a", "2023-02-02")) + "\n")
    (eval_dir / "code.jsonl").write_text(json.dumps(_record("dup", "2025-01-01")) + "\n")
    task = get_task(TaskConfig(name="code", train_path=str(train_file), data_dir=str(eval_dir)))
    assert [e.answer["question_id"] for e in task.train_examples()] == ["a"]
    assert [e.answer["question_id"] for e in task.eval_examples()] == ["dup"]


def test_the_same_problem_protocol_stays_behind_its_key(lcb_file):
    task = get_task(TaskConfig(name="code", train_path=str(lcb_file), code_protocol="same-problem"))
    train, evals = task.train_examples(), task.eval_examples()
    assert [e.answer["question_id"] for e in train] == [e.answer["question_id"] for e in evals] == list(DATES)
    assert {e.meta["tests"] for e in train} == {"public"} and {e.meta["tests"] for e in evals} == {"private"}
    assert "contaminated by design" in task.split().describe()
    described = TaskConfig.model_fields["code_protocol"].description
    for risk in ("hard-coding", "samples", "contaminated by design"):
        assert risk in described


def test_a_split_that_leaves_a_side_empty_names_the_keys(lcb_file):
    task = get_task(TaskConfig(name="code", train_path=str(lcb_file), contest_date_split="2023-01-01"))
    with pytest.raises(UserError, match=r"contest_date_split=2023-01-01 leaves no training problems .*"
                                        r"2023-06-10 to 2025-02-22.*task.code_protocol=same-problem"):
        task.train_examples()
    assert len(task.eval_examples()) == 5  # evaluation alone does not need a training side
    late = get_task(TaskConfig(name="code", train_path=str(lcb_file), contest_date_split="2026-01-01"))
    with pytest.raises(UserError, match="leaves no evaluation problems"):
        late.eval_examples()


@pytest.mark.parametrize("sets, needle", [
    (["task.name=code", "task.code_protocol=same-problems"], "'task.code_protocol': unknown protocol 'same-problems'; known: disjoint, same-problem"),
    (["task.name=tiny-code", "task.code_protocol=same-problem"], "task.code_protocol is not read by task 'tiny-code'"),
])
def test_a_bad_protocol_key_names_it(sets, needle):
    with pytest.raises(ValueError, match=needle):
        build_config(sets=sets)


def test_split_problems_needs_an_iso_split_date():
    rows = [_record("a", "2024-01-01")]
    with pytest.raises(UserError, match="task.contest_date_split: 'August' is not an ISO date"):
        split_problems(rows, rows, "disjoint", "August")
    assert set(CODE_PROTOCOLS) == {"disjoint", "same-problem"}


# --------------------------------------------------------------------------- rewards, real grading
@pytest.mark.slow
def test_a_sample_table_program_gets_a_low_training_reward_and_is_named(lcb_file):
    """Graded in the real sandbox: under the default protocol the table passes 1 of 4 tests
    (reward 0, fraction 0.25); under the paper's protocol it earns full reward, and its private
    tests are graded (without reward) to tell the hard-coding check."""
    default = get_task(TaskConfig(name="code", train_path=str(lcb_file)), workers=1)
    paper = get_task(TaskConfig(name="code", train_path=str(lcb_file), code_protocol="same-problem",
                                code_reward="fraction"), workers=1)
    try:
        ex = default.train_examples()[0]
        table, honest = default.score([ex, ex], [SAMPLE_TABLE, HONEST])
        paper_table, paper_honest = paper.score([paper.train_examples()[0]] * 2, [SAMPLE_TABLE, HONEST])
    finally:
        default.close()
        paper.close()
    assert (table.reward, table.details["fraction"]) == (0.0, 0.25) and honest.reward == 1.0
    assert table.details["hard_coded"] and table.details["quotes_outputs"] and table.details["public_passed"]
    assert table.details["private_fraction"] == 0.0
    assert not honest.details["hard_coded"] and not honest.details["quotes_outputs"]
    assert paper_table.reward == 1.0 and paper_table.details["hard_coded"]  # the risk, measured
    assert paper_table.details["private_fraction"] == 0.0 and len(paper_table.details["tests"]) == 1
    assert paper_honest.reward == 1.0 and paper_honest.details["private_fraction"] == 1.0


@pytest.mark.slow
def test_tiny_code_rewards_a_sample_table_nothing():
    train, _ = tiny_code.split(0)
    ex = train[0]
    public = json.loads(ex.answer["public_test_cases"])
    table = "{" + ", ".join(f"{t['input'].strip()!r}: {t['output'].strip()!r}" for t in public) + "}"
    task = get_task(TaskConfig(name="tiny-code"), workers=1)
    try:
        score, = task.score([ex], [f"```python\nprint({table}[input().strip()])\n```"])
    finally:
        task.close()
    assert score.reward == 0.0 and score.details["public_passed"] and score.details["hard_coded"]


@pytest.mark.parametrize("source, outputs, quoted", [
    ('print({"3 4": "7", "1 2": "3"}[input()])', ["7\n", "3\n"], False),  # one digit tells nothing
    ('print({"3 4": "7", "10 20": "30"}[input()])', ["7\n", "30\n"], True),  # the outputs that tell
    ('print({"3 4": "17", "10 20": "130"}[input()])', ["17\n", "130\n"], True),
    ("print(int(input()) + 1)", ["17\n", "130\n"], False),
    ("x = 1170\nprint(x)", ["117\n"], False),  # a longer number is not the output
    ("print('Yes' if int(input()) else 'No')", ["Yes\n", "No\n"], False),  # common words tell nothing
    ('print("3 1\\n2 2")', ["3 1\n2 2\n"], True),  # a multi-line output with its breaks escaped
    ('print("Takahashi wins")', ["Takahashi wins\n"], True),
])
def test_quoted_outputs(source, outputs, quoted):
    assert quotes_outputs(source, outputs) is quoted


# --------------------------------------------------------------------------- the health check
def _sample(hard: bool, quoted: bool) -> SimpleNamespace:
    return SimpleNamespace(uid="u", reward=0.0, tokens=10, truncated=False, rollout=SimpleNamespace(text="x y"),
                           details={"hard_coded": hard, "quotes_outputs": quoted, "isolation": "full"})


def test_the_hard_coding_check_names_its_share_and_the_protocol_key():
    cfg = build_config(sets=["task.name=code", "task.code_protocol=same-problem",
                             "health.hard_coding.steps=1"])
    step = [_sample(True, True), _sample(True, False), _sample(False, False), _sample(False, False)]
    measured = health.measure(step, {}, max_new_tokens=10, context=None)
    assert (measured["hard_coding"], measured["hard_coded"], measured["quoted_outputs"]) == (0.5, 0.5, 0.25)
    alerts, metrics = health.HealthMonitor(cfg).observe(1, measured)
    assert metrics["health/hard_coding"] == 0.5 and metrics["health/quoted_outputs"] == 0.25
    [alert] = [a for a in alerts if a.check == "hard_coding"]
    assert "50 % of graded programs look hard-coded" in alert.line
    assert "25 % hold the public tests' expected outputs" in alert.line
    assert "task.code_protocol=disjoint" in alert.line


def test_the_check_is_quiet_for_tasks_that_grade_no_code():
    measured = health.measure([SimpleNamespace(uid="u", reward=1.0, tokens=3, truncated=False,
                                               rollout=SimpleNamespace(text="\\boxed{2}"))],
                              {}, max_new_tokens=10, context=None)
    assert measured["hard_coding"] == 0.0


# --------------------------------------------------------------------------- the run's log and metrics
def test_the_isolation_level_reaches_the_step_metrics_and_the_console():
    import io

    from rich.console import Console

    from vigor_cli.train.rollout_core import sandbox_metrics
    from vigor_cli.train.log import TrainLog

    full = [SimpleNamespace(details={"isolation": "full"})]
    rlimit = [SimpleNamespace(details={"isolation": "full, memory: rlimit only"})]
    assert sandbox_metrics(full) == {"sandbox/isolation": "full", "sandbox/memory_cgroup": 1.0}
    assert sandbox_metrics(rlimit) == {"sandbox/isolation": "full, memory: rlimit only",
                                       "sandbox/memory_cgroup": 0.0}
    assert sandbox_metrics([SimpleNamespace(details={})]) == {}
    out = Console(file=io.StringIO(), width=200)
    log = TrainLog(SimpleNamespace(), None, out, {})
    for metrics in (sandbox_metrics(full), sandbox_metrics(full), sandbox_metrics(rlimit)):
        log.isolation(metrics)
    assert out.file.getvalue().splitlines() == ["sandbox isolation: full",
                                                "sandbox isolation: full, memory: rlimit only"]
