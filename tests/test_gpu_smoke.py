"""bench/gpu_smoke.py's checks at their seam, on CPU: the real engine and loader, the stand-in LLM.

Only the GPU-bound parts (real vLLM, CUDA memory, bitsandbytes) are left
unrun here; the verdict logic must pass a correct engine and fail a broken one.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from vllm_stand_in import REPO, WeightedStandInLLM, stand_in_api

import vigor_cli.rollout.weights as engine_weights


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("gpu_smoke", REPO / "bench" / "gpu_smoke.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_smoke"] = module
    spec.loader.exec_module(module)
    return module


def _run(smoke):
    from transformers import AutoModelForCausalLM

    names = {n for n, _ in AutoModelForCausalLM.from_pretrained(smoke.TINY).named_parameters()}
    lines = []
    verdicts = smoke.Verdicts(say=lines.append)
    args = smoke._parse(["--variant", "engine", "--rollouts", "2", "--max-new-tokens", "12"])
    result = smoke.run_engine(args, False, verdicts, vllm_api=stand_in_api(names, llm=WeightedStandInLLM))
    return {r["check"]: r["verdict"] for r in verdicts.rows}, lines, result


def test_correct_engine_passes_every_check(smoke):
    verdicts, lines, result = _run(smoke)
    assert verdicts == {
        "step 1 not yet discriminating": "PASS",
        "policy far from base": "PASS",
        "readback": "PASS",
        "engine tracks policy": "PASS",
        "check can fail (base pushed on purpose)": "PASS",
        "engine tracks policy again": "PASS",
        "memory": "SKIP",  # no CUDA here
    }, lines
    assert result["checks"]["pushed"]["policy_base"] >= 0.05


def test_dropped_lora_delta_fails(smoke, monkeypatch):
    monkeypatch.setattr(engine_weights, "merged_lora_weight",
                        lambda module, path: engine_weights.dense_weight(module.get_base_layer().weight))
    verdicts, lines, _ = _run(smoke)
    assert verdicts["engine tracks policy"] == "FAIL"
    assert verdicts["readback"] == "FAIL"
    assert any(line.startswith("FAIL  engine tracks policy: the engine samples from stale weights") for line in lines)
