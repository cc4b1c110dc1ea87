"""The README's worked example ('Train on your own task') as a test, and a failing reward
function stopping a real run: both train the bundled tiny model, so both are slow."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "letter-count"


def readme_command() -> list[str]:
    """The `vigor train` command of the README's section, as a user would paste it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Train on your own task"):]
    block = section[section.index("```bash") + len("```bash"):]
    block = block[: block.index("```")]
    command = " ".join(line.rstrip("\\").strip() for line in block.strip().splitlines()
                       if line.strip() and not line.strip().startswith("#"))
    return shlex.split(command)


@pytest.mark.slow
def test_the_worked_example_learns(tmp_path):
    argv = readme_command()
    assert argv[:2] == ["vigor", "train"] and "--data" in argv and "--reward" in argv
    start = time.time()
    done = subprocess.run([sys.executable, "-m", "vigor_cli", *argv[1:], "--output-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)  # a hang, not a speed bound
    minutes = (time.time() - start) / 60
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    gain = summary["final_accuracy"] - summary["start_accuracy"]
    assert gain >= 0.10, summary  # held-out reward up by at least 10 points
    last = json.loads((run / "eval" / f"step-{summary['steps']}.json").read_text())["sets"]["custom"]
    assert last["metrics"]["avg@n"] == pytest.approx(summary["final_accuracy"])
    assert "1" in last["metrics"]["pass@k"] and last["examples"] == 128  # the held-out file, all of it
    report = subprocess.run([sys.executable, "-m", "vigor_cli", "report", str(run), "--out", str(tmp_path / "rep")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    assert list((tmp_path / "rep").glob("*.png"))
    print(f"worked example: {summary['start_accuracy']:.3f} -> {summary['final_accuracy']:.3f} in {minutes:.1f} min")


@pytest.mark.slow
def test_a_reward_that_raises_in_a_training_step_stops_the_run_in_one_line(tmp_path, vigor):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{w}=", "split": "train"}) + "\n" for w in ("ab", "abc", "x", "yz")))
    held = tmp_path / "eval.jsonl"
    held.write_text(json.dumps({"prompt": "ab=", "split": "eval"}) + "\n")
    (tmp_path / "r.py").write_text(
        "def score(prompts, completions, split, **kwargs):\n"
        "    if split[0] == 'train':\n"
        "        raise ValueError('no score for training rows')\n"
        "    return [0.5] * len(completions)\n")
    code, out, err = vigor("train", "--data", str(data), "--eval-data", str(held), "--reward", f"{tmp_path / 'r.py'}:score",
                           "--prompts-per-step", "2", "--steps", "1", "--output-dir", str(tmp_path / "runs"))
    assert code == 2 and "Traceback" not in err
    [line] = err.strip().splitlines()
    assert re.search(r"reward function .*r.py:score raised ValueError: no score for training rows \(r.py, line 3\)", line)
    if importlib.util.find_spec("vigor_cli.train.rollout_core") is not None:  # the trainer that prefixes the step
        assert "step 1: reward function" in line, line
    assert "eval step 0: reward 0.500" in out  # the evaluation scored it; the step did not


def test_the_readme_shows_the_example_reward_as_it_is():
    """The reward function printed in the README and in docs/own-task.md is the one the example runs."""
    for page in (ROOT / "README.md", ROOT / "docs" / "own-task.md"):
        text = page.read_text()
        section = text[text.index("## Train on your own task"):]
        shown = section[section.index("```python") + len("```python"):]
        shown = shown[: shown.index("```")].strip()
        assert shown in (EXAMPLE / "reward.py").read_text(), f"{page.name} and examples/letter-count/reward.py differ"
    assert readme_command()[:2] == ["vigor", "train"]


@pytest.mark.slow
def test_the_worked_example_through_the_trl_path(tmp_path):
    """The same options reach TRL's GRPOTrainer (vigor_cli.integrations.trl): two steps."""
    pytest.importorskip("trl")
    argv = readme_command()[2:]
    argv = [a for a in argv if a not in ("--steps", "50")]
    done = subprocess.run([sys.executable, "-m", "vigor_cli.integrations.trl", "--cpu", "--output-dir",
                           str(tmp_path / "trl"), *argv, "--set", "train.steps=2", "--set", "train.prompts_per_step=8",
                           "--set", "train.eval_every=1"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["held_out"]) == {"0", "1", "2"} and result["rollouts"] > 0
    assert "rewards/custom_verifier/mean" in done.stdout + done.stderr
    record = json.loads((tmp_path / "trl" / "provenance.json").read_text())  # what made the run (issue 33)
    assert record["trainer"] == "trl" and record["libraries"]["trl"] and "trl" in record["seeds"]["rules"]
    assert {f["key"] for f in record["files"]} >= {"task.data", "task.eval_data", "task.rewards"}


def journey() -> tuple[list[list[str]], str]:
    """The own-task journey (docs/own-task.md): its commands (`vigor ...`, as pasted) and its Python block."""
    text = (ROOT / "docs" / "own-task.md").read_text()
    section = text[text.index("## Your own task, end to end"):]
    block = section[section.index("```bash") + len("```bash"):]
    block = block[: block.index("```")]
    joined = block.replace("\\\n", " ")
    commands = [shlex.split(line) for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]
    python = section[section.index("```python") + len("```python"):]
    return commands, python[: python.index("```")]


def test_the_journey_page_holds_the_six_commands_and_the_loading_block():
    """The journey's commands as the slow test below runs them, read without running them."""
    commands, python = journey()
    assert [c[:2] for c in commands] == [["vigor", "train"], ["vigor", "eval"], ["vigor", "report"],
                                         ["vigor", "report"], ["vigor", "export"], ["vigor", "eval"]]
    assert commands[0][2:] [:len(readme_command()) - 2] == readme_command()[2:]  # the README's command, named
    assert "AutoModelForCausalLM.from_pretrained(\"letters-model\")" in python


@pytest.mark.slow
def test_the_documented_journey_train_eval_report_export_load(tmp_path):
    """Every command of docs/own-task.md's "Your own task, end to end", in order, in a folder holding the
    example (5 steps instead of 50: what is checked is that each command works and agrees):
    eval --run writes the run's last evaluation again, the export evaluated on the set gives the
    same numbers, and the Python block loads it in transformers with the run's rendering."""
    import shutil

    shutil.copytree(EXAMPLE, tmp_path / "examples" / "letter-count")
    commands, python = journey()
    assert [c[:2] for c in commands] == [["vigor", "train"], ["vigor", "eval"], ["vigor", "report"],
                                         ["vigor", "report"], ["vigor", "export"], ["vigor", "eval"]]
    outputs = []
    for argv in commands:
        argv = ["5" if a == "50" and argv[1] == "train" else a for a in argv]
        if argv[1] == "eval" and "--run" not in argv:
            argv += ["--output", "export-eval.json"]
        done = subprocess.run([sys.executable, "-m", "vigor_cli", *argv[1:]], cwd=tmp_path, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, (argv, done.stderr[-3000:])
        outputs.append(done.stdout + done.stderr)
    last = json.loads((tmp_path / "runs" / "letters" / "eval" / "step-5.json").read_text())
    assert json.loads((tmp_path / "letters-eval.json").read_text())["sets"] == last["sets"]
    exported = json.loads((tmp_path / "export-eval.json").read_text())["sets"]["custom"]
    assert exported["metrics"] == last["sets"]["custom"]["metrics"]
    (tmp_path / "load.py").write_text(python)
    done = subprocess.run([sys.executable, "load.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"\\boxed\{\d+\}", done.stdout), done.stdout
