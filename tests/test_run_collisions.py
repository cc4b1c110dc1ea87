"""Runs never share a directory: real `vigor train` processes on the tiny model, started at
once, get a directory each; a second `--resume` of a live run is refused (exit 2).

All three are slow tests (trainings, new processes); tests/test_rundir.py keeps the fast
checks of the claim's suffixes and of the lock refusing a second holder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from test_trainer import tiny_sets

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COLUMNS": "1000"}


def train_cmd(out: Path, *extra: str, steps: int = 2) -> list[str]:
    args = [sys.executable, "-m", "vigor_cli", "train", "--output-dir", str(out)]
    for s in tiny_sets(out, "unused", f"train.steps={steps}", "train.log_completions_every=0"):
        if not s.startswith(("train.output_dir", "train.run_name")):
            args += ["--set", s]
    return args + list(extra)


def steps_logged(run: Path) -> list[int]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "reward/mean" in r]


@pytest.mark.slow
@pytest.mark.parametrize("name", [["--run-name", "same"], []], ids=["same-run-name", "default-name"])
def test_two_trainings_started_at_once_get_two_directories(tmp_path, name):
    procs = [subprocess.Popen(train_cmd(tmp_path, *name), cwd=ROOT, env=ENV, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(runs) == 2, runs
    for run in runs:
        assert steps_logged(run) == [1, 2]  # each step logged once, by one process
        summary = json.loads((run / "summary.json").read_text())
        assert summary["run_dir"] == str(run) and summary["steps"] == 2
    announced = {line[len("run directory: "):].strip() for out, _ in outs
                 for line in out.splitlines() if line.startswith("run directory: ")}
    assert announced == {str(r) for r in runs}


@pytest.mark.slow
def test_a_resume_of_a_run_another_process_holds_is_refused(tmp_path, trained, vigor):
    """A finished run whose lock a live process holds (as a training does): `vigor train
    --resume` is one line naming that process, exit 2, and changes nothing; once the holder
    is gone the run resumes."""
    from test_checkpoints import snapshot
    from vigor_cli.run.directory import RunDir

    sets = tiny_sets(tmp_path, "unused", "train.steps=2", "train.save_every=2", "train.eval_every=2")  # test_checkpoints' run
    run = trained.copy(sets, tmp_path / "live")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from vigor_cli.run.directory import RunDir
        RunDir.open_existing({str(run)!r}).acquire()
        print("held", flush=True)
        time.sleep(120)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(RunDir(run))
        code, out, err = vigor("train", "--resume", str(run), "--steps", "3")
        assert code == 2
        assert len(err.strip().splitlines()) == 1 and f"in use by another process (pid {holder.pid})" in err, err
        assert snapshot(RunDir(run)) == before
    finally:
        holder.kill()
        holder.wait()
    code, out, err = vigor("train", "--resume", str(run), "--steps", "3")  # the lock died with its process
    assert code == 0, err
    assert steps_logged(run) == [1, 2, 3]


@pytest.mark.slow
def test_a_second_resume_of_a_live_run_is_refused(tmp_path):
    first = subprocess.Popen(train_cmd(tmp_path, "--run-name", "live", steps=200), cwd=ROOT, env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp_path / "live"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run / "config.yaml").is_file():
            time.sleep(0.1)
        assert first.poll() is None and (run / "config.yaml").is_file()
        second = subprocess.run([sys.executable, "-m", "vigor_cli", "train", "--resume", str(run)],
                                cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
        assert first.poll() is None, "the first run must still be training"
        assert second.returncode == 2
        err = second.stderr.strip()
        assert len(err.splitlines()) == 1 and f"in use by another process (pid {first.pid})" in err
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the lock dies with its process: the killed run can be resumed
    from vigor_cli.run.directory import RunDir

    RunDir.open_existing(run).acquire().release()
