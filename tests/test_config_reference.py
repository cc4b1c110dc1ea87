"""docs/config-keys.md is generated from the typed config (vigor_cli.reference.config_keys): it must
equal what the generator writes now, and list every key of a default config with its default."""

from __future__ import annotations

import pytest

from vigor_cli.reference import config_keys as ref


@pytest.fixture(scope="module")
def page() -> str:
    return ref.render()


def leaves(value, prefix):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from leaves(inner, f"{prefix}.{key}")
    else:
        yield prefix, value


def test_the_committed_page_is_what_the_generator_writes(page):
    assert ref.PAGE.read_text(encoding="utf-8") == page, \
        "docs/config-keys.md is stale: run python -m vigor_cli.reference.config_keys"


def test_every_key_of_a_default_config_is_listed_with_its_default(page):
    from vigor_cli.config import RunConfig

    dumped = RunConfig().model_dump()
    listed = {key: default for _, _, table in ref.sections() for key, default, _ in table}
    for section, values in dumped.items():
        assert f"## `{section}`" in page
        for key, value in leaves(values, section):
            assert key in listed, key
            assert listed[key] == ref.shown(value), key
    for strategy in ("knapsack", "auto"):  # a strategy's own section, with its keys
        assert any(key.startswith(f"allocation.{strategy}.") for key in listed), strategy
    assert listed["train.steps"] == "100" and listed["model.lora.enabled"] == "true"


def test_the_check_mode_reports_a_stale_page(tmp_path, monkeypatch, page):
    monkeypatch.setattr(ref, "render", lambda: page)
    written = tmp_path / "config-keys.md"
    monkeypatch.setattr(ref, "PAGE", written)
    assert ref.main(["--check"]) == 1
    assert ref.main([]) == 0 and ref.main(["--check"]) == 0
