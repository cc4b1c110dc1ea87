"""SIGINT (Ctrl-C) and SIGTERM during training (issue 17): the step finishes, a checkpoint
due is written, one line says where the run stands and how to resume, exit 130 / 143,
no child process left; `--resume` then matches an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_learner import _grandchildren, _processes
from test_trainer import quiet, strip_times, tiny_sets
from vigor_cli import cli
from vigor_cli.settings import build_config
from vigor_cli.interrupt import StopSignals, TrainingInterrupted
from vigor_cli.run.directory import RunDir
from vigor_cli.train.trainer import Trainer, train

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the handlers
def test_first_signal_in_a_step_waits_a_second_stops_at_once():
    previous = signal.getsignal(signal.SIGINT)
    with StopSignals() as signals:
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            assert signals.requested and signals.signum == signal.SIGTERM  # recorded, no raise
            with pytest.raises(TrainingInterrupted) as second:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # the handler runs at the next bytecode
        assert second.value.exit_code == 143  # the first signal names the stop
    assert signal.getsignal(signal.SIGINT) is previous  # handlers restored
    with StopSignals():
        with pytest.raises(TrainingInterrupted) as outside:  # outside a step: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert outside.value.exit_code == 130 and isinstance(outside.value, KeyboardInterrupt)


# --------------------------------------------------------------------------- in process
def _signal_during(monkeypatch, step: int, signum: int = signal.SIGINT) -> None:
    """Send ``signum`` to this process in the middle of training step ``step``."""
    original = Trainer.train_step

    def step_with_signal(self, n):
        if n == step:
            os.kill(os.getpid(), signum)
        return original(self, n)

    monkeypatch.setattr(Trainer, "train_step", step_with_signal)


@pytest.mark.parametrize("signum, at, saved", [(signal.SIGINT, 2, "step-2"), (signal.SIGTERM, 3, "step-2")])
@pytest.mark.slow
def test_signal_finishes_the_step_and_resume_matches(tmp_path, monkeypatch, trained, signum, at, saved):
    """The signalled step completes and is logged; the checkpoint due at step 2 is written
    (stopping at step 2), an evaluation due at step 3 with no checkpoint after it is
    skipped (stopping at step 3); the resumed run's metrics equal an uninterrupted run's."""
    sets = tiny_sets(tmp_path, "x", "train.steps=5", "train.save_every=2", "train.eval_every=3")
    whole = trained.get(sets)  # uninterrupted, trained once per session (conftest.py)
    _signal_during(monkeypatch, at, signum)
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as stop:
        train(build_config(sets=sets + ["train.run_name=cut"]), out=quiet())
    monkeypatch.undo()
    run = tmp_path / "cut"
    assert stop.value.exit_code == 128 + signum
    rows = RunDir(run).metrics()
    assert [r["step"] for r in rows if "reward/mean" in r] == list(range(1, at + 1))  # the step finished
    assert [r["step"] for r in rows if "eval/accuracy" in r] == [0]
    assert RunDir(run).latest_checkpoint().name == saved and not (run / "summary.json").exists()
    status = stop.value.status
    assert "\n" not in status and f"after step {at} of 5" in status and f"last checkpoint: {saved}" in status
    assert status.startswith(signal.Signals(signum).name) and status.endswith(f"vigor train --resume {run}")
    assert signal.getsignal(signal.SIGINT) is handler  # handlers restored

    train(resume=run, out=quiet())
    assert strip_times(RunDir(run).metrics()) == strip_times(RunDir(whole).metrics())


@pytest.mark.slow
def test_signal_during_the_last_step_lets_the_run_finish(tmp_path, monkeypatch):
    sets = tiny_sets(tmp_path, "last", "train.steps=2")
    _signal_during(monkeypatch, 2)
    summary = train(build_config(sets=sets), out=quiet())  # no exception: nothing left to resume
    assert summary["steps"] == 2 and (tmp_path / "last" / "summary.json").exists()
    assert RunDir(tmp_path / "last").latest_checkpoint().name == "step-2"


# --------------------------------------------------------------------------- the command
def _cli_sets(tmp_path: Path, *extra: str) -> list[str]:
    args = []
    for s in tiny_sets(tmp_path, "unused", "train.steps=6", "train.save_every=2", "train.eval_every=3", *extra):
        if not s.startswith(("train.output_dir", "train.run_name")):
            args += ["--set", s]
    return args


def _interrupt_cli(tmp_path: Path, name: str, signum: int, group: bool) -> tuple[subprocess.CompletedProcess, set[int]]:
    """`python3 -m vigor_cli train` in a subprocess, ``signum`` once step 1 is logged (to its
    whole process group, as Ctrl-C in a terminal does, or to it alone, as `kill` does); the
    result and the child processes it had then."""
    cmd = [sys.executable, "-m", "vigor_cli", "train", "--output-dir", str(tmp_path), "--run-name", name,
           *_cli_sets(tmp_path, "train.reward_workers=2")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    metrics = tmp_path / name / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and any("reward/mean" in line for line in metrics.read_text().splitlines()):
            break
        time.sleep(0.05)
    parents = _processes()
    children = {p for p, pp in parents.items() if pp == proc.pid}
    children |= {p for p, pp in parents.items() if pp in children}
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), children


def _left(pids: set[int], wait: float = 2.0) -> set[int]:
    deadline = time.time() + wait
    while time.time() < deadline and pids & set(_processes()):
        time.sleep(0.05)
    return pids & set(_processes())


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.slow
def test_the_command_exits_130_with_one_resume_line_and_closes_its_workers(tmp_path, monkeypatch, vigor):
    """`vigor train` in this process, a real SIGINT in step 2: exit 130, the one line on
    stderr, no traceback, the reward workers gone. (A real process and its process group: the
    slow tests below.)"""
    before = _grandchildren(os.getpid())
    workers: set[int] = set()
    original = Trainer.train_step

    def step_with_signal(self, n):
        if n == 2:
            workers.update(_grandchildren(os.getpid()) - before)
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, n)

    monkeypatch.setattr(Trainer, "train_step", step_with_signal)
    try:
        code, out, err = vigor("train", "--output-dir", str(tmp_path), "--run-name", "cut",
                               *_cli_sets(tmp_path, "train.reward_workers=2"))
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C went through vigor's entry point")
    run = tmp_path / "cut"
    assert code == 130, err[-2000:]
    assert err.strip().splitlines() == [err.strip()] and "Traceback" not in err
    assert err.startswith("SIGINT: training stopped after step 2 of 6") and f"run directory {run};" in err
    assert err.strip().endswith(f"resume with: vigor train --resume {run}")
    assert len(workers) == 2, "the reward workers were running during the step"
    assert not _left(workers)
    assert [r["step"] for r in RunDir(run).metrics() if "reward/mean" in r] == [1, 2]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_ctrl_c_exits_130_with_the_resume_line_and_resume_matches(tmp_path):
    result, children = _interrupt_cli(tmp_path, "cut", signal.SIGINT, group=True)
    assert result.returncode == 130, result.stderr[-2000:]
    run = tmp_path / "cut"
    lines = [line for line in result.stderr.splitlines() if "--resume" in line]
    assert lines == [lines[0]] and lines[0].startswith("SIGINT: training stopped after step ")
    assert lines[0].endswith(f"resume with: vigor train --resume {run}") and f"run directory {run};" in lines[0]
    assert "Traceback" not in result.stderr
    assert len(children) >= 2 and not _left(children)  # the reward workers and the forkserver
    stopped = [r["step"] for r in RunDir(run).metrics() if "reward/mean" in r][-1]
    assert f"after step {stopped} of 6" in lines[0]

    cli.main(["train", "--resume", str(run)])
    cli.main(["train", "--output-dir", str(tmp_path), "--run-name", "whole", *_cli_sets(tmp_path, "train.reward_workers=2")])
    resumed = strip_times(RunDir(run).metrics())
    assert resumed == strip_times(RunDir(tmp_path / "whole").metrics())
    assert [r["step"] for r in resumed if "reward/mean" in r] == [1, 2, 3, 4, 5, 6]
    assert json.loads((run / "summary.json").read_text())["steps"] == 6


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_exits_143_with_the_resume_line(tmp_path):
    result, children = _interrupt_cli(tmp_path, "term", signal.SIGTERM, group=False)
    assert result.returncode == 143, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if "--resume" in line]
    assert len(lines) == 1 and lines[0].startswith("SIGTERM: training stopped after step ")
    assert lines[0].endswith(f"vigor train --resume {tmp_path / 'term'}")
    assert not _left(children)
    assert not _grandchildren(os.getpid()) & children


@pytest.mark.slow
def test_signal_while_loading_stops_at_once(tmp_path, monkeypatch):
    """Before the first step there is no step to finish: the signal stops the load, the
    reward workers are closed, and the line says whether there is anything to resume."""
    import vigor_cli.train.trainer as trainer_module

    real = trainer_module.Learner
    closed = []

    def interrupted_load(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "Learner", interrupted_load)
    real_close = Trainer.close
    monkeypatch.setattr(Trainer, "close", lambda self: (closed.append(True), real_close(self)))
    sets = tiny_sets(tmp_path, "new", "train.steps=2")
    with pytest.raises(TrainingInterrupted) as new:
        train(build_config(sets=sets), out=quiet())
    assert new.value.exit_code == 130 and closed == [True]
    assert new.value.status == "SIGINT: training stopped while loading, before a step; nothing was written"
    assert not (tmp_path / "new" / "metrics.jsonl").exists()

    monkeypatch.setattr(trainer_module, "Learner", real)
    _signal_during(monkeypatch, 1)
    with pytest.raises(TrainingInterrupted):
        train(build_config(sets=tiny_sets(tmp_path, "old", "train.steps=3")), out=quiet())
    monkeypatch.undo()
    monkeypatch.setattr(trainer_module, "Learner", interrupted_load)
    with pytest.raises(TrainingInterrupted) as resumed:
        train(resume=tmp_path / "old", out=quiet())
    assert "while loading" in resumed.value.status
    assert resumed.value.status.endswith(f"resume with: vigor train --resume {tmp_path / 'old'}")
