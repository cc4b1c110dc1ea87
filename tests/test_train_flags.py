"""`vigor train`'s flags come from one table (commands/train.py FLAGS): each entry's key gives
the flag its type, bounds, help, shown default, --resume rule and the name in error messages.
These tests walk the table, so a new entry is covered without a new test."""

from __future__ import annotations

import re
import typing

import pytest

from vigor_cli.commands import options as opt
from vigor_cli.commands import train as train_cmd
from vigor_cli.commands.train import FLAGS
from vigor_cli.config import describe
from vigor_cli.settings import known_names

KEYS = {key for key, _, _ in describe()}


def sample(flag) -> tuple[str, object]:
    """A valid command-line value for the flag (other than the default where it can) and the
    value its key should then hold."""
    kind = train_cmd._value_type(flag.key)
    if kind is bool:
        return "", True
    if flag.key == "train.report_to":  # a list of registered names, comma-separated on the line
        return "tensorboard,trackio", ["tensorboard", "trackio"]
    if flag.key == "task.rewards":
        return "math", ["math"]
    if flag.key == "task.reward_weights":  # one per reward (NEEDS gives one)
        return "0.5", [0.5]
    if flag.key == "task.env":  # a built-in environment of any task
        return "retry", "retry"
    if flag.names:
        name = known_names(flag.names).split(", ")[-1 if flag.names != "engine" else 1]  # engine: hf
        return name, name
    choices = opt.key_choices(flag.key)
    if choices:
        return choices[-1], choices[-1]
    bounds = opt.key_bounds(flag.key)
    if kind is int:
        low = int(bounds.low or 0) + (1 if bounds.low_open else 0)
        return str(low + 1), low + 1
    if kind is float:
        value = (bounds.low or 0) + ((bounds.high or 2) - (bounds.low or 0)) / 2
        return repr(value), value
    if flag.key == "model.name_or_path":  # a local model folder (not 'tiny', the default)
        from vigor_cli.model.tiny import TINY_DIR

        return str(TINY_DIR), str(TINY_DIR)
    return "sample-name", "sample-name"


def test_every_flag_sets_a_documented_key_once():
    documented = [f for f in FLAGS if f.key in KEYS or f.key.rsplit(".", 1)[0] in KEYS]  # or a mapping's entry
    assert documented == list(FLAGS), [f.key for f in FLAGS if f not in documented]
    assert len({f.key for f in FLAGS}) == len(FLAGS) and len({f.name for f in FLAGS}) == len(FLAGS)


_DATA, _REWARD = ["--data", "d.jsonl"], ["--reward", "math"]
NEEDS = {"model.load_in_4bit": ["--set", "model.lora.enabled=true"],
         "task.name": _DATA + _REWARD, "task.data": _REWARD, "task.rewards": _DATA,
         "task.max_turns": _DATA + _REWARD + ["--env", "retry"]}
for _f in FLAGS:  # the custom task's other keys need its data and a reward (dry-run is stubbed)
    if _f.key.startswith("task.") and _f.key not in NEEDS:
        NEEDS[_f.key] = _DATA + _REWARD
"""Other keys a flag's sample value needs (a rule across keys)."""


@pytest.mark.parametrize("flag", FLAGS, ids=lambda f: f.name)
def test_each_flag_sets_its_key(vigor, monkeypatch, tmp_path, flag):
    seen = {}
    monkeypatch.setattr(train_cmd, "_dry_run", lambda cfg, console: seen.setdefault("cfg", cfg))
    text, value = sample(flag)
    if flag.key == "train.output_dir":
        text = value = str(tmp_path / "runs")
    code, _, err = vigor("train", "--dry-run", flag.name, *([text] if text != "" else []), *NEEDS.get(flag.key, []))
    assert code == 0, err
    node = seen["cfg"]
    for part in flag.key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    assert node == value, (flag.key, node, value)


@pytest.mark.parametrize("flag", [f for f in FLAGS if not f.with_resume], ids=lambda f: f.name)
def test_resume_refuses_every_flag_but_the_allowed_ones(vigor, flag, tmp_path):
    text, _ = sample(flag)
    code, _, err = vigor("train", "--resume", str(tmp_path), flag.name, *([text] if text else []))
    assert code == 2 and "--resume continues the saved config" in err and flag.name in err, err
    assert "only --steps may change" in err


def test_help_shows_each_flag_with_its_type_default_and_description(monkeypatch):
    """Every table entry is in `vigor train --help` with its key, its description's first words,
    its type and its default (the built-in one, and the bundled tiny config's where it differs)."""
    from typer.testing import CliRunner

    from vigor_cli.cli import app

    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.setenv("TERMINAL_WIDTH", "1000")
    out = CliRunner().invoke(app, ["train", "--help"], prog_name="vigor").output
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│ --")}
    for flag in FLAGS:
        row = rows[flag.name]
        kind = train_cmd._value_type(flag.key)
        if kind is bool:  # a switch takes no value: no type shown (it read '<bool>')
            assert "<" not in row.split(flag.key)[0], row
        else:
            assert (f"<list[{kind.__name__}]>" if flag.multiple else f"<{kind.__name__}>") in row, row
        assert f"{flag.key}: " in row and opt.key_field(flag.key).description[:40] in row, row
        assert f"[default: ({train_cmd._default_text(flag.key)})]" in row, row
    assert "[default: (100; tiny-math.yaml: 150)]" in rows["--steps"]
    assert "Rollout allocation strategy: auto (the default" in rows["--strategy"]  # the names, by name


def test_a_bad_value_names_the_flag(vigor):
    code, _, err = vigor("train", "--run-name", "a/b", "--dry-run")
    assert code == 2 and "--run-name a/b (train.run_name)" in err, err
    code, _, err = vigor("train", "--strategy", "best", "--dry-run")
    assert code == 2 and "--strategy best (allocation.strategy)" in err and "unknown strategy 'best'" in err, err


def test_value_types_follow_the_keys():
    assert train_cmd._value_type("train.steps") is int
    assert train_cmd._value_type("train.gpu_memory_gib") is float  # Optional[float]
    assert train_cmd._value_type("model.load_in_4bit") is bool
    assert train_cmd._value_type("model.device") is str  # a Literal: its choices are checked
    assert train_cmd._value_type("task.eval_sets") is str  # a list: read as YAML, like --set
    flag = train_cmd.Flag("--eval-sets", "task.eval_sets")
    assert train_cmd._flag_value(flag, "[math500, aime24]") == ["math500", "aime24"]
    assert typing.get_origin(opt.key_field("task.eval_sets").annotation) is list


def test_version(vigor):
    import importlib.metadata

    code, out, _ = vigor("--version")
    assert code == 0 and out.strip() == f"vigor {importlib.metadata.version('vigor')}"


def test_strategy_help_names_every_registered_strategy(vigor, monkeypatch):
    """`vigor train --help` names each strategy by name in --strategy's own text, the default first."""
    from vigor_cli.allocation import registry
    from vigor_cli.commands.flags import help_text

    strategy = next(f for f in FLAGS if f.name == "--strategy")
    text = help_text(strategy)
    for name in registry.names():
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), name
    assert text.index("auto") < text.index("grpo")
