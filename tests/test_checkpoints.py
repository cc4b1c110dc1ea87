"""Checkpoints and resume on the real tiny model: damage, injected kills, edited configs,
changed --steps, a rescored evaluation file, a full disk. Every resumed run is compared with
an uninterrupted one (metrics identical except wall-clock times)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from test_rundir import _small_tmpfs
from test_trainer import quiet, strip_times, tiny_sets
from vigor_cli.run.directory import RunDir, verify_checkpoint
from vigor_cli.train.trainer import train

ROOT = Path(__file__).resolve().parents[1]


def settings(tmp_path: Path, steps: int, *extra: str) -> list[str]:
    return tiny_sets(tmp_path, "unused", f"train.steps={steps}", "train.save_every=2", "train.eval_every=2",
                     "train.log_completions_every=1", *extra)


def shared(trained, tmp_path: Path, steps: int, *extra: str) -> RunDir:
    """An uninterrupted run of ``steps``, trained once per session (conftest.py): read only."""
    return RunDir(trained.get(settings(tmp_path, steps, *extra)))


def copied(trained, tmp_path: Path, name: str, steps: int, *extra: str) -> RunDir:
    """This test's own copy of that run, at tmp_path/name: as if it had trained it."""
    return RunDir(trained.copy(settings(tmp_path, steps, *extra), tmp_path / name))


def snapshot(run: RunDir) -> dict[str, bytes]:
    files = {}
    for p in sorted(run.path.rglob("*")):
        if p.is_file() and p.name != "run.lock":
            files[str(p.relative_to(run.path))] = p.read_bytes()
    return files


@pytest.mark.slow
def test_truncated_newest_checkpoint_resumes_from_the_previous(tmp_path, vigor, trained):
    whole = shared(trained, tmp_path, 6)
    cut = copied(trained, tmp_path, "cut", 6)
    assert cut.checkpoint_steps() == [4, 6]
    state = cut.checkpoints / "step-6" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    # eval --run reads the same way: the newest intact checkpoint, a warning for the damaged one
    result = tmp_path / "eval.json"
    code, out, err = vigor("eval", "--run", str(cut.path), "--limit", "2", "--n", "1",
                           "--max-new-tokens", "4", "--output", str(result))
    assert code == 0, err
    assert "checkpoint step-6 is damaged (trainer_state.pt has" in err
    assert json.loads(result.read_text())["model"]["checkpoint"] == "step-4"
    code, out, err = vigor("eval", "--run", str(cut.path), "--checkpoint", "step-6")
    assert code == 2 and "--checkpoint step-6: damaged (trainer_state.pt has" in err
    code, out, err = vigor("train", "--resume", str(cut.path))
    assert code == 0, err
    assert "step-6 is damaged (trainer_state.pt has" in out and "resuming from step-4" in out
    assert strip_times(cut.metrics()) == strip_times(whole.metrics())
    assert verify_checkpoint(cut.checkpoints / "step-6") is None  # re-written when the run got there


@pytest.mark.slow
def test_every_checkpoint_damaged_is_refused_not_restarted(tmp_path, vigor, trained):
    run = copied(trained, tmp_path, "r", 4)
    for step in run.checkpoint_steps():
        (run.checkpoints / f"step-{step}" / "allocator.json").write_text("{}")
    before = snapshot(run)
    code, out, err = vigor("train", "--resume", str(run.path))
    assert code == 2 and "no intact checkpoint: step-4 is damaged (allocator.json" in err
    assert len(err.strip().splitlines()) == 1 and snapshot(run) == before


KILL_IN_COMMIT = textwrap.dedent("""
    import os, shutil, signal, sys
    from vigor_cli import cli

    where, step = sys.argv[1], sys.argv[2]
    real_replace, real_rmtree = os.replace, shutil.rmtree

    def replace(src, dst):
        if where == "publish" and os.path.basename(str(src)) == ".tmp-step-" + step:
            os.kill(os.getpid(), signal.SIGKILL)  # sealed, not yet renamed into place
        return real_replace(src, dst)

    def rmtree(path, *a, **k):
        if where == "rotation" and os.path.basename(str(path)).startswith(".trash-step-"):
            os.kill(os.getpid(), signal.SIGKILL)  # the old checkpoint renamed away, not deleted
        return real_rmtree(path, *a, **k)

    os.replace, shutil.rmtree = replace, rmtree
    cli.main(sys.argv[3:])
""")


