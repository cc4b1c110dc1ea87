"""Throwaway virtual environments for the install tests (test_wheel.py, test_sandbox_review.py).

``make_venv(folder, inherit=True)`` sees this interpreter's installed packages (torch and the
other dependencies are not installed again); ``inherit=False`` is a clean venv with nothing
but the standard library, as a user's fresh one. ``pip_install`` installs into a venv with
this interpreter's pip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

COPY_IGNORE = (".git", "runs", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".venv",
               "results", "*.whl")
"""What a copy of the checkout leaves out (build outputs, caches, runs)."""


def run(cmd: list, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, (f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def clean_env(**extra: str) -> dict:
    """This process's environment without a PYTHONPATH or a venv of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env | extra


def make_venv(folder: Path, inherit: bool = True) -> Path:
    """A venv at ``folder``; returns its python. ``inherit``: it also sees the packages of this
    interpreter (and of this venv, where this interpreter is one) through a plain path line,
    so the .pth files there (an editable vigor's import hook) are not run."""
    args = ["--system-site-packages"] if inherit else []
    run([sys.executable, "-m", "venv", *args, "--without-pip", folder], cwd=folder.parent)
    python = folder / "bin" / "python"
    if inherit and sys.prefix != sys.base_prefix:
        theirs = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=folder.parent).stdout.strip()
        ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        (Path(theirs) / "outer-env.pth").write_text("".join(f"{p}\n" for p in ours))
    return python


def pip_install(python: Path, *args: str, cwd: Path) -> None:
    """``pip install --no-deps`` into the venv of ``python`` (extra arguments: what to install)."""
    run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", *args], cwd=cwd,
        env=clean_env())
