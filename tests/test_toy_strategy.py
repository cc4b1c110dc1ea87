"""A strategy registered from outside the package trains with the real trainer: adding a
strategy touches only its own module (tests/extensions/top_up.py) and its test (this file)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from test_trainer import quiet, tiny_sets
from vigor_cli.allocation import make_allocator, registry
from vigor_cli.config import ConfigError
from vigor_cli.settings import build_config, known_names
from vigor_cli.study.simulate import SimSettings, simulate

MODULE = Path(__file__).parent / "extensions" / "top_up.py"


@pytest.fixture
def top_up():
    """Import the extension as a user would (its own file, not part of vigor_cli); unregister after."""
    assert "top-up" not in registry.REGISTRY
    spec = importlib.util.spec_from_file_location("vigor_ext_top_up", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        registry.unregister("top-up")


def test_unknown_before_registration():
    with pytest.raises(ConfigError, match="unknown strategy 'top-up'"):
        build_config(sets=["allocation.strategy=top-up"])


def test_every_name_list_sees_it(top_up):
    assert "top-up" in registry.names() and "top-up" in registry.budgeted()
    assert "top-up" in known_names("strategy")  # --strategy help, simulate's help
    from vigor_cli.allocation import STRATEGIES

    assert STRATEGIES[-1] == "top-up"
    cfg = build_config(sets=["allocation.strategy=top-up", "allocation.top-up.first=3"])
    assert isinstance(make_allocator(cfg.allocation, 4, seed=0), top_up.TopUpAllocator)


@pytest.mark.parametrize("sets, needle", [
    (["allocation.top-up.frist=3"], "unknown config key 'allocation.top-up.frist'"),
    (["allocation.top-up={first: 0}"], "'allocation.top-up.first': Input should be greater than or equal to 1"),
    (["allocation.top-up.first=9", "allocation.budget=64", "train.prompts_per_step=8"],
     "allocation.top-up.first x train.prompts_per_step (9 x 8) exceeds allocation.budget (64)"),
])
def test_its_own_keys_are_validated(top_up, sets, needle):
    with pytest.raises(ConfigError) as e:
        build_config(sets=["allocation.strategy=top-up", *sets])
    assert needle in str(e.value) and str(e.value).startswith("--set ")


def test_simulate_drives_it(top_up):
    cfg = build_config(sets=["allocation.strategy=top-up"]).allocation
    summary = simulate(SimSettings(strategies=("top-up", "grpo"), steps=3, prompts=8), cfg)
    row = summary["strategies"]["top-up"]
    assert row["rollouts_per_step"] <= 8 * 8  # the default budget: rollouts_per_prompt x prompts
    assert row["rollouts_per_round"][0] == 2 * 8  # round 1: top-up.first for every prompt


@pytest.mark.slow
def test_two_training_steps(tmp_path, top_up):
    from vigor_cli.run.directory import RunDir
    from vigor_cli.train.trainer import train

    cfg = build_config(sets=tiny_sets(tmp_path, "top-up", "allocation.strategy=top-up",
                                      "allocation.top-up.first=2"))
    assert cfg.allocation.rollouts_per_prompt == 4  # from the old key group_size=4: budget 16
    summary = train(cfg, out=quiet())
    assert summary["steps"] == 2
    run = RunDir(tmp_path / "top-up")
    rows = [r for r in run.metrics() if "reward/mean" in r]
    records = [json.loads(line) for line in (run.path / "allocation.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and len(rows) == 2
    for row, rec in zip(rows, records):
        assert rec["strategy"] == "top-up" and rec["totals"]["budget"] == 16
        assert rec["rounds"][0] == {"round": 1, "prompts": 4, "rollouts": 8, "kept": rec["rounds"][0]["kept"]}
        assert row["rollouts/step"] == rec["totals"]["rollouts"] <= 16
        mixed = rec["rounds"][0]["kept"] or 4
        assert rec["totals"]["rollouts"] == 8 + (8 // mixed) * mixed
    saved = build_config(run.path / "config.yaml")  # the run's config reads back (and resumes)
    assert saved.allocation.strategy == "top-up" and saved.allocation.section("top-up").first == 2


def test_unregistering_leaves_no_section_behind():
    """After the fixture's cleanup no config grows an allocation.top-up section (a later test
    comparing resolved configs must not see it)."""
    spec = importlib.util.spec_from_file_location("vigor_ext_top_up_2", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "top-up" in build_config().model_dump(mode="json")["allocation"]
    registry.unregister("top-up")
    dumped = build_config().model_dump(mode="json")["allocation"]
    assert "top-up" not in dumped and "top-up" not in registry.names()
