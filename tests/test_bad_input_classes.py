"""Bad input, the rest (issue 24 part 5): each class of unfit file or value gets one line,
exit 2, no traceback, no hang, nothing on disk changed, and the work is not started.

Classes: nesting past the bounded reader's limit (YAML and JSON); a file that is not a
regular file (a FIFO, a device) given where a file is read; a record too large to be one; an
output folder nothing can be written in; values silently turned into something else before
(duplicate YAML keys, a null, NaN or object in data, run-log lines without a step or with
values out of range, an empty output path, a flag the command would not read). Commands run
in this process (vigor_cli.cli.main, what the `vigor` script calls), under a timeout, so a
command that blocks on a FIFO fails the test instead of stalling the suite.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from test_rundir import _small_tmpfs
from vigor_cli.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
LCB = ROOT / "tests" / "fixtures" / "lcb" / "stdin_problem.json"
DEEP = 5000  # past Python's recursion limit: a traceback before the bounded reader


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if a model starts loading: the bad input must be refused before."""
    from transformers import AutoModelForCausalLM

    def refuse(*a, **k):
        raise AssertionError("a model loaded before the bad input was refused")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)


def one_line(vigor, *argv: str) -> str:
    code, out, err = vigor(*argv)
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def train_math(path: Path, out: Path) -> list[str]:
    """`vigor train` on the math task reading ``path`` as its training data."""
    return ["train", "--model", "tiny", "--task", "math", "--steps", "1", "--output-dir", str(out),
            "--run-name", "r", "--set", f"task.train_path={path}", "--set", "task.eval_sets=[math500]"]


# --------------------------------------------------------------------------- nesting
@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["yaml-flow", "yaml-block"])
def test_deeply_nested_yaml_config_is_one_line(vigor, tmp_path, no_model, form):
    p = tmp_path / "deep.yaml"
    if form == "yaml-flow":
        p.write_text("train:\n  x: " + "[" * DEEP + "]" * DEEP + "\n")
    else:
        p.write_text("".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "v: 1\n")
    before = snapshot(tmp_path)
    line = one_line(vigor, "train", "--config", str(p), "--dry-run")
    assert str(p) in line and "nested deeper than" in line
    assert snapshot(tmp_path) == before


@pytest.mark.timeout(60)
def test_deeply_nested_json_is_one_line_for_every_reader(vigor, tmp_path, no_model):
    deep = "[" * DEEP + "]" * DEEP
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"gold": "1", "pred": "1"}\n{"gold": ' + deep + ', "pred": "1"}\n')
    assert f"{cases}:2: nested deeper than" in one_line(vigor, "verify", "math", "--input", str(cases))
    shallow_but_deep = "[" * 150 + "]" * 150  # parses, but past the reader's own limit
    cases.write_text('{"gold": ' + shallow_but_deep + ', "pred": "1"}\n')
    assert f"{cases}:1: nested deeper than" in one_line(vigor, "verify", "math", "--input", str(cases))
    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2", "meta": ' + deep + "}\n")
    before = snapshot(tmp_path)
    line = one_line(vigor, *train_math(data, tmp_path / "runs"))
    assert f"{data}:1: nested deeper than" in line
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()
    results = tmp_path / "results.json"
    results.write_text('{"sets": ' + deep + "}")
    assert str(results) in one_line(vigor, "eval", "--rescore", str(results))


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    from vigor_cli.settings import build_config
    from vigor_cli.config import ConfigError

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(10))}]" for i in range(1, 9)]
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="aliases expand to over"):
        build_config(p)


# --------------------------------------------------------------------------- not a regular file
@pytest.fixture
def fifo(tmp_path) -> Path:
    p = tmp_path / "pipe.jsonl"
    os.mkfifo(p)
    return p


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", [
    ["verify", "math", "--input", "{fifo}"],
    ["verify", "code", "--problem", "{lcb}", "--solution", "{fifo}"],
    ["verify", "code", "--problem", "{fifo}", "--solution", "{lcb}"],
    ["train", "--config", "{fifo}", "--dry-run"],
    ["probe", "--config", "{fifo}"],
    ["simulate", "--config", "{fifo}", "--steps", "1"],
    ["simulate", "--pass-rates", "file:{fifo}", "--steps", "1"],
    ["eval", "--rescore", "{fifo}"],
    ["train", "--model", "tiny", "--task", "math", "--steps", "1", "--output-dir", "{tmp}/runs",
     "--set", "task.train_path={fifo}", "--set", "task.eval_sets=[math500]"],
], ids=["verify-math-input", "verify-code-solution", "verify-code-problem", "train-config",
        "probe-config", "simulate-config", "simulate-pass-rates", "eval-rescore", "task-train-path"])
