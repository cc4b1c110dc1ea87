"""The run directory without a model: the one JSONL rule, the atomic claim, the lock,
checkpoint manifests, commits and rotation under injected kills, a full disk."""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vigor_cli.settings import build_config
from vigor_cli.errors import UserError
from vigor_cli.user.jsonl import iter_jsonl, read_jsonl
from vigor_cli.train.resume import keep_logs_until
from vigor_cli.run.directory import DiskFullError, RunDir, load_run, verify_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def cfg_for(out: Path, name: str | None = "r"):
    sets = [f"train.output_dir={out}", "model.name_or_path=tiny", "task.name=tiny-math"]
    return build_config(sets=sets + ([f"train.run_name={name}"] if name else []))


# ------------------------------------------------------------------ the JSONL rule
def test_torn_last_line_is_ignored_with_a_note(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "rew')
    content = read_jsonl(p)
    assert [r["step"] for r in content.records] == [0, 1]
    assert content.torn_line == 3 and content.torn_at == len('{"step": 0}\n{"step": 1}\n')
    assert "metrics.jsonl:3" in content.notes[0] and "partial last line 3" in content.notes[0]


@pytest.mark.parametrize(
    "text, where",
    [
        ('{"step": 0}\nnot json\n{"step": 1}\n', ":2: not valid JSON"),
        ('{"step": 0}\n{"step": 1, "rew\n', ":2: not valid JSON"),  # has its newline: not torn
        ('{"step": 0}\n[1, 2]\n', ":2: expected a JSON object"),
        ('{"step": 0}\n\xff\xfe\n', ":2: not UTF-8"),
    ],
)
def test_any_other_bad_line_names_file_and_line(tmp_path, text, where):
    p = tmp_path / "metrics.jsonl"
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(UserError, match=f"metrics.jsonl{where}"):
        read_jsonl(p)


def test_input_files_allow_no_torn_line(tmp_path):
    p = tmp_path / "cases.jsonl"
    p.write_text('{"gold": "1"}\n\n{"gold": "2"}\n{"go')
    with pytest.raises(UserError, match="cases.jsonl:4: not valid JSON"):
        list(iter_jsonl(p))
    p.write_text('{"gold": "1"}\n\n{"gold": "2"}')  # a parseable last line without newline is whole
    assert [n for n, _ in iter_jsonl(p)] == [1, 3]


def test_one_runDir_class_for_readers_and_writer(tmp_path):
    import importlib.util

    assert importlib.util.find_spec("vigor_cli.report.rundir") is None  # the second RunDir is gone
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.append("metrics.jsonl", {"step": 0, "eval/accuracy": 0.5})
    with open(run.path / "metrics.jsonl", "a") as f:
        f.write('{"step": 1, "rew')
    (run.path / "config.yaml").write_text("train:\n  seed: 4\n")
    loaded = load_run(run.path)
    assert loaded.metrics() == [{"step": 0, "eval/accuracy": 0.5}]
    assert loaded.config_value("train.seed") == 4 and "partial last line 2" in loaded.notes[0]


# ------------------------------------------------------------------ resume keeps history
def write_logs(run: RunDir) -> bytes:
    run.path.mkdir(parents=True, exist_ok=True)
    run.eval_dir.mkdir(exist_ok=True)
    text = '{"step": 0,  "eval/accuracy": 0.1}\n{"step": 1, "x": 1.50}\n{"step": 2}\n{"step": 3}\n'
    (run.path / "metrics.jsonl").write_text(text + '{"step": 4, "x"')
    for name in ("step-2.json", "step-4.json", "step-2.rescored.json", "step-4.rescored.json"):
        (run.eval_dir / name).write_text("{}")
    return text.encode()


def test_resume_cut_keeps_lines_byte_for_byte_and_skips_rescored_files(tmp_path):
    run = RunDir(tmp_path / "r")
    text = write_logs(run)
    warnings = []
    keep_logs_until(run, 2, warnings.append)
    kept = (run.path / "metrics.jsonl").read_bytes()
    assert kept == b"".join(text.splitlines(keepends=True)[:3])  # "1.50" and the two spaces kept
    assert len(warnings) == 1 and "metrics.jsonl:5: removed a torn last line" in warnings[0]
    assert sorted(p.name for p in run.eval_dir.iterdir()) == [
        "step-2.json", "step-2.rescored.json", "step-4.rescored.json"]


def test_resume_refuses_a_damaged_line_and_changes_nothing(tmp_path):
    run = RunDir(tmp_path / "r")
    write_logs(run)
    path = run.path / "metrics.jsonl"
    path.write_bytes(path.read_bytes().replace(b'{"step": 2}', b'{"step": 2'))
    before = path.read_bytes()
    with pytest.raises(UserError, match=r"metrics.jsonl:3: not valid JSON.*resume keeps every logged line"):
        keep_logs_until(run, 1, print)
    assert path.read_bytes() == before


def test_a_last_line_without_newline_that_parses_is_kept_and_closed(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    (run.path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}')
    keep_logs_until(run, 5, print)  # a whole line killed before its newline: kept, closed
    assert (run.path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n{"step": 3}\n'
    keep_logs_until(run, 2, print)
    assert (run.path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    (run.path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}')  # killed before its newline
    keep_logs_until(run, 2, print)
    assert (run.path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'


# ------------------------------------------------------------------ one run, one directory
def test_collisions_get_suffixes_and_existing_runs_are_untouched(tmp_path):
    first = RunDir.planned(cfg_for(tmp_path)).make(cfg_for(tmp_path))
    notes = []
    second = RunDir.planned(cfg_for(tmp_path), announce=notes.append)
    assert first.path.name == "r" and second.path.name == "r-2"
    assert "is taken" in notes[0] and (first.path / "config.yaml").is_file()
    empty = tmp_path / "pre-made"
    empty.mkdir()
    assert RunDir.planned(cfg_for(tmp_path, "pre-made")).path == empty  # an empty directory is free
    (tmp_path / "file").write_text("x")
    assert RunDir.planned(cfg_for(tmp_path, "file")).path.name == "file-2"


def test_default_names_started_in_the_same_second_differ(tmp_path):
    a, b = RunDir.planned(cfg_for(tmp_path, None)), RunDir.planned(cfg_for(tmp_path, None))
    assert a.path != b.path and a.path.parent == b.path.parent


def _claim_in_child(out: str, name: str, barrier, queue) -> None:
    barrier.wait()
    run = RunDir.planned(cfg_for(Path(out), name))
    queue.put(str(run.path))
    barrier.wait()  # alive, holding its claim, until every child has claimed (a dead one's is reusable)


@pytest.mark.parametrize("name", ["same", None])
@pytest.mark.slow
def test_the_real_claim_raced_from_eight_processes(tmp_path, name):
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_claim_in_child, args=(str(tmp_path), name, barrier, queue)) for _ in range(8)]
    for p in procs:
        p.start()
    paths = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
    assert len(set(paths)) == 8, paths
    assert len(list(tmp_path.iterdir())) == 8


def test_output_dir_under_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match=r"train.output_dir: cannot create .*f/runs/r"):
        RunDir.planned(cfg_for(tmp_path / "f" / "runs"))


def test_abandon_removes_only_a_run_that_never_started(tmp_path):
    run = RunDir.planned(cfg_for(tmp_path)).make(cfg_for(tmp_path))
    run.abandon()
    assert not run.path.exists()
    deep = cfg_for(tmp_path / "new" / "runs")
    RunDir.planned(deep).make(deep).abandon()
    assert not (tmp_path / "new").exists()  # output directories made for it go too
    run = RunDir.planned(cfg_for(tmp_path)).make(cfg_for(tmp_path))
    run.append("metrics.jsonl", {"step": 0})
    run.abandon()
    assert (run.path / "metrics.jsonl").is_file()


def test_lock_refuses_a_second_holder_until_released_in_one_process(tmp_path):
    """The fast check of the rule the slow test below checks from a new process: flock locks
    belong to an open file, so a second opening in this process is refused the same way."""
    run = RunDir.planned(cfg_for(tmp_path)).make(cfg_for(tmp_path))
    with pytest.raises(UserError) as refused:
        RunDir.open_existing(run.path).acquire()
    message = str(refused.value)
    assert "the run is in use by another process" in message and f"pid {os.getpid()}" in message
    assert "\n" not in message
    run.release()
    RunDir.open_existing(run.path).acquire().release()


@pytest.mark.slow
def test_lock_refuses_a_second_process_until_released(tmp_path):
    run = RunDir.planned(cfg_for(tmp_path)).make(cfg_for(tmp_path))
    probe = [sys.executable, "-c", textwrap.dedent(f"""
        from vigor_cli.errors import UserError
        from vigor_cli.run.directory import RunDir
        try:
            RunDir.open_existing({str(run.path)!r}).acquire()
        except UserError as e:
            print(e)
        else:
            print("acquired")
    """)]
    held = subprocess.run(probe, capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert "the run is in use by another process" in held and f"pid {os.getpid()}" in held
    assert "\n" not in held
    run.release()
    assert subprocess.run(probe, capture_output=True, text=True, cwd=ROOT).stdout.strip() == "acquired"


# ------------------------------------------------------------------ checkpoints
def fake_checkpoint(run: RunDir, step: int, keep: int = 2) -> Path:
    tmp = run.begin_checkpoint(step)
    (tmp / "model.safetensors").write_bytes(os.urandom(4096))
    (tmp / "data_state.json").write_text(json.dumps({"step": step}))
    (tmp / "sub").mkdir()
    (tmp / "sub" / "x.bin").write_bytes(b"x" * step)
    return run.commit_checkpoint(tmp, step, keep)


def test_manifest_catches_truncation_resizing_and_changed_bytes(tmp_path):
    run = RunDir(tmp_path / "r")
    path = fake_checkpoint(run, 2)
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.safetensors", "data_state.json", "sub/x.bin"}
    assert verify_checkpoint(path) is None
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:100])
    assert "model.safetensors has 100 bytes" in verify_checkpoint(path)
    (path / "model.safetensors").write_bytes(bytes([data[0] ^ 1]) + data[1:])
    assert "sha256" in verify_checkpoint(path)
    (path / "model.safetensors").unlink()
    assert "missing" in verify_checkpoint(path)


def test_fallback_to_the_newest_intact_checkpoint(tmp_path):
    run = RunDir(tmp_path / "r")
    for step in (2, 4, 6):
        fake_checkpoint(run, step, keep=3)
    (run.checkpoints / "step-6" / "sub" / "x.bin").write_bytes(b"")
    (run.checkpoints / "step-4" / "model.safetensors").write_bytes(b"short")
    warnings = []
    assert run.store.newest_intact(warnings.append).name == "step-2"
    assert len(warnings) == 2 and "step-6 is damaged (sub/x.bin has 0 bytes" in warnings[0]
    (run.checkpoints / "step-2" / "data_state.json").write_text("{}")
    with pytest.raises(UserError, match="no intact checkpoint: step-6 is damaged.*step-2 is damaged"):
        run.store.newest_intact(warnings.append)


def test_rotation_keeps_the_newest_and_drops_an_abandoned_future(tmp_path):
    run = RunDir(tmp_path / "r")
    for step in (2, 4, 6):
        fake_checkpoint(run, step, keep=3)
    fake_checkpoint(run, 5, keep=2)  # resumed from step-4 after step-6 was found damaged
    assert run.checkpoint_steps() == [4, 5]
    fake_checkpoint(run, 5, keep=1)  # the same step again: replaced, never absent
    assert run.checkpoint_steps() == [5]
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step-5"]


KILLER = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_rundir import fake_checkpoint
    from vigor_cli.run.directory import RunDir

    target, nth = sys.argv[1], int(sys.argv[2])
    calls = {{"n": 0}}
    real = {{"replace": os.replace, "rmtree": shutil.rmtree}}

    def call(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return real[target](*args, **kwargs)

    if target == "replace":
        os.replace = call
    else:
        shutil.rmtree = call
    fake_checkpoint(RunDir(Path(sys.argv[3])), int(sys.argv[4]), keep=1)
    print(calls["n"])
""")


def commit_in_child(run: RunDir, target: str, nth: int, step: int) -> subprocess.CompletedProcess:
    script = KILLER.format(tests=str(ROOT / "tests"))
    return subprocess.run([sys.executable, "-c", script, target, str(nth), str(run.path), str(step)],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("new_step", [4, 2], ids=["rotation", "same-step"])
@pytest.mark.parametrize("target", ["replace", "rmtree"])
@pytest.mark.slow
def test_a_kill_anywhere_in_commit_or_rotation_leaves_an_intact_checkpoint(tmp_path, target, new_step):
    """SIGKILL at each os.replace / shutil.rmtree call of a commit with keep=1: step 4 after
    step 2 (rotation removes step 2) and step 2 again (the same-step replacement)."""
    clean = RunDir(tmp_path / "count")
    fake_checkpoint(clean, 2, keep=1)
    counted = commit_in_child(clean, target, 0, new_step)
    calls = int(counted.stdout.strip())
    assert counted.returncode == 0 and calls >= 1, counted.stderr
    for nth in range(1, calls + 1):
        run = RunDir(tmp_path / f"kill-{nth}")
        fake_checkpoint(run, 2, keep=1)
        proc = commit_in_child(run, target, nth, new_step)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        ckpt = run.store.newest_intact(lambda m: None)  # what a resume does first
        assert ckpt is not None and verify_checkpoint(ckpt) is None, f"kill at {target} #{nth}"
        assert ckpt.name in ("step-2", f"step-{new_step}")
        names = sorted(p.name for p in run.checkpoints.iterdir())
        assert all(n.startswith("step-") for n in names), names  # temporaries cleaned up


# ------------------------------------------------------------------ a full disk
def test_enospc_while_appending_is_one_line_naming_the_disk(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    import builtins

    real_open = builtins.open

    def full(path, *a, **k):
        if str(path).endswith("metrics.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", full)
    with pytest.raises(DiskFullError, match=r"metrics.jsonl: no space left on the disk mounted at .* MiB free"):
        run.append("metrics.jsonl", {"step": 1})


def _small_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_a_real_full_disk_keeps_the_earlier_checkpoint(tmp_path):
    disk = tmp_path / "disk"
    if not _small_tmpfs(disk, "256k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        run = RunDir(disk / "r")
        tmp = run.begin_checkpoint(2)
        (tmp / "data_state.json").write_text("{}")
        run.commit_checkpoint(tmp, 2, keep=1)
        tmp = run.begin_checkpoint(4)
        with pytest.raises(DiskFullError, match=f"no space left on the disk mounted at {disk} "):
            run.append("metrics.jsonl", {"pad": "x" * 400_000})
        with pytest.raises(DiskFullError):
            from vigor_cli.run.directory import write_json_atomic

            write_json_atomic(tmp / "big.json", {"pad": "x" * 400_000})
        assert not (tmp / ".big.json.tmp").exists()  # the half-written temporary is gone
        assert run.store.newest_intact(print).name == "step-2"
    finally:
        subprocess.run(["umount", str(disk)])


def test_a_checkpoint_from_before_manifests_is_checked_as_far_as_it_can_be(tmp_path):
    import torch

    run = RunDir(tmp_path / "r")
    path = run.checkpoints / "step-2"
    path.mkdir(parents=True)
    torch.save({"optimizer": {"x": torch.zeros(1000)}}, path / "trainer_state.pt")
    for name in ("allocator.json", "data_state.json"):
        (path / name).write_text('{"step": 2}')
    (path / "COMPLETE").write_text("2")
    assert verify_checkpoint(path) is None
    data = (path / "trainer_state.pt").read_bytes()
    (path / "trainer_state.pt").write_bytes(data[: len(data) // 2])
    assert "trainer_state.pt" in verify_checkpoint(path)
    with pytest.raises(UserError, match="no intact checkpoint: step-2 is damaged"):
        run.store.newest_intact(print)


def test_a_checkpoint_that_lost_its_manifest_is_damaged(tmp_path):
    """Issue 24: a checkpoint this version wrote (its COMPLETE names the version) without its
    manifest.json is damaged; so is one holding config.yaml (written with manifests) whose
    COMPLETE is a bare step. The legacy checks apply only to checkpoints older than both."""
    run = RunDir(tmp_path / "r")
    path = fake_checkpoint(run, 2)
    assert json.loads((path / "COMPLETE").read_text())["written_by"].startswith("vigor ")
    assert json.loads((path / "manifest.json").read_text())["written_by"].startswith("vigor ")
    (path / "manifest.json").unlink()
    assert verify_checkpoint(path).startswith("manifest.json is missing (written by vigor ")
    (path / "COMPLETE").write_text("2")  # as the version before this one wrote it
    (path / "config.yaml").write_text("train:\n  seed: 0\n")
    assert "manifest.json is missing (a checkpoint holding config.yaml" in verify_checkpoint(path)
    (path / "COMPLETE").write_text("garbage")
    assert "COMPLETE marker is unreadable" in verify_checkpoint(path)
    other = RunDir(tmp_path / "other")
    fake_checkpoint(other, 1, keep=3)
    (fake_checkpoint(other, 2, keep=3) / "COMPLETE").unlink()
    warnings = []
    assert other.store.newest_intact(warnings.append).name == "step-1"  # a step-N without COMPLETE: damaged
    assert "step-2 is damaged (no COMPLETE marker)" in warnings[0]