def cli_sets(sets: list[str]) -> list[str]:
    args = []
    for s in sets:
        if not s.startswith(("train.output_dir", "train.run_name")):
            args += ["--set", s]
    return args


@pytest.mark.slow
@pytest.mark.parametrize("where", ["rotation", "publish"])
def test_a_kill_during_checkpoint_commit_leaves_a_checkpoint_that_resumes(tmp_path, trained, where):
    """keep_checkpoints=1: a kill while step-4 replaces step-2 (a real training process; the
    fast check of the same kills is tests/test_rundir.py's, on the run directory alone)."""
    extra = ("train.keep_checkpoints=1",)
    whole = shared(trained, tmp_path, 6, *extra)
    args = ["train", "--output-dir", str(tmp_path), "--run-name", "killed", *cli_sets(settings(tmp_path, 6, *extra))]
    proc = subprocess.run([sys.executable, "-c", KILL_IN_COMMIT, where, "4", *args],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    run = RunDir(tmp_path / "killed")
    resumed = subprocess.run([sys.executable, "-m", "vigor_cli", "train", "--resume", str(run.path)],
                             capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "1000"})
    assert resumed.returncode == 0, resumed.stderr
    expected = "step-4" if where == "rotation" else "step-2"
    assert f"from {run.path / 'checkpoints' / expected}" in resumed.stdout
    assert strip_times(run.metrics()) == strip_times(whole.metrics())
    assert run.checkpoint_steps() == [6]


@pytest.mark.parametrize("edit, key", [("seed", "train.seed"), ("learning_rate", "grpo.learning_rate")])
@pytest.mark.slow
def test_an_edited_config_is_refused_naming_the_key(tmp_path, vigor, trained, edit, key):
    run = copied(trained, tmp_path, "r", 2)
    cfg = yaml.safe_load((run.path / "config.yaml").read_text())
    section = key.split(".")[0]
    cfg[section][edit] = 7 if edit == "seed" else 0.5
    (run.path / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    before = snapshot(run)
    code, out, err = vigor("train", "--resume", str(run.path), "--steps", "3")
    assert code == 2 and f"{key} is" in err and "the checkpoint has" in err, err
    assert len(err.strip().splitlines()) == 1 and snapshot(run) == before


@pytest.mark.slow
def test_steps_edited_in_config_yaml_is_applied_and_said(tmp_path, vigor, trained):
    whole = shared(trained, tmp_path, 4)
    run = copied(trained, tmp_path, "r", 2)
    text = (run.path / "config.yaml").read_text()
    head, train = text.split("\ntrain:\n")
    (run.path / "config.yaml").write_text(head + "\ntrain:\n" + train.replace("  steps: 2\n", "  steps: 4\n", 1))
    code, out, err = vigor("train", "--resume", str(run.path))
    assert code == 0, err
    assert "train.steps 2 -> 4 (edited in config.yaml): applied" in out
    assert json.loads((run.path / "summary.json").read_text())["steps"] == 4
    assert strip_times(run.metrics()) == strip_times(whole.metrics())


@pytest.mark.slow
def test_resume_steps_keeps_config_and_summary_consistent(tmp_path, vigor, trained):
    whole = shared(trained, tmp_path, 6)
    run = copied(trained, tmp_path, "r", 4)
    before = snapshot(run)
    code, out, err = vigor("train", "--resume", str(run.path), "--steps", "2")
    assert code == 2 and "--steps 2: the run's checkpoint is at step 4" in err
    assert snapshot(run) == before  # config.yaml still says 4, like summary.json
    code, out, err = vigor("train", "--resume", str(run.path), "--steps", "6")
    assert code == 0, err
    assert yaml.safe_load((run.path / "config.yaml").read_text())["train"]["steps"] == 6
    assert json.loads((run.path / "summary.json").read_text())["steps"] == 6
    assert strip_times(run.metrics()) == strip_times(whole.metrics())
    code, out, err = vigor("train", "--resume", str(run.path), "--steps", "6")  # nothing left to do
    assert code == 0, err
    assert json.loads((run.path / "summary.json").read_text())["steps"] == 6
    assert strip_times(run.metrics()) == strip_times(whole.metrics())


@pytest.mark.slow
def test_rescored_evaluation_file_does_not_break_resume(tmp_path, vigor, trained):
    whole = shared(trained, tmp_path, 4)
    run = copied(trained, tmp_path, "r", 2)
    code, out, err = vigor("eval", "--rescore", str(run.eval_dir / "step-2.json"))
    assert code == 0, err
    assert (run.eval_dir / "step-2.rescored.json").is_file()
    code, out, err = vigor("train", "--resume", str(run.path), "--steps", "4")
    assert code == 0, err
    assert (run.eval_dir / "step-2.rescored.json").is_file()
    assert strip_times(run.metrics()) == strip_times(whole.metrics())


@pytest.mark.slow
def test_a_damaged_metrics_line_refuses_the_resume_naming_it(tmp_path, vigor, trained):
    run = copied(trained, tmp_path, "r", 2)
    path = run.path / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1][:20] + "\n"
    path.write_text("".join(lines))
    before = snapshot(run)
    code, out, err = vigor("train", "--resume", str(run.path), "--steps", "3")
    assert code == 2 and "metrics.jsonl:2: not valid JSON" in err
    assert len(err.strip().splitlines()) == 1 and snapshot(run) == before


