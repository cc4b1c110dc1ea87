"""inspect-allocation, report and eval on REAL short training runs of the bundled tiny model.

Two runs (VIGOR and GRPO, 2 steps each, tiny settings) are trained once for the
module and shared by every test here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two training runs: about a minute on 2 busy CPU cores

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY_RUN = [
    "--steps", "2", "--prompts-per-step", "4", "--seed", "0", "--engine", "hf",
    "--set", "train.eval_every=1", "--set", "train.eval_limit=6",
    "--set", "sampling.max_new_tokens=12", "--set", "allocation.group_size=4",
    "--set", "allocation.rollouts_per_prompt=4",  # vigor's budget: 4 x 4, as grpo's
    "--set", "train.save_every=0", "--set", "train.log_completions_every=0",
    "--set", "train.reward_workers=1",
]


def run_cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = os.environ | {"COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "vigor_cli", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    paths = {}
    # the GRPO run trains a LoRA adapter, so `vigor eval --adapter` has one to load
    for strategy, extra in (("vigor", []), ("grpo", ["--set", "model.lora.enabled=true"])):
        res = run_cli("train", "--strategy", strategy, "--output-dir", str(out),
                      "--run-name", strategy, *TINY_RUN, *extra)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        paths[strategy] = out / strategy
    return paths


def test_inspect_allocation_on_a_real_run(runs):
    res = run_cli("inspect-allocation", str(runs["vigor"]), "--last", "2", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [s["summary"]["step"] for s in data["steps"]] == [1, 2]
    metrics = [json.loads(x) for x in (runs["vigor"] / "metrics.jsonl").read_text().splitlines()]
    train_lines = {m["step"]: m for m in metrics if "rollouts/step" in m}
    for s in data["steps"]:
        summary = s["summary"]
        # the allocation record and the metrics line count the same rollouts
        assert summary["rollouts"] == train_lines[summary["step"]]["rollouts/step"] == 16
        assert summary["budget"] == 16 and summary["prompts"] == 4
        assert all(p["text"] for p in s["prompts"])  # the trainer adds each prompt's text
        assert summary["zero_var_frac"] == pytest.approx(
            train_lines[summary["step"]]["groups/zero_var_frac"])
    res = run_cli("inspect-allocation", str(runs["vigor"]))
    assert res.returncode == 0 and "step 2 (vigor)" in res.stdout and "overview: 2 steps" in res.stdout


def test_inspect_on_a_run_still_writing(runs, tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    lines = (runs["vigor"] / "allocation.jsonl").read_text().splitlines()
    (live / "allocation.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    res = run_cli("inspect-allocation", str(live))
    assert res.returncode == 0, res.stderr
    assert "partial last line 2" in res.stderr and "step 1 (vigor)" in res.stdout


def test_report_on_real_runs(runs, tmp_path):
    out = tmp_path / "report"
    res = run_cli("report", str(runs["grpo"]), str(runs["vigor"]), "--out", str(out))
    assert res.returncode == 0, res.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["baseline"] == "grpo"
    for row in rep["runs"]:
        # the default target is the lowest final accuracy, so every run reaches it
        assert row["rollouts_to_target"] is not None
        assert 0 <= row["rollouts_to_target"] <= 32  # 2 steps x 16 rollouts
    for name in ("accuracy_vs_rollouts.png", "accuracy_vs_tokens.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000


def final_eval_completions(run: Path) -> dict[str, str]:
    final = json.loads((run / "eval" / "step-2.json").read_text())
    return {s["uid"]: s["completion"] for st in final["sets"].values() for s in st["samples"]}


def test_eval_an_adapter(runs, tmp_path):
    out = tmp_path / "eval.json"
    res = run_cli("eval", "tiny", "--adapter", str(runs["grpo"] / "checkpoints" / "step-2"),
                  "--benchmarks", "tiny-math", "--limit", "6", "--max-new-tokens", "12",
                  "--engine", "hf", "--output", str(out))
    assert res.returncode == 0, res.stderr
    samples = json.loads(out.read_text())["sets"]["tiny-math"]["samples"]
    assert {s["uid"]: s["completion"] for s in samples} == final_eval_completions(runs["grpo"])


def test_eval_a_run_checkpoint(runs, tmp_path):
    out = tmp_path / "eval.json"
    res = run_cli("eval", "--run", str(runs["vigor"]), "--benchmarks", "tiny-math",
                  "--limit", "6", "--max-new-tokens", "12", "--engine", "hf", "--output", str(out))
    assert res.returncode == 0, res.stderr
    results = json.loads(out.read_text())
    assert results["model"]["checkpoint"] == "step-2"
    assert results["sets"]["tiny-math"]["metrics"]["problems"] == 6
    # greedy, same checkpoint, same problems: the trainer's final evaluation saw the same
    mine = {s["uid"]: s["completion"] for s in results["sets"]["tiny-math"]["samples"]}
    assert mine == final_eval_completions(runs["vigor"])
    # a named checkpoint that does not exist is one clear line
    res = run_cli("eval", "--run", str(runs["vigor"]), "--checkpoint", "step-9")
    assert res.returncode == 2 and "have: step-2" in res.stderr
