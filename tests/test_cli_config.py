"""The CLI skeleton and the typed config: help, clear errors, overrides."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cli_runner import run_vigor
from vigor_cli.config import ConfigError, RunConfig, describe
from vigor_cli.settings import build_config


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_vigor(*args, env=env)  # in this process (tests/cli_runner.py)


def listed_commands(help_text: str) -> list[str]:
    """The names in the "Commands" section of a --help page (rich panel or plain click),
    in order; the description lines above it do not count."""
    names, inside = [], False
    for line in help_text.splitlines():
        row = line.strip().strip("│").strip()
        if not inside:
            inside = row.startswith("╭─ Commands") or row == "Commands:"
            continue
        if not row or row.startswith("╰"):
            break
        body = line.lstrip()[1:] if line.lstrip().startswith("│") else line[1:]
        if body.startswith(" ") and not body.startswith("  "):  # a name, not a wrapped description
            names.append(row.split()[0])
    return names


def test_help_lists_every_command():
    import typer

    from vigor_cli.cli import app

    env = {"COLUMNS": "200"}
    out = run_cli("--help", env=env)
    assert out.returncode == 0
    listed = listed_commands(out.stdout)
    registered = sorted(typer.main.get_command(app).commands)
    assert sorted(listed) == registered
    assert set(listed) == {"train", "eval", "inspect-allocation", "report", "simulate", "verify", "make-tiny", "probe",
                           "export"}
    verify = run_cli("verify", "--help", env=env)
    assert verify.returncode == 0 and sorted(listed_commands(verify.stdout)) == ["code", "math"]


def test_listed_commands_reads_only_the_command_list():
    """A command named only in the app's description is not listed."""
    page = (" Usage: vigor [OPTIONS] COMMAND\n\n train or eval, then report.\n\n"
            "╭─ Commands ──────────╮\n│ train   Train.       │\n│ eval    Evaluate a   │\n"
            "│         model.       │\n╰─────────────────────╯\n")
    assert listed_commands(page) == ["train", "eval"]
    plain = ("Usage: vigor\n\n  report things\n\nCommands:\n  train  Train.\n  eval   Evaluate a\n"
             "         model.\n")
    assert listed_commands(plain) == ["train", "eval"]


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
    assert cfg.allocation.strategy in ("vigor", "grpo", "auto")
    if path.name == "tiny-guess.yaml":  # the episodes study: grpo keeps every arm's budget the same
        assert cfg.allocation.strategy == "grpo" and cfg.task.env == "higher-lower"
    elif path.name == "tiny-agent.yaml":  # the tiny agent's benchmark: the same budget with and without the tool
        assert cfg.allocation.strategy == "grpo" and cfg.task.env == "calculator"
    elif path.name.startswith("tiny"):
        assert cfg.allocation.strategy == "auto"  # the study's choice (BENCHMARKS.md)
    if "vigor" in path.name or (path.name.startswith("tiny") and cfg.allocation.strategy == "auto"):
        a = cfg.allocation
        assert (a.rounds, a.m0, a.gamma, a.alpha) == (4, 2, 2.0, 0.5)


def test_config_resolves_to_a_bundled_file_by_name(tmp_path, monkeypatch):
    """--config as given when the file exists; else the bundled config of that name, from any
    folder (what a wheel install has); else one error naming it and the bundled ones."""
    from vigor_cli.commands.train import CONFIGS, resolve_config
    from vigor_cli.errors import UserError

    monkeypatch.chdir(tmp_path)
    for given in ("configs/tiny-code.yaml", "tiny-code.yaml", "tiny-code"):
        assert resolve_config(Path(given)) == CONFIGS / "tiny-code.yaml"
    own = tmp_path / "configs" / "tiny-code.yaml"
    own.parent.mkdir()
    own.write_text("train:\n  steps: 3\n")
    assert resolve_config(Path("configs/tiny-code.yaml")) == Path("configs/tiny-code.yaml")  # a local file wins
    with pytest.raises(UserError, match=r"--config elsewhere/tiny-code.yaml: no such file.*tiny-math.yaml"):
        resolve_config(Path("elsewhere/tiny-code.yaml"))
    with pytest.raises(UserError, match="--config nope: no such file"):
        resolve_config(Path("nope"))
