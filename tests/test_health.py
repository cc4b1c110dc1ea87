"""Health checks (vigor_cli/train/health.py): the numbers, the windows, the lines, the state."""

from __future__ import annotations

import math
import pytest

from vigor_cli.train import health
from vigor_cli.config import HEALTH_DEFAULTS, HealthConfig
from vigor_cli.settings import build_config
from vigor_cli.rollout.base import Rollout
from vigor_cli.train.rollout_core import Sample


def s(uid: str, text: str, reward: float | None = 1.0, n_tokens: int = 5, truncated: bool = False) -> Sample:
    """A rollout as the rollout core hands it to the checks."""
    return Sample(uid, Rollout(list(range(n_tokens)), [0.0] * n_tokens, text, truncated), reward, "", 0)


PROMPTS = {u: health.PromptInfo(tokens=10) for u in "abcd"}


def cfg(*sets: str):
    return build_config(None, sets=list(sets))


def test_every_check_has_a_config_rule_and_back():
    assert set(health.CHECKS) == set(HEALTH_DEFAULTS) == {
        n for n in HealthConfig.model_fields if n not in ("enabled", "strict")}


def test_measure_counts_what_each_check_reads():
    samples = [
        s("a", "x", 1.0), s("a", "x", 1.0), s("a", "y", 1.0), s("a", "", 1.0, n_tokens=0),   # zero-var group
        s("b", "p", 0.0, truncated=True), s("b", "q", 1.0, truncated=True),                 # signal
        s("c", "r", None), s("c", "t", 0.0),                                                # one scored: no group
        s("d", "same", 0.0), s("d", "same", 1.0),                                           # all one text
    ]
    m = health.measure(samples, PROMPTS, max_new_tokens=5, context=None,
                       update={"losses/kl": 0.2, "losses/clipfrac_low": 0.1, "losses/clipfrac_high": 0.05})
    assert m["truncated"] == pytest.approx(2 / 10)
    assert m["empty"] == pytest.approx(1 / 10)
    assert m["zero_variance"] == pytest.approx(1 / 3)      # a flat, b and d not; c has one scored reward
    assert m["zero_variance_rollouts"] == pytest.approx(4 / 10)
    assert m["identical"] == pytest.approx(1 / 4)          # d's two rollouts are one text
    assert m["constant_reward"] == 0.0
    # texts not known here (another rank's on the TRL path) are left out of the text checks
    hidden = health.measure(samples, PROMPTS, max_new_tokens=5, context=None,
                            text=lambda x: None if x.uid == "d" else x.rollout.text)
    assert hidden["identical"] == 0.0 and hidden["empty"] == pytest.approx(1 / 8)
    assert m["kl"] == 0.2 and m["clipfrac"] == pytest.approx(0.15)


def test_constant_reward_and_context_and_template_shares():
    samples = [s(u, f"t{i}", 0.0) for u in "ab" for i in range(3)]
    prompts = {"a": health.PromptInfo(tokens=100, templated=False), "b": health.PromptInfo(tokens=10)}
    m = health.measure(samples, prompts, max_new_tokens=50, context=128)
    assert m["constant_reward"] == 1.0 and m["reward_value"] == 0.0
    assert m["prompt_cut"] == 0.5 and m["chat_template"] == 0.5
    assert health.measure(samples, prompts, max_new_tokens=50, context=None)["prompt_cut"] == 0.0


def test_a_condition_speaks_after_its_window_once_and_again_after_it_clears():
    mon = health.HealthMonitor(cfg("health.truncated.steps=2"))
    cut = {**_quiet(), "truncated": 0.94}
    lines = []
    for step, m in enumerate([cut, cut, cut, _quiet(), cut, cut], start=1):
        alerts, metrics = mon.observe(step, m)
        lines += [(step, a.line) for a in alerts]
        assert metrics["health/truncated"] == m["truncated"]
        assert metrics["health/truncated/alert"] == (1.0 if step in (2, 3, 6) else 0.0)
    assert [st for st, _ in lines] == [2, 6]
    assert lines[0][1].startswith("steps 1\u20132: 94 % of completions hit sampling.max_new_tokens=1024")
    assert "grpo.mask_truncated" in lines[0][1]


def test_zero_variance_line_names_the_temperature_when_it_is_low():
    mon = health.HealthMonitor(cfg("sampling.temperature=0.05", "health.zero_variance.steps=1"))
    alerts, _ = mon.observe(3, {**_quiet(), "zero_variance": 1.0, "zero_variance_rollouts": 1.0})
    assert alerts[0].line == ("step 3: every group has zero reward variance, 100 % of rollouts carry no "
                              "gradient: at sampling.temperature=0.05; raise the temperature")