@pytest.mark.slow
def test_disk_full_in_a_checkpoint_is_one_line_and_keeps_the_earlier_one(tmp_path, vigor, monkeypatch, trained):
    import vigor_cli.model.loading

    whole = shared(trained, tmp_path, 4)
    real = vigor_cli.model.loading.save_policy
    calls = []

    def full(model, tokenizer, directory):
        calls.append(directory)
        if len(calls) == 2:
            real(model, tokenizer, directory)  # half the files written, then the disk is full
            raise OSError(28, "No space left on device")
        real(model, tokenizer, directory)

    monkeypatch.setattr(vigor_cli.model.loading, "save_policy", full)
    args = ["train", "--output-dir", str(tmp_path), "--run-name", "r", *cli_sets(settings(tmp_path, 4))]
    code, out, err = vigor(*args)
    assert code == 2, err
    assert "no space left on the disk mounted at" in err and ".tmp-step-4" in err
    assert len(err.strip().splitlines()) == 1
    run = RunDir(tmp_path / "r")
    assert run.checkpoint_steps() == [2] and verify_checkpoint(run.checkpoints / "step-2") is None
    assert not list(run.checkpoints.glob(".tmp-*"))
    monkeypatch.setattr(vigor_cli.model.loading, "save_policy", real)
    code, out, err = vigor("train", "--resume", str(run.path))
    assert code == 0, err
    assert strip_times(run.metrics()) == strip_times(whole.metrics())


@pytest.mark.slow
def test_a_real_full_disk_during_training(tmp_path, trained):
    """A 16 MiB tmpfs holds one tiny checkpoint (~10 MB) but not two: the second fails with
    one line, exit 2, and the first resumes (on a roomier disk) to an uninterrupted run's metrics."""
    disk = tmp_path / "disk"
    if not _small_tmpfs(disk, "16m"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        whole = shared(trained, tmp_path, 4)
        args = ["train", "--output-dir", str(disk), "--run-name", "r", *cli_sets(settings(tmp_path, 4))]
        proc = subprocess.run([sys.executable, "-m", "vigor_cli", *args], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2, proc.stderr
        assert f"no space left on the disk mounted at {disk} " in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        run = RunDir(disk / "r")
        assert run.checkpoint_steps() == [2] and verify_checkpoint(run.checkpoints / "step-2") is None
        shutil.copytree(run.path, tmp_path / "moved")
    finally:
        subprocess.run(["umount", str(disk)])
    moved = RunDir(tmp_path / "moved")
    assert not (moved.path / "run.lock").exists()  # a run that ended, even on a full disk, removes its lock
    train(resume=moved.path, out=quiet())
    assert strip_times(moved.metrics()) == strip_times(whole.metrics())
