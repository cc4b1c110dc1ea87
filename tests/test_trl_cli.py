"""Bad input to the TRL entry point (`python3 -m vigor_cli.integrations.trl`): one line on stderr
naming the flag, key or file, exit 2, no traceback, refused before the model loads and with
nothing already on disk changed (issue 17); a bug keeps its traceback."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

REPO = Path(__file__).resolve().parents[1]
RUN_FILES = {"allocation.jsonl": '{"step": 1}\n', "metrics.jsonl": '{"step": 1}\n', "config.yaml": "train: {}\n"}


def _setup(tmp: Path) -> None:
    """A regular file, a binary file and a directory holding an earlier run's files."""
    (tmp / "f").write_text("a file, not a directory\n")
    (tmp / "bin.yaml").write_bytes(bytes(range(256)))
    (tmp / "used").mkdir()
    for name, text in RUN_FILES.items():
        (tmp / "used" / name).write_text(text)


def _snapshot(tmp: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(tmp)): (p.read_bytes() if p.is_file() else None) for p in sorted(tmp.rglob("*"))}


# (arguments with {t} for the test's directory, fragments the one line must hold)
CASES = {
    "output-dir under a file": (["--cpu", "--output-dir", "{t}/f/x"], ["--output-dir", "{t}/f/x", "{t}/f is a file"]),
    "output-dir is a file": (["--cpu", "--output-dir", "{t}/f"], ["--output-dir", "{t}/f is a file"]),
    "vigor_run_dir under a file": (["--cpu", "--output-dir", "{t}/new", "--trl", "vigor_run_dir={t}/f/r"],
                                   ["--trl vigor_run_dir", "{t}/f is a file"]),
    "trl output_dir under a file": (["--cpu", "--output-dir", "{t}/new", "--trl", "output_dir={t}/f/r"],
                                    ["--trl output_dir", "{t}/f is a file"]),
    "output-dir holds a run": (["--cpu", "--output-dir", "{t}/used"], ["--output-dir", "{t}/used", "allocation.jsonl"]),
    "vigor_run_dir holds a run": (["--cpu", "--output-dir", "{t}/new", "--trl", "vigor_run_dir={t}/used"],
                                  ["--trl vigor_run_dir", "{t}/used", "allocation.jsonl"]),
    "unknown flag": (["--cpu", "--output-dir", "{t}/new", "--bogus"],
                     ["unrecognized arguments: --bogus", "--help"]),
    "bad choice": (["--output-dir", "{t}/new", "--vllm-mode", "nope"], ["--vllm-mode", "'nope'"]),
    "missing --output-dir": (["--cpu"], ["required", "--output-dir"]),
    "flag without its value": (["--output-dir", "{t}/new", "--set"], ["--set", "expected one argument"]),
    "binary config": (["--config", "{t}/bin.yaml", "--output-dir", "{t}/new"], ["{t}/bin.yaml", "UTF-8"]),
}


def _run(args: list[str], capfd) -> tuple[int, str, str]:
    """The entry point in this process (its real ``main``, TRL already imported): exit code,
    stdout, stderr as the file descriptors saw them."""
    from vigor_cli.integrations import trl

    capfd.readouterr()
    try:
        code = trl.main(args)
    except SystemExit as e:  # argparse's --help
        code = e.code
    out = capfd.readouterr()
    return code, out.out, out.err


def _run_process(args: list[str]) -> tuple[int, str, str]:
    """``python3 -m vigor_cli.integrations.trl`` in a new interpreter: also proves that nothing
    printed while importing torch and TRL reaches stderr (about 5 s of CPU each, so slow)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "vigor_cli.integrations.trl", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


PROCESS_CASES = {"unknown flag", "binary config", "output-dir holds a run"}
"""The cases also run through a new interpreter (marked slow)."""


@pytest.mark.parametrize("case, process", [(c, False) for c in CASES]
                         + [pytest.param(c, True, marks=pytest.mark.slow) for c in CASES if c in PROCESS_CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(tmp_path, capfd, case, process):
    args, fragments = CASES[case]
    _setup(tmp_path)
    before = _snapshot(tmp_path)
    argv = [a.format(t=tmp_path) for a in args]
    code, out, err = _run_process(argv) if process else _run(argv, capfd)
    lines = err.splitlines()
    assert code == 2, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]  # no progress bars, no usage
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment.format(t=tmp_path) in lines[0]
    assert _snapshot(tmp_path) == before  # nothing created, nothing earlier changed
    assert out == ""


@pytest.mark.parametrize("process", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_help_still_prints_the_usage_and_exits_0(capfd, process):
    code, out, err = _run_process(["--help"]) if process else _run(["--help"], capfd)
    assert code == 0 and "--output-dir" in out and err == ""


def test_an_os_error_anywhere_in_main_is_one_line_naming_the_path(tmp_path, monkeypatch, capsys):
    """user_message's OSError rule covers the whole entry point: a full disk names the path and the disk."""
    from vigor_cli.integrations import trl

    def full_disk(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.yaml"))

    monkeypatch.setattr(trl, "build_config", full_disk)
    assert trl.main(["--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(tmp_path / "x.yaml") in err[0] and "no space left" in err[0]


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    from vigor_cli.integrations import trl

    def bug(*a, **kw):
        raise RuntimeError("an internal error")

    monkeypatch.setattr(trl, "build_config", bug)
    with pytest.raises(RuntimeError, match="an internal error"):
        trl.main(["--output-dir", str(tmp_path / "out")])
