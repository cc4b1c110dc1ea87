"""A run killed while it starts (issue 24 part 4): its config is written before anything slow,
and a directory a run left before its first step is resumed or reused, never skipped.

The fast tests build the directory exactly as a killed process leaves it (its ``run.lock``,
no process holding it) or hold the lock from a live child process; the slow one kills a
real `vigor train` with SIGKILL while it loads.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from test_rundir import cfg_for
from test_trainer import quiet, tiny_sets
from vigor_cli.settings import build_config
from vigor_cli.run.directory import RunDir

ROOT = Path(__file__).resolve().parents[1]


def killed_while_loading(path: Path, with_config: bool) -> None:
    """What a run killed between its claim and its first step leaves."""
    path.mkdir(parents=True)
    (path / "run.lock").write_text("4242\n")  # the dead process's pid; no flock is held
    if with_config:
        (path / "config.yaml").write_text("train:\n  seed: 0\n")
        (path / "checkpoints").mkdir()
        (path / "eval").mkdir()


@pytest.mark.parametrize("with_config", [False, True], ids=["lock-only", "config-written"])
def test_a_run_killed_before_its_first_step_is_reused_by_the_next(tmp_path, with_config):
    killed_while_loading(tmp_path / "r", with_config)
    notes = []
    run = RunDir.planned(cfg_for(tmp_path), announce=notes.append)
    assert run.path == tmp_path / "r", "pushed to a -2 suffix by a run that never started"
    assert "stopped before its first step; this run reuses it" in notes[0]
    assert (run.path / "run.lock").read_text().strip() == str(os.getpid())
    run.make(cfg_for(tmp_path))
    assert "run_name: r" in (run.path / "config.yaml").read_text()


def test_a_started_run_or_a_live_claim_is_never_reused(tmp_path):
    started = tmp_path / "r"
    killed_while_loading(started, with_config=True)
    (started / "metrics.jsonl").write_text('{"step": 0, "eval/accuracy": 0.5}\n')
    assert RunDir.planned(cfg_for(tmp_path)).path.name == "r-2"
    live = tmp_path / "live"
    killed_while_loading(live, with_config=False)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(live / 'run.lock')!r}, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert RunDir.planned(cfg_for(tmp_path, "live")).path.name == "live-2"  # still loading: taken
    finally:
        holder.kill()
        holder.wait()
    assert RunDir.planned(cfg_for(tmp_path, "live")).path.name == "live"  # its process died: reused


def test_resume_of_a_run_stopped_before_its_config_says_so(tmp_path, vigor):
    killed_while_loading(tmp_path / "r", with_config=False)
    code, out, err = vigor("train", "--resume", str(tmp_path / "r"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "stopped before it wrote its config" in err and "reuses the directory" in err


def test_the_config_is_written_before_anything_slow(tmp_path, monkeypatch):
    """config.yaml is on disk when the trainer starts loading (model, data: seconds), so a
    kill then leaves a directory `--resume` accepts; a failed start still removes it."""
    import vigor_cli.train.trainer as trainer_module
    from vigor_cli.train.trainer import train

    seen = {}

    def loading(self, cfg, run, *a, **k):
        seen["config"] = (run.path / "config.yaml").is_file()
        raise RuntimeError("stop here")

    monkeypatch.setattr(trainer_module.Trainer, "__init__", loading)
    with pytest.raises(RuntimeError, match="stop here"):
        train(build_config(sets=tiny_sets(tmp_path, "r")), out=quiet())
    assert seen == {"config": True}
    assert not (tmp_path / "r").exists()  # a start that failed leaves no directory


@pytest.mark.slow
def test_sigkill_while_loading_then_resume_and_rerun(tmp_path):
    """A real `vigor train` killed (SIGKILL) as soon as its config.yaml exists, i.e. while it
    loads the model and data: `--resume` continues it, and a new run of that name reuses it."""
    env = {**os.environ, "COLUMNS": "1000"}
    args = [sys.executable, "-m", "vigor_cli", "train", "--output-dir", str(tmp_path), "--run-name", "r"]
    for s in tiny_sets(tmp_path, "unused", "train.steps=1"):
        if not s.startswith(("train.output_dir", "train.run_name")):
            args += ["--set", s]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = tmp_path / "r" / "config.yaml"
    deadline = time.time() + 120
    while time.time() < deadline and not config.is_file():
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "r" / "metrics.jsonl").exists(), "killed too late to test the start"
    shutil.copytree(tmp_path / "r", tmp_path / "copy")
    rerun = RunDir.planned(build_config(sets=tiny_sets(tmp_path, "r")))
    assert rerun.path == tmp_path / "r"  # reused, not pushed to r-2
    rerun.abandon()
    resumed = subprocess.run([sys.executable, "-m", "vigor_cli", "train", "--resume", str(tmp_path / "copy")],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "from the start (no checkpoint yet)" in resumed.stdout
