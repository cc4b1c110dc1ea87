"""`vigor eval` on the bundled tiny model: the math files shipped in the package (no --data-dir),
--data-dir overriding them, fixed seed, a few problems;
results files re-scored without generating. The model runs in this process (one import of
torch and transformers for the module), and so does the command line of the flag errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli_runner import run_vigor
from vigor_cli.cli import main

from vigor_cli.package_data import MATH_EVAL_DIR


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return run_vigor(*args, env={"COLUMNS": "200"})  # in this process (tests/cli_runner.py)


def vigor(*args: str) -> None:
    """Run a vigor command in this process (raises SystemExit on a user error)."""
    main(list(args))


SAMPLING = ["--n", "3", "--temperature", "1.0", "--max-new-tokens", "12", "--seed", "7",
            "--engine", "hf"]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory) -> Path:
    """2 problems each of math500 and gsm8k from the files shipped in the package (no
    --data-dir) and of tiny-code (real sandbox), 3 samples, seed 7."""
    out = tmp_path_factory.mktemp("eval") / "results.json"
    vigor("eval", "tiny", "--benchmarks", "math500,gsm8k,tiny-code",
          "--limit", "2", *SAMPLING, "--output", str(out))
    return out


@pytest.mark.slow
def test_results_hold_every_sample(sampled):
    results = json.loads(sampled.read_text())
    assert set(results["sets"]) == {"math500", "gsm8k", "tiny-code"}
    assert results["sets"]["tiny-code"]["kind"] == "code"
    assert "test_pass_rate" in results["sets"]["tiny-code"]["metrics"]
    for name, entry in results["sets"].items():
        assert len(entry["samples"]) == 2 * 3
        assert {s["sample"] for s in entry["samples"]} == {0, 1, 2}
        m = entry["metrics"]
        assert m["problems"] == 2 and m["n"] == 3 and set(m["pass@k"]) == {"1", "2", "3"}
        for s in entry["samples"]:
            assert s["reward"] in (0.0, 1.0) and s["reason"] and s["tokens"] <= 12
    assert results["sampling"]["seed"] == 7
    assert results["data_dir"] is None
    bundled = [json.loads(line) for line in (MATH_EVAL_DIR / "gsm8k.jsonl").read_text().splitlines()[:2]]
    assert {s["uid"] for s in results["sets"]["gsm8k"]["samples"]} == {f"gsm8k/{r['idx']}" for r in bundled}


@pytest.mark.slow
def test_same_seed_same_samples(sampled, tmp_path, capsys):
    """Same seed, same problems (here read through --data-dir from a copy of the shipped
    math500 file): the same completions."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "math500.jsonl").write_text((MATH_EVAL_DIR / "math500.jsonl").read_text())
    again = tmp_path / "again.json"
    vigor("eval", "tiny", "--benchmarks", "math500", "--data-dir", str(data),
          "--limit", "2", *SAMPLING, "--output", str(again))
    assert "pass@2" in capsys.readouterr().out
    first = json.loads(sampled.read_text())["sets"]["math500"]["samples"]
    second = json.loads(again.read_text())["sets"]["math500"]["samples"]
    assert [s["completion"] for s in first] == [s["completion"] for s in second]


@pytest.mark.slow
def test_rescore_grades_stored_completions_again(sampled, tmp_path):
    results = json.loads(sampled.read_text())
    gold = json.loads((MATH_EVAL_DIR / "math500.jsonl").read_text().splitlines()[0])["answer"]
    # put a correct answer into one stored completion: only a real re-grade can notice
    first = results["sets"]["math500"]["samples"][0]
    first["completion"] = f"The answer is $\\boxed{{{gold}}}$."
    # and the reference program into a tiny-code completion, a wrong one into another
    from vigor_cli.config import TaskConfig
    from vigor_cli.tasks import get_task

    code = results["sets"]["tiny-code"]["samples"]
    task = get_task(TaskConfig(name="tiny-code"))
    solution = {ex.uid: ex.meta["solution"] for ex in task.eval_examples(None)}
    task.close()
    code[0]["completion"] = f"```python\n{solution[code[0]['uid']]}\n```"
    code[1]["completion"] = "```python\nprint('no')\n```"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(results))
    out = tmp_path / "rescored.json"
    vigor("eval", "--rescore", str(edited), "--output", str(out))
    rescored = json.loads(out.read_text())
    assert rescored["sets"]["math500"]["samples"][0]["reward"] == 1.0
    code = rescored["sets"]["tiny-code"]["samples"]
    assert (code[0]["reward"], code[0]["test_fraction"]) == (1.0, 1.0)
    assert (code[1]["reward"], code[1]["test_fraction"]) == (0.0, 0.0)
    assert rescored["sets"]["tiny-code"]["metrics"]["test_pass_rate"] == pytest.approx(
        sum(s["test_fraction"] for s in code) / len(code))
    before = json.loads(sampled.read_text())["sets"]
    for name in ("math500", "gsm8k"):
        old = [s["reward"] for s in before[name]["samples"]]
        new = [s["reward"] for s in rescored["sets"][name]["samples"]]
        if name == "gsm8k":
            assert new == old  # untouched completions grade the same
        assert rescored["sets"][name]["metrics"]["avg@n"] == pytest.approx(sum(new) / len(new))