def test_a_fifo_given_as_a_file_is_refused_not_waited_on(vigor, tmp_path, fifo, no_model, argv):
    argv = [a.format(fifo=fifo, lcb=LCB, tmp=tmp_path) for a in argv]
    before = snapshot(tmp_path)
    line = one_line(vigor, *argv)
    assert str(fifo) in line and "not a regular file (a FIFO" in line, line
    assert snapshot(tmp_path) == before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_as_config_is_not_called_missing(vigor, device, no_model):
    line = one_line(vigor, "train", "--config", device, "--dry-run")
    assert f"--config {device}: not a regular file (a character device)" in line
    assert "no such file" not in line


@pytest.mark.timeout(60)
def test_a_fifo_in_a_data_dir_is_refused(vigor, tmp_path, no_model):
    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / "gsm8k.jsonl")
    line = one_line(vigor, "eval", "tiny", "--benchmarks", "gsm8k", "--data-dir", str(data), "--limit", "1")
    assert "gsm8k.jsonl: not a regular file (a FIFO" in line


# --------------------------------------------------------------------------- too large to be a record
@pytest.mark.timeout(60)
def test_a_huge_record_is_refused_before_it_is_tokenised(vigor, tmp_path, no_model):
    """8 MB in one question (the fault round used 100 MB: minutes of tokenising)."""
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"problem": "1+" * (4 << 20) + "1?", "answer": "2"}) + "\n")
    line = one_line(vigor, *train_math(data, tmp_path / "runs"))
    assert f"{data} record 1: field 'problem' is 8,388,610 characters long" in line
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"gold": "2", "pred": "x" * (2 << 20)}) + "\n")
    assert f"{cases}:1: field 'pred' is" in one_line(vigor, "verify", "math", "--input", str(cases))


# --------------------------------------------------------------------------- output folders
@pytest.mark.timeout(120)
def test_eval_output_in_a_read_only_folder_fails_before_any_work(vigor, tmp_path, no_model):
    ro = tmp_path / "ro"
    if not _small_tmpfs(ro, "1m"):
        pytest.skip("needs root to mount a read-only tmpfs")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        line = one_line(vigor, "eval", "tiny", "--limit", "1", "--max-new-tokens", "4",
                        "--output", str(ro / "results.json"))
        assert "--output" in line and str(ro / "results.json") in line and "read-only" in line
        assert ".tmp" not in line
        line = one_line(vigor, "make-tiny", "--out", str(ro / "m"), "--no-measure")
        assert "--out" in line and "read-only" in line
    finally:
        subprocess.run(["umount", str(ro)])


def test_a_failed_results_write_names_the_path_asked_for(tmp_path):
    """A write that fails after the work (a folder made read-only meanwhile): the path the
    user gave, not the temporary file beside it."""
    from vigor_cli.report.eval_results import write_results

    ro = tmp_path / "ro"
    if not _small_tmpfs(ro, "1m"):
        pytest.skip("needs root to mount a read-only tmpfs")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        with pytest.raises(UserError) as e:
            write_results({"sets": {}}, ro / "out.json")
        assert str(e.value).startswith(f"{ro / 'out.json'}: ") and ".tmp" not in str(e.value)
    finally:
        subprocess.run(["umount", str(ro)])


@pytest.mark.parametrize("argv", [
    ["make-tiny", "--out", "", "--no-measure"],
    ["eval", "tiny", "--output", "", "--limit", "1"],
    ["report", "{run}", "--out", ""],
])
def test_an_empty_output_path_is_refused(vigor, tmp_path, monkeypatch, no_model, argv):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0, "eval/accuracy": 0.5}\n')
    monkeypatch.chdir(tmp_path)  # where '' would have written
    before = snapshot(tmp_path)
    line = one_line(vigor, *[a.format(run=run) for a in argv])
    assert "an empty path" in line
    assert snapshot(tmp_path) == before


