"""The package stands on its own: a wheel built from this checkout, installed into a fresh
virtual environment, runs `vigor train` and `vigor eval` from a folder outside the checkout
with the same bundled config, model and benchmark files, and installs no top-level
`verifiers` or `sandbox` module.

The venv sees the system site-packages (torch and the other dependencies are not installed
again; inside a venv, that venv's packages too), so the test checks that its `vigor_cli` is the wheel's copy, not this checkout or an
editable install.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

COPY_IGNORE = shutil.ignore_patterns(".git", "runs", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".venv", "results", "*.whl")


def run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of this checkout (so no build/ or egg-info lands in it)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=COPY_IGNORE)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(src)]
    if importlib.util.find_spec("setuptools") is not None:
        cmd.insert(4, "--no-build-isolation")  # build offline with the setuptools already here
    run(cmd, cwd=base)
    (whl,) = (base / "dist").glob("vigor-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> dict:
    """A fresh venv with the wheel installed; returns its python, its vigor, a work folder
    outside the checkout and the environment to run them in."""
    base = tmp_path_factory.mktemp("venv")
    env_dir = base / "env"
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)], cwd=base)
    python = env_dir / "bin" / "python"
    if sys.prefix != sys.base_prefix:
        # This interpreter is itself a venv (as under .ci/run): --system-site-packages shows
        # the base interpreter's packages, not this venv's, so point the new venv at them too.
        # A plain path line: the .pth files there (an editable vigor) are not run.
        import sysconfig

        theirs = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=base).stdout.strip()
        ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        (Path(theirs) / "outer-env.pth").write_text("".join(f"{p}\n" for p in ours))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env |= {"PATH": f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}", "HF_HUB_OFFLINE": "1",
            "COLUMNS": "200", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
         "--force-reinstall", str(wheel)], cwd=base, env=env)
    work = base / "work"
    work.mkdir()
    return {"python": python, "vigor": env_dir / "bin" / "vigor", "work": work, "env": env, "root": env_dir}


def test_wheel_ships_configs_model_and_data_under_vigor_cli(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("vigor-")}
    assert top == {"vigor_cli"}, f"top-level entries besides vigor_cli: {top}"
    configs = {p.name for p in (ROOT / "configs").glob("*.yaml")}
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
    code = ("import vigor_cli, vigor_cli.verifiers.math, vigor_cli.sandbox\n"
            "from vigor_cli.package_data import CONFIGS_DIR, MATH_EVAL_DIR\n"
            "print(vigor_cli.__file__); print(vigor_cli.verifiers.math.__file__)\n"
            "print(vigor_cli.sandbox.__file__); print(CONFIGS_DIR); print(MATH_EVAL_DIR)")
    res = run([str(venv["python"]), "-c", code], cwd=venv["work"], env=venv["env"])
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
    from vigor_cli.config import build_config

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
