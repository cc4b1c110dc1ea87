"""The package's shape: no symlinks, every package folder installed, one import path per module.

The slow install checks (a wheel and an editable install in clean venvs, the sdist's layout)
are in test_wheel.py.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _tracked() -> list[str]:
    return subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_no_symlink_in_the_repository():
    assert [line for line in _tracked() if line.startswith("120000")] == []


def package_folders() -> dict[str, Path]:
    """Every installed package name and the repository folder it comes from, per pyproject.toml."""
    setup = PYPROJECT["tool"]["setuptools"]
    mapped = setup.get("package-dir", {})
    folders = {}
    for name in setup["packages"]:
        # the longest mapped prefix decides the folder: vigor_cli.sandbox.x -> sandbox/x
        prefix = max((p for p in mapped if name == p or name.startswith(p + ".")), key=len, default="")
        base = ROOT / mapped[prefix] if prefix else ROOT
        rest = name[len(prefix):].lstrip(".")
        folders[name] = base.joinpath(*rest.split(".")) if rest else base
    return folders


def test_every_package_folder_is_installed_once():
    """A folder with an __init__.py under vigor_cli/, sandbox/, verifiers/ or configs/ that
    pyproject.toml does not list would be left out of the wheel; a folder listed twice would
    have two import paths."""
    folders = package_folders()
    on_disk = {p.parent.resolve() for top in ("vigor_cli", "sandbox", "verifiers", "configs")
               for p in (ROOT / top).rglob("__init__.py") if "__pycache__" not in p.parts}
    listed = [f.resolve() for f in folders.values()]
    assert len(listed) == len(set(listed)), folders
    assert on_disk == set(listed), (f"not installed: {sorted(map(str, on_disk - set(listed)))}; "
                                    f"listed but missing: {sorted(map(str, set(listed) - on_disk))}")


def test_the_mapped_packages_import_from_the_top_level_folders():
    """In this checkout (an editable install) vigor_cli.sandbox is sandbox/ and so on: one
    import path per module, found through the build configuration's mapping."""
    import vigor_cli.configs
    import vigor_cli.sandbox
    import vigor_cli.verifiers
    from vigor_cli.package_data import CONFIGS_DIR

    for module, folder in ((vigor_cli.sandbox, "sandbox"), (vigor_cli.verifiers, "verifiers"),
                           (vigor_cli.configs, "configs")):
        assert Path(module.__file__).resolve().parent == (ROOT / folder).resolve()
    assert CONFIGS_DIR == (ROOT / "configs").resolve()
