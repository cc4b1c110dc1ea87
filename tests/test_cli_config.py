"""The CLI skeleton and the typed config: help, clear errors, overrides."""

from __future__ import annotations

import subprocess
from pathlib import Path
import sys

import pytest

from vigor_cli.config import ConfigError, RunConfig, build_config, describe


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vigor_cli", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_every_command():
    out = run_cli("--help")
    assert out.returncode == 0
    for cmd in ("train", "eval", "inspect-allocation", "report", "simulate", "verify"):
        assert cmd in out.stdout


def test_defaults_are_documented():
    rows = describe()
    assert len(rows) > 40
    undocumented = [key for key, _, doc in rows if not doc]
    assert undocumented == []


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("allocation:\n  alpha: 0.25\ntrain:\n  steps: 3\n")
    cfg = build_config(p, overrides={"train.seed": 7}, sets=["allocation.rounds=3", "train.steps=5"])
    assert cfg.allocation.alpha == 0.25
    assert cfg.allocation.rounds == 3
    assert cfg.train.steps == 5
    assert cfg.train.seed == 7
    assert RunConfig().allocation.alpha == 0.5


@pytest.mark.parametrize(
    "yaml_text, needle",
    [
        ("allocation:\n  alpah: 0.3\n", "unknown config key 'allocation.alpah'"),
        ("train:\n  steps: many\n", "'train.steps'"),
        ("allocation:\n  strategy: best\n", "'allocation.strategy'"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("allocation: [1\n", "not valid YAML"),
    ],
)
def test_bad_config_names_the_key(tmp_path, yaml_text, needle):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml_text)
    with pytest.raises(ConfigError) as e:
        build_config(p)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_validates(path):
    cfg = build_config(path)
    assert cfg.allocation.strategy in ("vigor", "grpo")
    if "vigor" in path.name or path.name.startswith("tiny"):
        a = cfg.allocation
        assert (a.rounds, a.m0, a.gamma, a.alpha) == (4, 2, 2.0, 0.5)
