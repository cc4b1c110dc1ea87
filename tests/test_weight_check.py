"""The weight check can fail: an engine that keeps stale weights stops training.

The real trainer runs the bundled tiny model with a real peft LoRA on
tiny-math; its engine is the real ``VLLMEngine`` driving a stand-in LLM that
samples from the weights it actually holds (``tests/vllm_stand_in.py``:
pushed tensors are written into a transformers model, a level-2 sleep
scrambles them, ``reload_weights`` reads the checkpoint back). Each stale
scenario injects one known bug into the real push path.
"""

from __future__ import annotations

import json
import math

import pytest
from vllm_stand_in import WeightedStandInLLM, stand_in_api

import vigor_cli.rollout as rollout_pkg
import vigor_cli.rollout.weights as engine_weights
from vigor_cli.settings import build_config
from vigor_cli.errors import UserError
from vigor_cli.rollout.vllm import VLLMEngine
from vigor_cli.rollout.weight_check import EngineWeightsError, WeightCheckSums, judge
from vigor_cli.train.trainer import train


# --------------------------------------------------------------------------- the rule
def test_rule():
    # correct engine: at noise (0.01) from the policy, the policy 0.05 from the base
    assert judge(0.01, 0.05, 0.05, 100, 0.1).status == "ok"
    # engine on the base: at noise from the base, the policy's distance from the policy
    assert judge(0.05, 0.05, 0.01, 100, 0.1).status == "stale"
    # step 1 (policy = base, LoRA B = 0): cannot tell, and says so rather than passing
    assert judge(0.001, 0.0, 0.001, 100, 0.1).status == "not-discriminating"
    # a LoRA that moved less than twice the engine's noise: cannot tell either way
    assert judge(0.01, 0.015, 0.012, 100, 0.1).status == "not-discriminating"
    assert judge(0.012, 0.015, 0.01, 100, 0.1).status == "not-discriminating"
    # garbage weights: far from both, fails even at step 1
    assert judge(3.0, 0.0, 3.0, 100, 0.1).status == "disagree"
    # far from the policy and nearer the base once discriminating: stale, not just 'disagree'
    assert judge(0.5, 0.5, 0.01, 100, 0.1).status == "stale"
    # top-p < 1: vLLM's renormalised log-probs exceed the policy's by at most ln(1/top_p)
    assert judge(0.12, 0.5, 0.5, 100, 0.1, top_p=0.9).status == "ok"
    assert judge(0.12, 0.5, 0.5, 100, 0.1).status == "disagree"
    assert math.isclose(judge(0, 0, 0, 1, 0.1, top_p=0.9).limit, 0.1 + math.log(1 / 0.9))
    assert judge(0, 0, 0, 0, 0.1).status == "no-tokens"
    sums = WeightCheckSums()
    sums.add([-1.0, -2.0], [-1.1, -2.0], [-1.5, -2.5])
    check = sums.result(0.1)
    assert check.tokens == 2 and math.isclose(check.engine_policy, 0.05)
    assert math.isclose(check.policy_base, 0.45) and math.isclose(check.engine_base, 0.5)
    assert check.status == "ok" and check.code == 1
    with pytest.raises(ValueError):
        sums.add([-1.0], [-1.0, -2.0], [-1.0])
    assert issubclass(EngineWeightsError, UserError)  # one line, exit code 2


@pytest.mark.parametrize("garbage", [float("nan"), float("inf"), float("-inf"), None])
def test_nonfinite_engine_logprobs_fail_the_check_instead_of_reading_not_discriminating(garbage):
    """A NaN made every distance NaN, every comparison false, and the verdict 'not yet
    discriminating': an engine returning garbage passed as a step-1 engine does."""
    for base in ([-1.5, -2.5, -3.0], None):  # with a base model, and unchecked without one
        sums = WeightCheckSums()
        sums.add([-1.0, garbage, -3.0], [-1.0, -2.0, -3.0], base)
        check = sums.result(0.1)
        assert check.status == "nonfinite" and check.failed and check.code == -1
        assert check.nonfinite == 1 and check.tokens == 2 and math.isfinite(check.engine_policy)
        assert check.metrics()["engine/nonfinite_logprobs"] == 1
        assert check.describe().startswith("the engine returned 1 NaN or infinite log-probs")