def test_disabled_checks_log_values_but_never_speak():
    for sets in (["health.enabled=false"], ["health.truncated.steps=0"]):
        mon = health.HealthMonitor(cfg(*sets))
        for step in range(1, 5):
            alerts, metrics = mon.observe(step, {**_quiet(), "truncated": 1.0})
            assert not [a for a in alerts if a.check == "truncated"]
            assert metrics["health/truncated"] == 1.0 and metrics["health/truncated/alert"] == 0.0


def test_strict_marks_the_alert_fatal():
    mon = health.HealthMonitor(cfg("health.strict=true", "health.empty.steps=1"))
    alerts, _ = mon.observe(1, {**_quiet(), "empty": 1.0})
    assert [a.fatal for a in alerts] == [True]


def test_jumps_need_history_and_a_floor():
    mon = health.HealthMonitor(cfg())
    for step, kl in enumerate([0.02, 0.02, 0.03, 0.02], start=1):
        alerts, metrics = mon.observe(step, {**_quiet(), "kl": kl})
        assert not alerts
    alerts, metrics = mon.observe(5, {**_quiet(), "kl": 0.5})
    assert metrics["health/kl_jump"] == pytest.approx(0.5 / 0.02)
    assert [a.check for a in alerts] == ["kl_jump"] and "grpo.learning_rate" in alerts[0].line
    quiet = health.HealthMonitor(cfg())
    for step, kl in enumerate([1e-6, 1e-6, 1e-6, 1e-3], start=1):  # a big ratio under the floor
        assert not quiet.observe(step, {**_quiet(), "kl": kl})[0]


def test_state_round_trip_continues_the_same_way():
    a = health.HealthMonitor(cfg())
    cut = {**_quiet(), "truncated": 1.0}
    a.observe(1, cut)
    b = health.HealthMonitor(cfg())
    b.load_state_dict(a.state_dict())
    assert [x.line for x in a.observe(2, cut)[0]] == [x.line for x in b.observe(2, cut)[0]] != []


def test_template_suffix_tells_templated_prompts_apart():
    from vigor_cli.model.loading import load_tokenizer

    tok = load_tokenizer(cfg().model)
    assert health.template_suffix(tok) is None  # the tiny tokenizer has no chat template
    assert health.templated("anything", None)
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    suffix = health.template_suffix(tok)
    assert suffix == "<|end|><|assistant|>"
    rendered = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                       add_generation_prompt=True)
    assert health.templated(rendered, suffix) and not health.templated("2+2?", suffix)


def test_preflight_lines():
    c = cfg("sampling.max_new_tokens=16", "model.name_or_path=org/Some-7B-Instruct")
    lines = health.preflight(c, [10, 200, 20], context=128, has_template=False,
                             answer_lengths=[5] * 18 + [40, 50])
    assert len(lines) == 3  # prompts left out for their length: the data's own line (train_data.py)
    assert "1 of 3 training prompts plus sampling.max_new_tokens=16 exceed the model's context (128 tokens)" in lines[0]
    assert "no chat template" in lines[1]
    assert "95th percentile" in lines[2] and "(40 tokens)" in lines[2]
    assert health.preflight(cfg(), [10, 20], context=2048, answer_lengths=[3, 4]) == []


def _quiet() -> dict[str, float]:
    return {"truncated": 0.0, "empty": 0.0, "zero_variance": 0.0, "zero_variance_rollouts": 0.0,
            "identical": 0.0, "constant_reward": 0.0, "reward_value": 0.0, "prompt_cut": 0.0,
            "chat_template": 0.0, "unscored": 0.0, "kl": 0.0, "clipfrac": 0.0}


def test_inf_ratio_is_logged_finite():
    mon = health.HealthMonitor(cfg())
    for step in range(1, 4):
        mon.observe(step, _quiet())
    alerts, metrics = mon.observe(4, {**_quiet(), "clipfrac": 0.3})
    assert math.isfinite(metrics["health/clip_jump"]) and [a.check for a in alerts] == ["clip_jump"]
    assert "from zero" in alerts[0].line


def test_the_health_page_lists_every_check_with_its_defaults():
    from pathlib import Path

    section = (Path(__file__).resolve().parents[1] / "docs" / "health.md").read_text(encoding="utf-8")
    for name, rule in HEALTH_DEFAULTS.items():
        row = next((line for line in section.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[2]) == rule["threshold"] and int(cells[3]) == rule["steps"], row
