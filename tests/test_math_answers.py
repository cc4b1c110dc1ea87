"""Benchmark answer loaders: every shape in vigor_cli/data/math-eval, and errors that name file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vigor_cli.verifiers.math_answers import (
    BENCHMARKS,
    KNOWN,
    all_boxed,
    gaokao_answer,
    last_boxed,
    load_benchmark,
    olympiad_answers,
    split_top_level,
)
from vigor_cli.errors import UserError

DATA = Path(__file__).resolve().parents[1] / "vigor_cli" / "data" / "math-eval"
ROWS = {"math500": 500, "aime24": 30, "amc23": 40, "gaokao2023en": 385, "minerva_math": 272,
        "olympiadbench": 675, "gsm8k": 1319}


def test_paper_benchmarks_listed():
    assert BENCHMARKS == ["math500", "aime24", "amc23", "gaokao2023en", "minerva_math", "olympiadbench"]
    assert set(KNOWN) == set(ROWS)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_shared_file_loads(name):
    records = load_benchmark(name, DATA)
    assert len(records) == ROWS[name]
    assert len({r.uid for r in records}) == len(records), "uids must be unique"
    for r in records:
        assert r.question.strip() and r.golds, r
        assert all(g.strip() and "$" not in g.replace("\\$", "") for g in r.golds), r  # \$ is a dollar sign


def test_default_data_dir_is_the_shared_one():
    assert len(load_benchmark("aime24")) == 30


def test_aime_leading_zeros_and_amc_floats():
    aime = {r.uid: r.golds for r in load_benchmark("aime24", DATA)}
    raw = [json.loads(line) for line in (DATA / "aime24.jsonl").open()]
    padded = [row for row in raw if row["answer"].startswith("0")]
    assert padded, "the shared file has answers like '025'"
    for row in padded:
        assert aime[f"aime24/{row['id']}"] == [str(int(row["answer"]))]
    amc = load_benchmark("amc23", DATA)
    assert amc[0].golds == ["27"]  # stored as 27.0
    assert all("." not in r.golds[0] for r in amc)  # every AMC23 answer is a whole number


def test_minerva_gold_is_last_boxed_of_solution():
    records = load_benchmark("minerva_math", DATA)
    assert records[0].golds == ["1.6"]  # "...=\boxed{1.6} \mathrm{~cm}"
    assert records[1].golds == ["4.5e33"]
    golds = {g for r in records for g in r.golds}
    assert {"-1/3", "-3/2", r"\arcsin(10/13)"} <= golds  # written "-1./3", "np.arcsin(10/13)"


def test_olympiadbench_multiple_answers_and_units():
    records = load_benchmark("olympiadbench", DATA)
    multi = [r for r in records if r.meta["is_multiple_answer"]]
    assert len(multi) == 94
    by_gold = {tuple(r.golds) for r in multi}
    assert ("(1,8,19)", "(2,7,13)", "(4,5,7)") in by_gold  # one '$...$' string, three answers
    assert ("69", "84") in by_gold  # '$69$,$84$'
    assert ("-2", "-2") in by_gold  # repeated answers are kept
    units = {r.meta["unit"] for r in records} - {None}
    assert {"km/h", "%", "minutes"} <= units
    assert all(len(r.golds) == 1 for r in records if not r.meta["is_multiple_answer"])


def test_olympiad_prose_answer_is_not_split():
    golds = olympiad_answers(["$f(x)=a x+b$, where $b$ is an arbitrary integer"], True)
    assert len(golds) == 1


def test_gsm8k_number_after_hashes_without_thousands_separator():
    records = load_benchmark("gsm8k", DATA)
    assert records[0].golds == ["18"]
    assert all("," not in r.golds[0] for r in records)
    assert any(r.golds == ["2125"] for r in records)  # "#### 2,125"


def test_gaokao_shapes():
    assert gaokao_answer(r"$\{x|-2\leq x < 1\}$") == r"\{x|-2\leq x < 1\}"
    assert gaokao_answer("$48$, $384$") == "48, 384"
    assert gaokao_answer(r"$2$ or $-2$ or $\frac{1}{2}$") == r"2, -2, \frac{1}{2}"
    assert gaokao_answer("20 $cm^{2}$") == "20"
    assert gaokao_answer("$145$solution:") == "145"
    recovered = [r for r in load_benchmark("gaokao2023en", DATA) if r.meta.get("answer_from_question")]
    assert sorted(r.golds[0] for r in recovered) == ["A", r"\frac{3}{10}"]
    assert all("answer" not in r.question[-30:].lower() for r in recovered)


def test_boxed_helpers():
    text = r"first \boxed{1} then \boxed{\frac{1}{\sqrt{2}}} and \boxed 7. unclosed \boxed{x"
    assert all_boxed(text) == ["1", r"\frac{1}{\sqrt{2}}", "7"]
    assert last_boxed(text) == "7"
    assert last_boxed("no box") is None
    assert split_top_level(r"(1,2), [3,4), \{5,6\}, 7") == ["(1,2)", "[3,4)", r"\{5,6\}", "7"]


def test_user_jsonl(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "1+1?", "answer": "2"}\n\n{"problem": "2+2?", "answer": 4.0}\n')
    records = load_benchmark(str(path))
    assert [r.golds for r in records] == [["2"], ["4"]]
    assert records[1].question == "2+2?"


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"question": "q"}\n', ":1: missing field 'answer'"),
        ('{"question": "q", "answer": "1"}\n{"answer": "1"}\n', ":2: missing field 'question'"),
        ('{"question": "q", "answer": "1"}\nnot json\n', ":2: not valid JSON"),
        ("[1, 2]\n", ":1: expected a JSON object"),
        ('{"question": "q", "answer": ""}\n', ":1: bad answer"),
        ("", "no records"),
    ],
)
def test_bad_files_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UserError) as err:
        load_benchmark(str(path))
    assert str(path) in str(err.value) and message in str(err.value)


def test_missing_benchmark_file(tmp_path):
    with pytest.raises(UserError, match="math500.jsonl: no such file"):
        load_benchmark("math500", tmp_path)
    with pytest.raises(UserError, match="unknown benchmark"):
        load_benchmark("nonsense")


def test_missing_answer_field_in_known_benchmark(tmp_path):
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "q", "answer": "no hashes"}\n')
    with pytest.raises(UserError, match=r"gsm8k.jsonl:1: bad answer \(no '####' in answer\)"):
        load_benchmark("gsm8k", tmp_path)
    (tmp_path / "olympiadbench.jsonl").write_text('{"question": "q"}\n')
    with pytest.raises(UserError, match="olympiadbench.jsonl:1: missing field 'final_answer'"):
        load_benchmark("olympiadbench", tmp_path)