@pytest.mark.slow
def test_an_engine_returning_nan_logprobs_stops_training_loudly(tmp_path, monkeypatch):
    """The real trainer on the stand-in vLLM engine, a NaN log-prob on each completion's first
    token: the step's update stays finite (those tokens are out of the importance correction,
    counted) and the weight check stops the run naming the NaN."""
    _use_stand_in(monkeypatch)
    real = VLLMEngine.generate

    def generate(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        for r in (r for group in out for r in group if r.token_ids):
            r.logprobs[0] = float("nan")  # every rollout: the update's rows carry one too
        return out

    monkeypatch.setattr(VLLMEngine, "generate", generate)
    with pytest.raises(EngineWeightsError, match=r"^step 1: the engine returned \d+ NaN or infinite log-probs"):
        train(_run(tmp_path, "nan", 2))
    (line,) = _checks(tmp_path / "nan" / "metrics.jsonl")
    assert line["engine/weight_check"] == -1 and line["engine/nonfinite_logprobs"] >= 1
    assert math.isfinite(line["losses/loss"]) and math.isfinite(line["losses/grad_norm"])
    assert line["sampling/nonfinite_engine_logprobs"] >= 1  # importance sampling is on (auto, vLLM)
    assert math.isfinite(line["sampling/importance_sampling_ratio/mean"])


# --------------------------------------------------------------------------- the trainer
def _use_stand_in(monkeypatch):
    def make(cfg, model, tokenizer, announce=None):
        names = {n for n, _ in model.get_base_model().named_parameters()}
        return VLLMEngine(cfg, model, tokenizer, vllm_api=stand_in_api(names, llm=WeightedStandInLLM))

    monkeypatch.setattr(rollout_pkg, "make_engine", make)


def _run(tmp_path, name, steps, *sets):
    cfg = build_config("configs/tiny-math.yaml", sets=[
        "model.lora.enabled=true", "model.lora.r=8", "model.lora.alpha=16", "grpo.learning_rate=5e-3",
        f"train.steps={steps}", "train.prompts_per_step=8", "allocation.strategy=grpo",
        "allocation.group_size=4", "train.eval_every=0", "train.eval_limit=2", "train.save_every=0",
        "train.log_completions_every=0", "train.reward_workers=1", f"train.output_dir={tmp_path}",
        f"train.run_name={name}", *sets,
    ])
    return cfg


def _checks(path):
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [m for m in lines if "engine/weight_check" in m]


@pytest.mark.slow
def test_correct_pushes_pass_after_a_not_yet_discriminating_step_1(tmp_path, monkeypatch):
    _use_stand_in(monkeypatch)
    summary = train(_run(tmp_path, "ok", 3))
    checks = _checks(tmp_path / "ok" / "metrics.jsonl")
    assert [m["engine/weight_check"] for m in checks] == [0, 1, 1]
    first = checks[0]
    assert first["engine/policy_base_diff"] == 0.0  # step 1: the pushed policy is the base
    for m in checks[1:]:
        assert m["engine/logprob_diff"] <= m["engine/policy_base_diff"] / 2
        assert m["engine/logprob_diff"] < 0.01  # bf16 rounding of the pushed weights
    assert summary["steps"] == 3


def _drop_lora_delta(monkeypatch):
    monkeypatch.setattr(engine_weights, "merged_lora_weight",
                        lambda module, path: engine_weights.dense_weight(module.get_base_layer().weight))


def _push_once(monkeypatch):
    real = VLLMEngine._push

    def push(self):
        if self.pushes == 0:
            real(self)

    monkeypatch.setattr(VLLMEngine, "_push", push)


def _reload_after_push(monkeypatch):
    real = VLLMEngine._push

    def push(self):
        real(self)
        self.llm.collective_rpc("reload_weights")  # the popular recipe's bug

    monkeypatch.setattr(VLLMEngine, "_push", push)


@pytest.mark.parametrize(
    "bug, sets",
    [
        (_drop_lora_delta, []),
        (_push_once, ["engine.sleep_level=1"]),  # level 1 keeps the first push's weights
        (_reload_after_push, []),
    ],
    ids=["dropped-lora-delta", "skipped-push", "disk-reload"],
)
@pytest.mark.slow
def test_stale_engine_stops_training(tmp_path, monkeypatch, bug, sets):
    _use_stand_in(monkeypatch)
    bug(monkeypatch)
    with pytest.raises(EngineWeightsError) as e:
        train(_run(tmp_path, "stale", 4, *sets))
    message = str(e.value)
    assert message.startswith("step 2: the engine samples from stale weights") and "\n" not in message
    checks = _checks(tmp_path / "stale" / "metrics.jsonl")
    assert [m["engine/weight_check"] for m in checks] == [0, -1]  # the failing step is logged
    failing = checks[-1]
    assert failing["engine/engine_base_diff"] < failing["engine/logprob_diff"]


@pytest.mark.slow
def test_stale_engine_warns_when_asked(tmp_path, monkeypatch):
    _use_stand_in(monkeypatch)
    _drop_lora_delta(monkeypatch)
    train(_run(tmp_path, "warn", 3, "engine.weight_check=warn"))
    assert [m["engine/weight_check"] for m in _checks(tmp_path / "warn" / "metrics.jsonl")] == [0, -1, -1]


@pytest.mark.slow
def test_garbage_weights_fail_at_step_1(tmp_path, monkeypatch):
    """No push at all after the level-2 sleep: the engine runs on scrambled weights."""
    _use_stand_in(monkeypatch)
    monkeypatch.setattr(VLLMEngine, "_push", lambda self: None)
    with pytest.raises(EngineWeightsError, match="step 1: the engine's log-probs disagree"):
        train(_run(tmp_path, "garbage", 2))