@pytest.mark.slow
def test_data_dir_overrides_the_shipped_files(tmp_path):
    """--data-dir reads <name>.jsonl from that directory instead of the shipped copy; a
    directory without the file is one error line naming it, exit 2."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text(json.dumps(
        {"idx": 77, "question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}) + "\n")
    out = tmp_path / "own.json"
    vigor("eval", "tiny", "--benchmarks", "gsm8k", "--data-dir", str(data), "--n", "1",
          "--temperature", "0", "--max-new-tokens", "4", "--engine", "hf", "--output", str(out))
    results = json.loads(out.read_text())
    assert results["data_dir"] == str(data)
    entry = results["sets"]["gsm8k"]
    assert entry["metrics"]["problems"] == 1 and [s["uid"] for s in entry["samples"]] == ["gsm8k/77"]
    res = run_cli("eval", "tiny", "--benchmarks", "math500", "--data-dir", str(tmp_path / "none"))
    assert res.returncode == 2 and f"--data-dir': {tmp_path / 'none'}: no such file or directory" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1  # refused when parsed, before any benchmark loads


def test_bad_flags_are_one_clear_line(tmp_path):
    res = run_cli("eval", "tiny", "--benchmarks", "math501")
    assert res.returncode == 2 and "unknown benchmark 'math501'" in res.stderr
    res = run_cli("eval", "--benchmarks", "tiny-math")
    assert res.returncode == 2 and "give a MODEL" in res.stderr
    res = run_cli("eval", "--run", str(tmp_path), "--benchmarks", "tiny-math")
    assert res.returncode == 2 and "not a run directory" in res.stderr
    res = run_cli("eval", "--rescore", str(tmp_path / "none.json"))
    assert res.returncode == 2 and "not found" in res.stderr


@pytest.mark.slow
def test_lcb_contest_window_and_test_pass_rate(tmp_path):
    """lcb-v6 from a local code.jsonl (upstream record format): the contest-date window picks
    problems, and re-scoring a partly right program gives a test pass rate between 0 and 1."""
    fixture = json.loads((Path(__file__).parent / "fixtures" / "lcb" / "stdin_problem.json").read_text())
    rows = []
    for i, date in enumerate(["2024-08-03T00:00:00", "2025-03-01T00:00:00"]):
        rows.append(fixture | {"question_id": f"abc90{i}_a", "contest_date": date})
    data = tmp_path / "lcb"
    data.mkdir()
    (data / "code.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "lcb.json"
    vigor("eval", "tiny", "--benchmarks", "lcb-v6", "--data-dir", str(data),
          "--contest-date-start", "2025-01-01", "--n", "2", "--temperature", "1.0",
          "--max-new-tokens", "8",
          "--engine", "hf", "--output", str(out))
    results = json.loads(out.read_text())
    entry = results["sets"]["lcb-v6"]
    assert entry["kind"] == "code" and entry["metrics"]["problems"] == 1  # the 2025 problem only
    # evaluation grades the private tests; the first is "1 / -7" -> -7: printing -7 passes
    # it and fails the rest
    entry["samples"][0]["completion"] = "```python\nprint(-7)\n```"
    entry["samples"][1]["completion"] = (
        "```python\nimport sys\nfrom decimal import Decimal\nd = sys.stdin.read().split()\n"
        "print(sum(Decimal(x) for x in d[1:]))\n```")
    out.write_text(json.dumps(results))
    vigor("eval", "--rescore", str(out), "--data-dir", str(data), "--output", str(out))
    samples = json.loads(out.read_text())["sets"]["lcb-v6"]["samples"]
    assert samples[0]["reward"] == 0.0 and 0.0 < samples[0]["test_fraction"] < 1.0
    assert samples[1]["reward"] == 1.0 and samples[1]["test_fraction"] == 1.0
