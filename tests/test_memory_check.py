"""The memory plan against vigor's own code executed at full size under fake tensors
(bench/memory_check.py): the 1.5B config's update and optimizer step within +-10 % of the plan,
the tracker and the NF4 stand-in by hand, bad input, and the committed results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vigor_cli.model import memory_plan as mp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
FIXTURES = REPO / "tests" / "fixtures" / "model_configs"
CONFIGS = {"Qwen2.5-1.5B": "qwen2.5-1.5b-math-vigor.yaml", "Qwen2.5-3B": "qwen2.5-3b-math-vigor.yaml",
           "Qwen3-8B": "qwen3-8b-lcb.yaml"}


@pytest.fixture(scope="module")
def one_point_five_b() -> dict:
    """The 1.5B config's update (one full 16,384-token micro-batch) and AdamW step, executed
    at full size under fake tensors (about 14 CPU-seconds here; no memory)."""
    import memory_check

    return memory_check.check(str(REPO / "configs" / CONFIGS["Qwen2.5-1.5B"]),
                              [f"model.name_or_path={FIXTURES / 'Qwen2.5-1.5B'}"], micro_batches=1, generate=False)


def test_the_15b_update_executed_at_full_size_agrees_with_the_plan(one_point_five_b):
    phases = {r["phase"]: r for r in one_point_five_b["phases"]}
    assert set(phases) == {"resident", "update", "optimizer"}
    assert phases["update"]["executed_gib"] > 7  # 3.3 GiB resident + a 16,384-token update: not a toy
    for r in phases.values():
        assert 0.9 <= r["executed_gib"] / r["planned_gib"] <= 1.1, r
    assert phases["resident"]["executed_gib"] == pytest.approx(phases["resident"]["planned_gib"], rel=0.01)
    assert set(one_point_five_b["not_seen"]) >= {"4-bit weights", "attention backend", "cuBLAS workspace",
                                                  "allocator fragmentation", "vLLM"}


def test_live_storages_count_new_storages_once_and_free_them():
    from memory_check import LiveStorages

    with LiveStorages() as t:
        a = torch.zeros(1000)  # 4000 bytes
        a.view(10, 100).add_(1)  # a view, in place: nothing new
        b = a.t() if a.dim() == 2 else a.view(-1)
        assert t.current == 4000
        c = a * 2  # a new storage
        assert t.current == 8000 and t.peak == 8000
        del c
        assert t.current == 4000 and t.peak == 8000
        t.reset_peak()
        assert t.peak == 4000
        assert float(a.sum()) == 1000.0  # real tensors keep their values
    del a, b


def test_fake_values_read_as_one_and_booleans_as_false():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memory_check import LiveStorages

    with FakeTensorMode(), LiveStorages() as t:
        x = torch.ones(3, 4)
        assert float(x.sum()) == 1 and bool((x > 0).all()) is False
        assert x.long().tolist() == [[1] * 4 for _ in range(3)]
        assert t.current == 3 * 4 * 4 and t.peak >= 3 * 4 * (4 + 8)  # x alive, its int64 copy freed; no real bytes


def test_nf4_stand_in_holds_the_plans_bytes_and_computes_in_16_bit():
    from memory_check import NF4Linear, nf4_bytes

    n = 4096 * 12288
    assert nf4_bytes(n) / n == pytest.approx(mp.NF4_BYTES_PER_PARAM, rel=1e-3)
    layer = NF4Linear(64, 32, torch.bfloat16)
    assert layer.weight.dtype == torch.uint8 and layer.weight.numel() == nf4_bytes(64 * 32)
    x = torch.randn(5, 64, requires_grad=True)
    y = layer(x)
    assert y.shape == (5, 32) and y.dtype == torch.float32  # the input's dtype, as bitsandbytes returns
    y.sum().backward()
    assert x.grad.shape == x.shape


def test_nf4_bytes_match_bitsandbytes_quantising_one_layer_on_this_cpu():
    pytest.importorskip("bitsandbytes", reason="bitsandbytes (the gpu extra) is not installed")
    from memory_check import bitsandbytes_nf4_bytes, nf4_bytes

    real = bitsandbytes_nf4_bytes(1024, 3072)
    assert abs(real - nf4_bytes(1024 * 3072)) <= 8  # bitsandbytes adds its float32 offset
    assert real / (1024 * 3072) == pytest.approx(mp.NF4_BYTES_PER_PARAM, rel=1e-4)


def test_a_config_that_does_not_exist_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "memory_check.py"), "--config",
                           str(tmp_path / "missing.yaml"), "--json", str(tmp_path / "out.json")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr[-800:]
    assert "missing.yaml" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.json").exists()


def test_the_committed_results_hold_every_phase_within_ten_percent():
    """bench/memory_check_results.json: 1.5B and 3B (bf16 and float32), 8B (4-bit) and the
    24 GB 8B config, every phase executed within 0.9-1.1 of the plan, with what fake tensors
    cannot see named beside the figures, and no machine paths."""
    text = (REPO / "bench" / "memory_check_results.json").read_text()
    assert "/work/" not in text and "/home/" not in text
    results = json.loads(text)["results"]
    seen = {(r["model"], r["run"]["dtype"], r["config"]) for r in results}
    for model in ("Qwen2.5-1.5B", "Qwen2.5-3B"):
        assert {d for m, d, _ in seen if m == model} == {"bfloat16", "float32"}
    assert any(m == "Qwen3-8B" and c.endswith("qwen3-8b-lcb-24gb.yaml") for m, _, c in seen)
    for r in results:
        assert [p["phase"] for p in r["phases"]] == ["resident", "generate", "update", "optimizer"]
        for p in r["phases"]:
            assert 0.9 <= p["executed_gib"] / p["planned_gib"] <= 1.1, (r["model"], p)
        assert r["not_seen"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["Qwen2.5-1.5B", "Qwen2.5-3B"])
def test_memory_check_command_for_the_15b_and_3b_configs(tmp_path, model):
    """The command as a user runs it, with a folder holding only config.json: every phase in
    its JSON within +-10 %, the update at full size (minutes under fake tensors)."""
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "memory_check.py"), "--config",
                           str(REPO / "configs" / CONFIGS[model]), "--set", f"model.name_or_path={FIXTURES / model}",
                           "--json", str(out)], capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "executed" in proc.stdout
    phases = {p["phase"]: p for p in json.loads(out.read_text())["phases"]}
    assert set(phases) == {"resident", "generate", "update", "optimizer"}
    for p in phases.values():
        assert 0.9 <= p["executed_gib"] / p["planned_gib"] <= 1.1, p


def test_gpu_smoke_splits_the_update_peak_at_the_optimizer_step():
    """bench/gpu_smoke.py's memory check (CUDA only, not run here): the peak before the AdamW
    step is the update's, the step's own peak is the optimizer phase's, each judged against the plan."""
    from types import SimpleNamespace

    sys.path.insert(0, str(REPO))
    from bench.gpu_checks.core import measure_optimizer_step

    class Meter:
        def __init__(self) -> None:
            self.peaks, self.resets = [5.0, 2.0], 0

        def peak(self) -> float:
            return self.peaks.pop(0)

        def reset_peak(self) -> None:
            self.resets += 1

    calls: list[int] = []
    learner = SimpleNamespace(optimizer=SimpleNamespace(step=lambda: calls.append(1)))
    meter = Meter()
    seen = measure_optimizer_step(learner, meter)
    assert seen == {}
    learner.optimizer.step()
    assert seen == {"update": 5.0, "optimizer": 2.0} and calls == [1] and meter.resets == 1
