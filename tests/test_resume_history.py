"""Resume never rewrites history (issue 17): every line of the steps the checkpoint covers is
kept, or the resume refuses with one line naming the file and the line or step, and changes
nothing. Bytes that are not UTF-8 are damage, never a torn last line. Each case damages a
real finished tiny run the way a user, a crash or a bad disk would: a training, so slow tests;
tests/test_rundir.py keeps the fast checks of the cut and the refusal on a run directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from test_checkpoints import snapshot
from test_trainer import strip_times, tiny_sets
from vigor_cli.user.jsonl import read_jsonl
from vigor_cli.errors import UserError
from vigor_cli.run.directory import RunDir

BINARY = b"\xff\xfe\x00\x81\x89PNG"  # no newline: the shape of a torn line, but not text


@pytest.fixture
def finished(trained, tmp_path) -> RunDir:
    """4 steps; checkpoints at 2 and 4; evaluations at 0, 2, 4; completions every step (trained
    once per session, conftest.py; shared: read only)."""
    return RunDir(trained.get(tiny_sets(tmp_path, "r", "train.steps=4", "train.save_every=2", "train.eval_every=2")))


@pytest.fixture
def run(finished, tmp_path) -> RunDir:
    shutil.copytree(finished.path, tmp_path / "r")
    return RunDir(tmp_path / "r")


def lines(run: RunDir, log: str) -> list[bytes]:
    return (run.path / log).read_bytes().splitlines(keepends=True)


def keep(run: RunDir, log: str, n: int, tail: bytes = b"") -> None:
    (run.path / log).write_bytes(b"".join(lines(run, log)[:n]) + tail)


def append(run: RunDir, log: str, data: bytes) -> None:
    with open(run.path / log, "ab") as f:
        f.write(data)


def steps_of(run: RunDir, log: str) -> list[tuple[int, bool]]:
    return [(json.loads(x)["step"], "eval/accuracy" in json.loads(x)) for x in lines(run, log)]


@pytest.mark.slow
def test_the_finished_run_has_the_lines_the_cases_cut(finished):
    assert steps_of(finished, "metrics.jsonl") == [
        (0, True), (1, False), (2, False), (2, True), (3, False), (4, False), (4, True)]
    assert [s for s, _ in steps_of(finished, "allocation.jsonl")] == [1, 2, 3, 4]
    assert sorted({s for s, _ in steps_of(finished, "completions.jsonl")}) == [1, 2, 3, 4]
    assert finished.checkpoint_steps() == [2, 4] and sorted(finished.eval_steps()) == [0, 2, 4]


CASES = {
    # lines of steps the checkpoint (step 4) covers are missing: a resume would leave a gap
    "first-two-lines": (lambda r: keep(r, "metrics.jsonl", 2), "metrics.jsonl: the training line of step 2 is missing"),
    "deleted": (lambda r: (r.path / "metrics.jsonl").unlink(), "metrics.jsonl: no such file"),
    "eval-line-gone": (lambda r: (r.path / "metrics.jsonl").write_bytes(
        b"".join(x for i, x in enumerate(lines(r, "metrics.jsonl")) if i != 3)),
        "metrics.jsonl: the evaluation line of step 2 is missing"),
    "torn-step-line": (lambda r: keep(r, "metrics.jsonl", 5, lines(r, "metrics.jsonl")[5][:30]),
                       "metrics.jsonl: the training line of step 4 is missing"),
    "allocation-cut": (lambda r: keep(r, "allocation.jsonl", 3), "allocation.jsonl: the record of step 4 is missing"),
    "allocation-deleted": (lambda r: (r.path / "allocation.jsonl").unlink(), "allocation.jsonl: no such file"),
    "completions-torn": (lambda r: keep(r, "completions.jsonl", 9, lines(r, "completions.jsonl")[9][:40]),
                         "completions.jsonl:10: the line of step 3 is cut short"),
    # bytes that are not UTF-8 are damage, also as a last line without newline
    "binary-appended": (lambda r: append(r, "metrics.jsonl", BINARY), "metrics.jsonl:8: not UTF-8"),
    "binary-file": (lambda r: (r.path / "metrics.jsonl").write_bytes(BINARY), "metrics.jsonl:1: not UTF-8"),
    "binary-allocation": (lambda r: append(r, "allocation.jsonl", BINARY), "allocation.jsonl:5: not UTF-8"),
    "binary-completions": (lambda r: append(r, "completions.jsonl", BINARY), "completions.jsonl:17: not UTF-8"),
    "completions-deleted": (lambda r: (r.path / "completions.jsonl").unlink(), "completions.jsonl: no such file"),
    "completions-cut": (lambda r: keep(r, "completions.jsonl", 8), "completions.jsonl: the completions line of step 3 is missing"),
    # logged steps no checkpoint on disk covers (issue 24): re-running them would rewrite them
    "checkpoints-deleted": (lambda r: shutil.rmtree(r.checkpoints),
                            "metrics.jsonl: step 3 is logged, but no checkpoint covers it"),
    "only-checkpoint-incomplete": (lambda r: (shutil.rmtree(r.checkpoints / "step-2"),
                                              (r.checkpoints / "step-4" / "COMPLETE").unlink()),
                                   "no intact checkpoint: step-4 is damaged (no COMPLETE marker)"),
    "final-checkpoint-deleted": (lambda r: shutil.rmtree(r.checkpoints / "step-4"),
                                 "summary.json: the run finished step 4, but no checkpoint of that step is on disk"),
    "manifests-deleted": (lambda r: [(r.checkpoints / f"step-{s}" / "manifest.json").unlink() for s in (2, 4)],
                          "no intact checkpoint: step-4 is damaged (manifest.json is missing (written by vigor"),
    # the checkpoint's evaluation line is cut short and its file, needed to log it again, is damaged
    "eval-file-damaged": (lambda r: (keep(r, "metrics.jsonl", 6, b'{"step": 4, "eval/acc'),
                                     (r.eval_dir / "step-4.json").write_bytes(b"{}")), "eval/step-4.json: damaged"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow
def test_resume_refuses_lost_or_damaged_history_and_changes_nothing(run, vigor, case):
    damage, needle = CASES[case]
    damage(run)
    before = snapshot(run)
    code, out, err = vigor("train", "--resume", str(run.path), "--steps", "5")
    assert code == 2, out + err
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert "Traceback" not in err
    assert snapshot(run) == before


@pytest.mark.slow
def test_a_torn_checkpoint_eval_line_is_logged_again_from_its_file(run, finished, vigor):
    """The eval line of step 4 (the checkpoint's) cut short: removed, then logged again from
    eval/step-4.json, so the log reads as the uninterrupted run's."""
    keep(run, "metrics.jsonl", 6, lines(run, "metrics.jsonl")[6][:50])
    code, out, err = vigor("train", "--resume", str(run.path))
    assert code == 0, err
    assert "metrics.jsonl:7: removed a torn last line" in out
    assert "logged the evaluation of step 4 again from eval/step-4.json" in out
    assert strip_times(run.metrics()) == strip_times(finished.metrics())
    code, out, err = vigor("train", "--resume", str(run.path), "--steps", "5")  # and it goes on cleanly
    assert code == 0, err
    assert steps_of(run, "metrics.jsonl")[7:] == [(5, False), (5, True)]


@pytest.mark.slow
def test_a_torn_line_of_a_later_step_is_still_removed(run, vigor):
    """The crash case stays allowed: checkpoint 4 damaged, so the run resumes from 2 and the
    torn line (step 4's evaluation) is one of the steps it re-runs."""
    keep(run, "metrics.jsonl", 6, lines(run, "metrics.jsonl")[6][:50])
    (run.checkpoints / "step-4" / "COMPLETE").unlink()
    code, out, err = vigor("train", "--resume", str(run.path))
    assert code == 0, err
    assert "removed a torn last line" in out and "logged the evaluation" not in out
    assert steps_of(run, "metrics.jsonl")[3:] == [(2, True), (3, False), (4, False), (4, True)]


@pytest.mark.parametrize("whole_file", [True, False])
@pytest.mark.slow
def test_report_on_a_binary_log_is_one_error_line(run, vigor, tmp_path, whole_file):
    if whole_file:
        (run.path / "metrics.jsonl").write_bytes(BINARY)
    else:
        append(run, "metrics.jsonl", BINARY)
    code, out, err = vigor("report", str(run.path), "--out", str(tmp_path / "D"))
    assert code == 2
    assert err.strip().splitlines() == [f"error: {run.path / 'metrics.jsonl'}:{1 if whole_file else 8}: "
                                        "not UTF-8 text (a binary file?)"]
    assert not (tmp_path / "D").exists()
    append(run, "allocation.jsonl", BINARY)
    code, out, err = vigor("inspect-allocation", str(run.path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "allocation.jsonl:5: not UTF-8" in err


@pytest.mark.slow
def test_reader_notes_do_not_wrap(run, vigor, tmp_path, monkeypatch):
    from vigor_cli.console import err_console

    append(run, "metrics.jsonl", b'{"step": 5, "eval/accuracy": 0.5, "eval/sam')
    monkeypatch.setattr(err_console, "width", 40)
    code, out, err = vigor("report", str(run.path), "--out", str(tmp_path / "D"))
    assert code == 0, err
    assert err.strip().splitlines() == [f"note: {run.path / 'metrics.jsonl'}:8: ignored the partial "
                                        "last line 8 (still being written, or cut short)"]


@pytest.mark.parametrize(
    "tail, torn",
    [
        (b'{"step": 2, "rew', True),
        (b'{"step": 2, "text": "caf\xc3', True),  # cut inside a character: still a prefix
        (b"\xff\xfe\x00", False),
        (b'{"step": 2, "x": "\xff', False),
        (b"garbage", False),  # text, but no JSON object starts like this
    ],
)
def test_only_a_prefix_of_a_json_line_is_a_torn_line(tmp_path, tail, torn):
    p = tmp_path / "metrics.jsonl"
    p.write_bytes(b'{"step": 0}\n{"step": 1}\n' + tail)
    if torn:
        assert read_jsonl(p).torn_line == 3
    else:
        with pytest.raises(UserError, match=r"metrics.jsonl:3: not (UTF-8|valid JSON)"):
            read_jsonl(p)


@pytest.mark.slow
def test_a_checkpoint_without_its_manifest_is_damaged_not_trusted(run, finished, vigor, tmp_path):
    """Issue 24: step-4 loses its manifest.json and model bytes change. It was written by a
    version that writes manifests, so it is damaged: eval --run and resume warn and use
    step-2, and the resumed run matches the uninterrupted one."""
    ckpt = run.checkpoints / "step-4"
    (ckpt / "manifest.json").unlink()
    model = next(p for p in ckpt.iterdir() if p.suffix == ".safetensors")
    data = bytearray(model.read_bytes())
    data[-100] ^= 0xFF  # a flipped byte in the weights, the file size unchanged
    model.write_bytes(bytes(data))
    code, out, err = vigor("eval", "--run", str(run.path), "--checkpoint", "step-4")
    assert code == 2 and "--checkpoint step-4: damaged (manifest.json is missing (written by vigor" in err
    code, out, err = vigor("train", "--resume", str(run.path))
    assert code == 0, err
    assert "step-4 is damaged (manifest.json is missing" in out and "resuming from step-2" in out
    assert strip_times(run.metrics()) == strip_times(finished.metrics())
