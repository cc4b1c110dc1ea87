"""The package stands on its own: a wheel built from this checkout's sdist, installed into a
fresh virtual environment, runs `vigor train` and `vigor eval` from a folder outside the
checkout with the same bundled config, model and benchmark files, and installs no top-level
`verifiers` or `sandbox` module. The sdist holds the repository's own layout (``sandbox/``,
``verifiers/``, ``configs/`` at the top, mapped into ``vigor_cli`` by ``pyproject.toml``), and a
clean venv (no other package) imports ``vigor_cli.verifiers`` and ``vigor_cli.sandbox`` from the
wheel and from an editable install alike.

The venv that runs vigor sees this interpreter's packages (torch and the other dependencies are
not installed again), so the test checks that its `vigor_cli` is the wheel's copy, not this
checkout or an editable install.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from venvs import COPY_IGNORE, clean_env, make_venv, pip_install, run

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

IMPORTS = ("import vigor_cli, vigor_cli.verifiers.math_answers, vigor_cli.sandbox.landlock\n"
           "from vigor_cli.package_data import CONFIGS_DIR, MATH_EVAL_DIR\n"
           "print(vigor_cli.__file__); print(vigor_cli.verifiers.math_answers.__file__)\n"
           "print(vigor_cli.sandbox.landlock.__file__); print(CONFIGS_DIR); print(MATH_EVAL_DIR)")
"""Imports the mapped packages (standard library only) and prints where each came from."""


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    """An sdist built from a copy of this checkout (so no build/ or egg-info lands in it)."""
    base = tmp_path_factory.mktemp("sdist")
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*COPY_IGNORE))
    build = "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    name = run([sys.executable, "-c", build, base / "dist"], cwd=src).stdout.split()[-1]
    return base / "dist" / name


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory) -> Path:
    """A wheel built from the sdist (so the sdist holds everything the package needs)."""
    base = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
         base / "dist", sdist], cwd=base, env=clean_env())
    (whl,) = (base / "dist").glob("vigor-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> dict:
    """A fresh venv with the wheel installed; returns its python, its vigor, a work folder
    outside the checkout and the environment to run them in."""
    base = tmp_path_factory.mktemp("venv")
    env_dir = base / "env"
    python = make_venv(env_dir)
    env = clean_env(PATH=f"{env_dir / 'bin'}:{clean_env().get('PATH', '')}", HF_HUB_OFFLINE="1", COLUMNS="200")
    pip_install(python, "--no-index", "--force-reinstall", str(wheel), cwd=base)
    work = base / "work"
    work.mkdir()
    return {"python": python, "vigor": env_dir / "bin" / "vigor", "work": work, "env": env, "root": env_dir}


def test_sdist_keeps_the_repository_layout(sdist):
    """Every file of the sdist lies where it lies in the repository (sandbox/ at the top, no
    vigor_cli/sandbox copy), and every source file and config of the package is in it."""
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    with tarfile.open(sdist) as t:
        names = {m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile()}
    generated = {"PKG-INFO", "setup.cfg"}
    names = {n for n in names if n not in generated and ".egg-info/" not in n}
    assert names <= tracked, f"files of the sdist that are not in the repository: {sorted(names - tracked)}"
    package = {n for n in tracked if n.split("/")[0] in ("vigor_cli", "sandbox", "verifiers", "configs")
               and (n.endswith((".py", ".yaml")))}
    assert package <= names, f"package files missing from the sdist: {sorted(package - names)}"
    assert not any(n.startswith(("vigor_cli/sandbox/", "vigor_cli/verifiers/", "vigor_cli/configs/"))
                   for n in names)


@pytest.mark.parametrize("how", ["wheel", "editable"])
def test_a_clean_venv_imports_the_mapped_packages(how, wheel, tmp_path):
    """A venv with nothing else installed: `vigor_cli.verifiers`, `vigor_cli.sandbox` and the
    configs come from the wheel's copy, or (editable) from the checkout's top-level folders."""
    python = make_venv(tmp_path / "env", inherit=False)
    if how == "wheel":
        pip_install(python, "--no-index", str(wheel), cwd=tmp_path)
        src = tmp_path / "env"
    else:
        src = tmp_path / "src"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*COPY_IGNORE))
        pip_install(python, "-e", str(src), cwd=tmp_path)  # builds with setuptools from the index
    work = tmp_path / "work"
    work.mkdir()
    out = run([python, "-c", IMPORTS], cwd=work, env=clean_env()).stdout.split()
    package, verifiers, sandbox, configs, math_eval = (Path(line).resolve() for line in out)
    for p in (package, verifiers, sandbox, configs, math_eval):
        assert src.resolve() in p.parents, f"{p} is not from {src}"
    if how == "wheel":
        assert verifiers.parent.parent == sandbox.parent.parent == configs.parent == package.parent
    else:
        top = src.resolve()
        assert (verifiers.parent, sandbox.parent, configs) == (top / "verifiers", top / "sandbox", top / "configs")
    assert (configs / "tiny-math.yaml").is_file() and len(list(math_eval.glob("*.jsonl"))) == 7


def test_wheel_ships_configs_model_and_data_under_vigor_cli(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("vigor-")}
    assert top == {"vigor_cli"}, f"top-level entries besides vigor_cli: {top}"
    configs = {p.name for p in (ROOT / "configs").glob("*.yaml")} | {"__init__.py"}
    assert {n.removeprefix("vigor_cli/configs/") for n in names if n.startswith("vigor_cli/configs/")} == configs
    data = {n.removeprefix("vigor_cli/data/math-eval/") for n in names if n.startswith("vigor_cli/data/math-eval/")}
    assert data == {f"{b}.jsonl" for b in ("math500", "aime24", "amc23", "gaokao2023en", "minerva_math",
                                            "olympiadbench", "gsm8k")} | {"README.md"}
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert f"vigor_cli/assets/tiny/{name}" in names
    for module in ("verifiers/math.py", "verifiers/math_answers.py", "verifiers/code.py", "sandbox/__init__.py"):
        assert f"vigor_cli/{module}" in names
    with zipfile.ZipFile(wheel) as z:
        dist_info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert z.read(dist_info).decode().split() == ["vigor_cli"]
        assert z.read("vigor_cli/configs/tiny-math.yaml") == (ROOT / "configs" / "tiny-math.yaml").read_bytes()


def test_venv_imports_the_wheel_and_no_top_level_verifiers_or_sandbox(venv):
    res = run([str(venv["python"]), "-c", IMPORTS.replace("math_answers", "math")], cwd=venv["work"],
              env=venv["env"])
    paths = [Path(line).resolve() for line in res.stdout.split()]
    site = venv["root"].resolve()
    for p in paths:
        assert site in p.parents, f"{p} is not the wheel's copy (venv {site})"
        assert ROOT not in p.parents
    assert (paths[3] / "tiny-math.yaml").is_file() and not paths[3].is_symlink()
    assert len(list(paths[4].glob("*.jsonl"))) == 7
    for name in ("verifiers", "sandbox"):
        res = subprocess.run([str(venv["python"]), "-c", f"import {name}; print({name}.__file__)"],
                             cwd=venv["work"], env=venv["env"], capture_output=True, text=True)
        base = subprocess.run([sys.executable, "-I", "-c", f"import {name}"], cwd=venv["work"],
                              capture_output=True, text=True)
        if base.returncode == 0:  # a distribution of that name in the base environment
            assert site not in Path(res.stdout.strip()).resolve().parents, f"the wheel installed {name}"
        else:
            assert res.returncode != 0 and f"No module named '{name}'" in res.stderr, res.stdout


def test_bare_vigor_train_from_the_wheel_runs_the_bundled_tiny_config(venv):
    """`vigor train --steps 2` in a folder outside the checkout: the bundled tiny-math config
    (not the GPU-sized built-in defaults), the bundled model, a run directory there."""
    res = run([str(venv["vigor"]), "train", "--steps", "2"], cwd=venv["work"], env=venv["env"], timeout=900)
    assert "held-out accuracy" in res.stdout
    (run_dir,) = (venv["work"] / "runs").iterdir()
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    from vigor_cli.commands.train import DEFAULT_CONFIG
    from vigor_cli.settings import build_config

    expected = build_config(DEFAULT_CONFIG, overrides={"train.steps": 2}).model_dump(mode="json")
    for cfg in (saved, expected):
        cfg["train"].pop("run_name", None)
    assert saved == expected  # the same resolved config as a bare `vigor train` in the checkout
    assert saved["model"]["name_or_path"] == "tiny" and saved["train"]["prompts_per_step"] == 64
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and 0.0 <= summary["final_accuracy"] <= 1.0
    # the start accuracy of the bundled model (README: greedy 0.500 on the held-out set)
    assert summary["start_accuracy"] == pytest.approx(0.5, abs=0.02)


def test_eval_from_the_wheel_reads_the_bundled_math_files(venv):
    out = venv["work"] / "eval.json"
    run([str(venv["vigor"]), "eval", "tiny", "--benchmarks", "math500,aime24", "--limit", "2", "--n", "1",
         "--temperature", "0", "--max-new-tokens", "4", "--engine", "hf", "--output", str(out)],
        cwd=venv["work"], env=venv["env"])
    sets = json.loads(out.read_text())["sets"]
    assert {name: entry["metrics"]["problems"] for name, entry in sets.items()} == {"math500": 2, "aime24": 2}


def test_unknown_config_from_the_wheel_lists_the_bundled_ones(venv):
    """Outside the checkout a --config that is neither a file nor a bundled config is one error
    line naming it and the bundled configs, exit 2."""
    res = subprocess.run([str(venv["vigor"]), "train", "--config", "configs/nope.yaml"], cwd=venv["work"],
                         env=venv["env"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "configs/nope.yaml" in res.stderr and "tiny-code.yaml" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
