"""Offline, a hub dataset or LiveCodeBench file is one line at once (issue 17: no half minute of
retry warnings before the error). The hub is made unreachable deterministically: its endpoint
points at a closed local port, and the cache is empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _offline_env(tmp_path: Path, **extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_ENDPOINT": "http://127.0.0.1:9",
           "HF_HOME": str(tmp_path / "hf-home"), "COLUMNS": "300"}
    env.pop("HF_HUB_OFFLINE", None)
    env.update(extra)
    return env


CASES = [
    ("math", "cannot load MATH training problems from the hub", False),
    ("code", "cannot download LiveCodeBench problems from the hub", False),
    ("code", "cannot download LiveCodeBench problems from the hub", True),  # HF_HUB_OFFLINE=1
]


def _in_process(tmp_path: Path, monkeypatch, vigor, offline_flag: bool, args: list[str]) -> tuple[int, str]:
    """The command in this process, with the hub client's settings as the environment above
    gives them to a new one (huggingface_hub reads its environment once, at import)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline_flag)
    code, _, err = vigor(*args)
    return code, err


@pytest.mark.parametrize("task, needle, offline_flag, process",
                         [(*case, False) for case in CASES]
                         + [pytest.param(*case, True, marks=pytest.mark.slow) for case in CASES])
def test_an_unreachable_hub_is_one_line_at_once(tmp_path, monkeypatch, vigor, task, needle, offline_flag, process):
    args = ["train", "--task", task, "--model", "tiny", "--steps", "1", "--output-dir", str(tmp_path / "runs")]
    if process:  # a new interpreter (about 4 s of CPU each): the real environment variables
        env = _offline_env(tmp_path, **({"HF_HUB_OFFLINE": "1"} if offline_flag else {}))
        done = subprocess.run([sys.executable, "-m", "vigor_cli", *args], env=env, capture_output=True, text=True,
                              timeout=120)
        code, err = done.returncode, done.stderr
    else:
        code, err = _in_process(tmp_path, monkeypatch, vigor, offline_flag, args)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert "task." in lines[0]  # names the key that points to local files
    if not offline_flag:  # the probe's wording (vigor_cli/hub.py): refused before the hub client's first request
        assert "cannot be reached" in lines[0], lines[0]
    # (with HF_HUB_OFFLINE=1 the hub client itself answers from its cache at once, no retries)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_lcb_files_in_the_cache_are_used_offline(tmp_path, monkeypatch):
    """With the hub unreachable, a LiveCodeBench release already in the cache still loads."""
    from vigor_cli import hub
    from vigor_cli.tasks import code_task

    names = code_task.lcb_release_files("release_v1")
    cached = []
    for name in names:
        p = tmp_path / name
        p.write_text("")
        cached.append(p)
    monkeypatch.setattr(hub, "unreachable", lambda: "the hub (test) cannot be reached (offline?)")
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    monkeypatch.setattr(code_task, "_cached_release_files", lambda n: cached if n == names else None)
    assert code_task._hub_release_files("release_v1", "--flag", "problems") == cached
    monkeypatch.setattr(code_task, "_cached_release_files", lambda n: None)
    with pytest.raises(code_task.UserError, match="not in the Hugging Face cache; point to local files with --flag"):
        code_task._hub_release_files("release_v1", "--flag", "problems")