def test_make_tiny_into_a_folder_with_files_is_refused(vigor, tmp_path, no_model):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file\n")
    before = snapshot(tmp_path)
    line = one_line(vigor, "make-tiny", "--out", str(out), "--no-measure")
    assert f"--out {out}: the folder is not empty" in line
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- silently accepted before
@pytest.mark.timeout(60)
def test_a_duplicate_yaml_key_is_refused_naming_both_lines(vigor, tmp_path, no_model):
    p = tmp_path / "dup.yaml"
    p.write_text("train:\n  steps: 3\nmodel:\n  name_or_path: tiny\ntrain:\n  seed: 2\n")
    line = one_line(vigor, "train", "--config", str(p), "--dry-run")
    assert f"{p}:5: duplicate key 'train' (first on line 1)" in line
    p.write_text("train:\n  steps: 3\n  steps: 4\n")
    assert f"{p}:3: duplicate key 'steps' (first on line 2)" in one_line(vigor, "train", "--config", str(p), "--dry-run")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("row, field, kind", [
    ('{"problem": "1+1?", "answer": null}', "answer", "null"),
    ('{"problem": "1+1?", "answer": NaN}', "answer", "NaN"),
    ('{"problem": "1+1?", "answer": Infinity}', "answer", "infinite"),
    ('{"problem": {"text": "1+1?"}, "answer": "2"}', "problem", "an object"),
    ('{"problem": "1+1?", "answer": {"value": 2}}', "answer", "an object"),
    ('{"question": ["1+1?"], "answer": "2"}', "question", "a list"),
    ('{"problem": "1+1?", "answer": true}', "answer", "true/false"),
])
def test_training_records_of_the_wrong_kind_are_refused(vigor, tmp_path, no_model, row, field, kind):
    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "2+2?", "answer": "4"}\n' + row + "\n")
    before = snapshot(tmp_path)
    line = one_line(vigor, *train_math(data, tmp_path / "runs"))
    assert f"{data} record 2: field '{field}' is {kind}" in line
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, kind", [("null", "null"), ("NaN", "NaN"), ('{"x": 1}', "an object")])
def test_a_benchmark_gold_of_the_wrong_kind_is_refused(vigor, tmp_path, no_model, answer, kind):
    data = tmp_path / "data"
    data.mkdir()
    (data / "math500.jsonl").write_text('{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?", "answer": '
                                        + answer + "}\n")
    line = one_line(vigor, "eval", "tiny", "--benchmarks", "math500", "--data-dir", str(data), "--limit", "1")
    assert f"math500.jsonl:2: field 'answer' is {kind}" in line


@pytest.mark.timeout(60)
def test_a_verify_case_with_a_null_or_nan_gold_is_refused(vigor, tmp_path):
    cases = tmp_path / "cases.jsonl"
    for gold, kind in (("null", "null"), ("NaN", "NaN"), ('["1", NaN]', "NaN")):
        cases.write_text('{"gold": ' + gold + ', "pred": "1"}\n')
        assert f"{cases}:1: field 'gold' is {kind}" in one_line(vigor, "verify", "math", "--input", str(cases))


