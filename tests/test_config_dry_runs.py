"""Every bundled config dry-runs: `vigor train --config C --dry-run` for each file in configs/,
with model.name_or_path set to a folder that holds only that model's config.json (the hub is
out of reach here), exits 0 and prints the memory plan. A new config whose model has no
config.json under tests/fixtures/model_configs/ fails here until one is added."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
FIXTURES = REPO / "tests" / "fixtures" / "model_configs"
TINY = REPO / "vigor_cli" / "assets" / "tiny"


def _model_config_json(name_or_path: str) -> Path:
    """The config.json of a config's model: the bundled tiny model's, or the fixture named as
    the hub id's last part (Qwen/Qwen3-8B -> tests/fixtures/model_configs/Qwen3-8B). The
    tiny agent (`vigor make-tiny --recipe tools --out tiny-agent-model`) has the tiny model's shape."""
    if name_or_path in ("tiny", "tiny-agent-model"):
        return TINY / "config.json"
    found = FIXTURES / name_or_path.rstrip("/").split("/")[-1] / "config.json"
    assert found.is_file(), f"{name_or_path}: add its public config.json as {found.relative_to(REPO)}"
    return found


@pytest.fixture
def offline(monkeypatch):
    """The hub's clients read only their caches, as on a machine with no network (the same
    result whether or not this one has one)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_configs_are_found():
    names = {p.name for p in CONFIGS}
    assert {"tiny-math.yaml", "qwen3-8b-lcb.yaml", "qwen2.5-3b-math-vigor.yaml"} <= names
    assert len(CONFIGS) >= 9


@pytest.mark.parametrize("config", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_bundled_config_dry_runs(config, tmp_path, vigor, offline):
    model = yaml.safe_load(config.read_text())["model"]["name_or_path"]
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(_model_config_json(model), folder / "config.json")
    code, out, err = vigor("train", "--config", str(config), "--dry-run",
                           "--set", f"model.name_or_path={folder}")
    assert code == 0, f"{config.name}: exit {code}\n{out[-2000:]}\n{err[-2000:]}"
    assert "Traceback" not in out + err
    assert "peak (with resident)" in out  # the memory plan was printed
    assert "CPU run (not refused)" in out or "fits" in out
    assert [p.name for p in folder.iterdir()] == ["config.json"]  # a dry run writes nothing
    if yaml.safe_load(config.read_text())["task"]["name"] == "code":
        assert "code protocol" in out  # the code task's preview, which once crashed


def test_every_task_preview_takes_a_tokenizer():
    """The dry run gives each task's preview the config and a tokenizer (or None): every
    registered preview takes both."""
    from vigor_cli.config import TaskConfig
    from vigor_cli.settings import build_config
    from vigor_cli.tasks import PREVIEWS, preview_task
    from vigor_cli.model.loading import load_tokenizer

    tokenizer = load_tokenizer(build_config().model)
    assert "code" in PREVIEWS
    for tok in (None, tokenizer):
        lines = preview_task(TaskConfig(name="code"), tok)
        assert lines and lines[0].startswith("code protocol ")


def test_a_folder_with_config_json_alone_has_no_tokenizer(tmp_path):
    """transformers builds an empty tokenizer from a config.json alone (every prompt encodes to
    nothing); loading one is refused in one line naming the key."""
    from vigor_cli.errors import UserError
    from vigor_cli.model.loading import load_tokenizer
    from vigor_cli.settings import build_config

    shutil.copy(TINY / "config.json", tmp_path / "config.json")
    cfg = build_config(sets=[f"model.name_or_path={tmp_path}"])
    with pytest.raises(UserError, match=r"model.name_or_path=.*encodes text to no tokens"):
        load_tokenizer(cfg.model)
