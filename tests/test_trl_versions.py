"""Which TRL releases the TRL path runs on (vigor_cli/integrations/trl_versions.py): the `trl`
extra's range, the seams each recorded release offers (tests/fixtures/trl_signatures.json, read
from the releases' wheels by scripts/extract_trl_signatures.py), the installed TRL against its
own record, and the one-line refusal of a release whose hooks moved."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from vigor_cli.integrations import trl_versions as tv

ROOT = Path(__file__).resolve().parents[1]
RECORDS = json.loads((ROOT / "tests" / "fixtures" / "trl_signatures.json").read_text())
RANGE = SpecifierSet(tv.EXTRA.removeprefix("trl"))
SUPPORTED = [v for v in RECORDS if Version(v) in RANGE]


def test_the_trl_extra_is_the_range_the_seams_module_names():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert tv.EXTRA in extras["trl"] and tv.EXTRA in extras["test"]
    # the upper bound admits only what was read and recorded: 1.17-1.19 could not be found here
    # (the package index serves 1.16.0 at most; the GitHub snapshot is 1.10.0.dev0)
    assert Version("1.16.0") in RANGE and Version("1.17.0") not in RANGE and Version("1.19.0") not in RANGE
    assert all(v in RECORDS and Version(v) in RANGE for v in tv.RECORDED)
    lower = min((s for s in RANGE if s.operator == ">="), key=lambda s: Version(s.version))
    assert Version(tv.OLDEST) == Version(lower.version) and tv.OLDEST in SUPPORTED  # the oldest kept is recorded
    assert all((ROOT / t).is_file() for t in tv.TRL_TESTS)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "v.OLDEST" in ci and "v.TRL_TESTS" in ci  # CI runs the TRL tests on the oldest release too


@pytest.mark.parametrize("version", SUPPORTED)
def test_every_recorded_supported_release_has_the_seams_vigor_uses(version):
    assert tv.problems(RECORDS[version]) == []
    assert set(RECORDS[version]["loss_types"]) <= set(tv.LOSS_KINDS)  # every loss type's normaliser is known
    assert len(RECORDS[version]["loss_types"]) == 8


@pytest.mark.parametrize("version, why", [
    ("1.15.0", "its fused output layer needs Triton"),
    ("1.14.2", "GRPOTrainer._get_per_token_logps_and_entropies takes (self, model, *args"),
    ("1.12.0", "GRPOTrainer._generate_single_turn takes (self, prompt_ids, images, multimodal_fields, has_tool_images)"),
])
def test_older_releases_fail_the_check_naming_the_seam_that_moved(version, why):
    """1.15.0 has the hooks but its fused output layer imports Triton unconditionally: on this
    CPU build of torch TRL's own GRPOTrainer cannot compute a loss (its 1.15.0 run here: every
    update failed in TRL's kernel, the rest passed)."""
    assert Version(version) not in RANGE
    found = tv.problems(RECORDS[version])
    assert found and found[0].startswith(why)
    assert any("fused output layer" in p for p in found)


def test_the_installed_trl_matches_its_record():
    pytest.importorskip("trl")
    version, live = tv.installed()
    assert version in RECORDS, f"trl {version} has no record: run scripts/extract_trl_signatures.py on its wheel"
    record = {k: v for k, v in RECORDS[version].items() if k != "source"}
    assert live == record
    tv.check_installed()  # and it passes


def test_a_release_whose_hooks_moved_is_refused_in_one_line(monkeypatch):
    pytest.importorskip("trl")
    # a recorded version whose source has 1.14.2's hooks (a patched install): the seams are read, not the number
    monkeypatch.setattr(tv, "installed", lambda: ("1.16.0", RECORDS["1.14.2"]))
    with pytest.raises(tv.TRLVersionError) as e:
        tv.check_installed()
    message = str(e.value)
    assert "\n" not in message and message.startswith("trl 1.16.0: GRPOTrainer._get_per_token_logps_and_entropies")
    assert tv.EXTRA in message
    from vigor_cli.errors import user_message

    assert user_message(e.value) is not None  # a user's error: one line, exit 2, not a traceback