def report_run(tmp_path: Path, *lines: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("train:\n  seed: 0\n")
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return run


@pytest.mark.parametrize("bad, needle", [
    ('{"step": 2, "eval/accuracy": "0.5", "rollouts/cumulative": 8, "tokens/cumulative": 80}',
     ":3: 'eval/accuracy' is '0.5'; expected a finite number"),
    ('{"eval/accuracy": 0.5, "rollouts/cumulative": 8, "tokens/cumulative": 80}', ":3: no 'step'"),
    ('{"step": "2", "eval/accuracy": 0.5, "rollouts/cumulative": 8, "tokens/cumulative": 80}',
     ":3: 'step' is '2' (text); expected an integer >= 0"),
    ('{"step": 2, "eval/accuracy": NaN, "rollouts/cumulative": 8, "tokens/cumulative": 80}',
     ":3: 'eval/accuracy' is nan"),
    ('{"step": 2, "eval/accuracy": 0.5, "rollouts/cumulative": -8, "tokens/cumulative": 80}',
     ":3: 'rollouts/cumulative' is -8; expected a number >= 0"),
    ('{"step": 2, "eval/pass_rate": 1.5, "rollouts/cumulative": 8, "tokens/cumulative": 80}',
     ":3: 'eval/pass_rate' is 1.5; expected a number in [0, 1]"),  # eval/accuracy is a mean reward: 1.5 is one
    ('{"step": -2, "eval/accuracy": 0.5, "rollouts/cumulative": 8, "tokens/cumulative": 80}',
     ":3: 'step' is -2"),
    ('{"step": 2, "eval/accuracy": 0.5, "rollouts/cumulative": 8, "tokens/cumulative": {"n": 80}}',
     ":3: 'tokens/cumulative' is an object"),
], ids=["text-accuracy", "no-step", "text-step", "nan", "negative", "over-one", "negative-step", "object"])
def test_report_refuses_a_metrics_line_out_of_the_format(vigor, tmp_path, bad, needle):
    run = report_run(tmp_path, '{"step": 0, "eval/accuracy": 0.1}',
                     '{"step": 2, "reward/mean": 0.5, "rollouts/cumulative": 8, "tokens/cumulative": 80}', bad)
    before = snapshot(tmp_path)
    line = one_line(vigor, "report", str(run), "--out", str(tmp_path / "rep"))
    assert f"{run / 'metrics.jsonl'}{needle}" in line, line
    assert snapshot(tmp_path) == before


def test_report_refuses_a_chosen_metric_that_is_not_a_number(vigor, tmp_path):
    run = report_run(tmp_path, '{"step": 0, "eval/accuracy": 0.1, "my/score": 0.2}',
                     '{"step": 2, "eval/accuracy": 0.3, "my/score": "high", "rollouts/cumulative": 8, '
                     '"tokens/cumulative": 80}')
    line = one_line(vigor, "report", str(run), "--out", str(tmp_path / "rep"), "--metric", "my/score")
    assert f"{run / 'metrics.jsonl'}:2: 'my/score' is 'high'" in line


def test_a_losses_nan_is_a_fact_not_damage(tmp_path):
    """A diverged update logs NaN losses; readers keep the line (report reads other keys)."""
    from vigor_cli.run.directory import RunDir

    run = report_run(tmp_path, '{"step": 1, "losses/loss": NaN, "losses/kl": -0.1, "engine/weight_check": null}')
    assert RunDir(run).metrics()[0]["step"] == 1


@pytest.mark.timeout(60)
def test_eval_data_dir_the_benchmarks_do_not_read_is_refused(vigor, tmp_path, no_model):
    f = tmp_path / "data.jsonl"
    f.write_text('{"problem": "1+1?", "answer": "2"}\n')
    line = one_line(vigor, "eval", "tiny", "--benchmarks", "tiny-math", "--data-dir", str(f), "--limit", "1")
    assert f"--benchmarks tiny-math: --data-dir {f}: tiny-math ships its own problems" in line
    line = one_line(vigor, "eval", "tiny", "--benchmarks", "tiny-math", "--data-dir", str(tmp_path / "no"))
    assert "--data-dir" in line and "no such file or directory" in line


def test_training_data_settings_a_tiny_task_never_reads_are_refused(tmp_path):
    from vigor_cli.settings import build_config
    from vigor_cli.train.preflight import check_static

    from vigor_cli.config import RunConfig, TaskConfig

    with pytest.raises(UserError, match="task.train_path is not read by task 'tiny-math'"):
        build_config(sets=["task.name=tiny-math", f"task.train_path={tmp_path}/x.jsonl"])
    # a config built without the registry's rules (an old run's file) is still refused before loading
    cfg = RunConfig(task=TaskConfig(name="tiny-math", train_path=f"{tmp_path}/x.jsonl"))
    with pytest.raises(UserError, match="task.train_path=.*tiny-math ships its own problems"):
        check_static(cfg)


def test_record_checks_are_one_function_loaders_can_call():
    """vigor_cli/user/records.py: what a data loader calls per record (the issue-21 loader too)."""
    from vigor_cli.user.records import MAX_TEXT_CHARS, check_record

    ok = {"problem": "1+1?", "answer": 2, "golds": ["1", 2.5]}
    assert check_record(ok, "f.jsonl:1", text=("problem",), answers=("answer", "golds")) is ok
    for row, message in [
        ({"problem": None}, "f.jsonl:1: field 'problem' is null; expected text"),
        ({"problem": "x" * (MAX_TEXT_CHARS + 1)}, "characters long"),
        ({"problem": "q", "answer": []}, "field 'answer' is an empty list"),
        ({"problem": "q", "answer": [float("nan")]}, "field 'answer' is NaN"),
        ([1, 2], "f.jsonl:1: a list, expected a record"),
        ({}, "f.jsonl:1: missing field 'problem'"),
    ]:
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
            check_record(row, "f.jsonl:1", text=("problem",), answers=("answer",), required=("problem",))