def test_every_loss_kind_is_one_the_update_rescales_by():
    from vigor_cli.integrations import trl_update

    assert set(tv.LOSS_KINDS.values()) == {"row mean", "rank token mean", "token mean"}
    assert set(trl_update.ROW_MEAN_LOSSES) | set(trl_update.TOKEN_MEAN_PER_RANK) < set(tv.LOSS_KINDS)


def test_the_vigor_config_sets_what_a_newer_trls_defaults_would_change(tmp_path):
    """TRL 1.19 turned sequence-level importance sampling on by default: trl_args passes every
    GRPOConfig default vigor's training depends on, so a release's new default changes nothing."""
    pytest.importorskip("trl")
    from vigor_cli.integrations.trl import trl_args
    from vigor_cli.settings import build_config

    args = trl_args(build_config(sets=["grpo.importance_sampling_level=sequence"]), tmp_path, use_cpu=True)
    assert args.importance_sampling_level == "sequence"
    assert trl_args(build_config(), tmp_path, use_cpu=True).importance_sampling_level == "token"


def test_a_release_vigor_has_not_recorded_is_refused_in_one_line(monkeypatch):
    """1.17's seams may match 1.16's, but nobody read it: the trainer refuses it rather than
    train on meaning nobody checked."""
    pytest.importorskip("trl")
    monkeypatch.setattr(tv, "installed", lambda: ("1.17.0", RECORDS["1.16.0"]))
    with pytest.raises(tv.TRLVersionError) as e:
        tv.check_installed()
    message = str(e.value)
    assert "\n" not in message and message.startswith("trl 1.17.0: a release vigor has not read and recorded")
    assert "recorded: 1.16.0" in message and tv.EXTRA in message


@pytest.mark.parametrize("change, why", [
    (lambda r: r["metrics"].remove("clip_ratio/low_mean"), "GRPOTrainer no longer logs clip_ratio/low_mean"),
    (lambda r: r["metrics"].remove("completions/mean_length"), "GRPOTrainer no longer logs completions/mean_length"),
    (lambda r: r["normalisers"].update(dapo="loss = (per_token_loss * mask).sum() / mask.sum()"),
     "_compute_loss normalises dapo otherwise"),
    (lambda r: r["normalisers"].update(grpo=r["normalisers"]["bnpo"]), "_compute_loss normalises grpo otherwise"),
    (lambda r: r.update(metric_mean=r["metric_mean"].replace("float(x.shape[0])", "float((mask.sum(-1) > 0).sum())")),
     "_compute_loss averages its metrics over the ranks otherwise"),
])
def test_a_recorded_release_whose_meaning_moved_is_refused_naming_it(monkeypatch, change, why):
    """The check reads meaning, not only structure: a renamed metric, a changed normaliser or
    another way of averaging the metrics over the ranks stops the trainer in one line."""
    pytest.importorskip("trl")
    record = json.loads(json.dumps(RECORDS["1.16.0"]))
    change(record)
    assert tv.problems(RECORDS["1.16.0"]) == [] and tv.problems(record)[0].startswith(why)
    monkeypatch.setattr(tv, "installed", lambda: ("1.16.0", record))
    with pytest.raises(tv.TRLVersionError) as e:
        tv.check_installed()
    assert str(e.value).startswith(f"trl 1.16.0: {why}") and "\n" not in str(e.value)


def test_the_metric_names_checked_are_the_ones_the_path_reads():
    pytest.importorskip("trl")
    from vigor_cli.integrations import trl_metrics, trl_update

    read = {*trl_metrics.COMPLETION_METRICS, "frac_reward_zero_std", *trl_update.TOKEN_METRICS,
            *trl_update.RATIO_METRICS, *trl_update.EXTREMES, *trl_update.ROW_COUNTED}
    assert read == set(tv.METRICS_READ)
    assert set(tv.NORMALISERS) == set(tv.LOSS_KINDS)
