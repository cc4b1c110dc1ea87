"""The TRL path's memory plan for one rank (vigor_cli/integrations/trl_plan.py): the strategy's
sharding (DDP, FSDP, ZeRO-3), TRL's generation (its colocated vLLM share, a server, or
transformers' KV cache for a rank's round), the micro-batch budget; printed by the entry point
and refused in one line before the model loads; FSDP's micro-batches keep no full gradients.
Plans are read from the shipped models' config.json (tests/fixtures/model_configs/)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

from vigor_cli.integrations import trl_plan  # noqa: E402
from vigor_cli.settings import build_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
QWEN3_8B = str(REPO / "tests" / "fixtures" / "model_configs" / "Qwen3-8B")
GIB = float(1 << 30)


def _cfg(*sets: str):
    return build_config(str(REPO / "configs" / "qwen3-8b-lcb.yaml"),
                        sets=[f"model.name_or_path={QWEN3_8B}", "train.gpu_memory_gib=80", *sets])


def _item(plan, name, phase=None):
    return next(i for i in plan.items if i.name == name and (phase is None or i.phase == phase))


def test_the_strategy_is_read_from_what_the_launcher_sets():
    assert trl_plan.layout_from_env({}) == trl_plan.Layout("single", 1)
    assert trl_plan.layout_from_env({"WORLD_SIZE": "8"}) == trl_plan.Layout("ddp", 8)
    assert trl_plan.layout_from_env({"WORLD_SIZE": "8", "ACCELERATE_USE_FSDP": "true"}) == trl_plan.Layout("fsdp", 8)
    assert trl_plan.layout_from_env({"WORLD_SIZE": "4", "ACCELERATE_USE_FSDP": "true",
                                     "FSDP_SHARDING_STRATEGY": "SHARD_GRAD_OP"}) == trl_plan.Layout("zero2", 4)
    assert trl_plan.layout_from_env({"WORLD_SIZE": "8", "ACCELERATE_USE_DEEPSPEED": "true",
                                     "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}) == trl_plan.Layout("zero3", 8)


@pytest.mark.parametrize("strategy", ["fsdp", "zero3"])
def test_fsdp_and_zero3_shard_weights_gradients_and_states_over_the_ranks(strategy):
    cfg = _cfg()
    one = trl_plan.rank_plan(cfg, trl_plan.Layout("single", 1), {})
    eight = trl_plan.rank_plan(cfg, trl_plan.Layout(strategy, 8), {})
    for name in ("policy weights", "AdamW states", "LoRA adapters"):
        assert _item(eight, name).bytes == pytest.approx(_item(one, name).bytes / 8)
    assert _item(eight, "gradients", "update").bytes == pytest.approx(_item(one, "gradients", "update").bytes / 8)
    assert _item(eight, "gathered unit").bytes > 0  # the unit FSDP / ZeRO-3 gathers in full
    assert _item(eight, "activations").bytes == _item(one, "activations").bytes  # micro-batch budget, not sharded
    assert "grpo.micro_batch_tokens=16384" in " ".join(eight.notes) or any("micro_batch_tokens" in n for n in eight.notes)


def test_ddp_keeps_whole_copies_and_adds_its_gradient_buckets():
    cfg = _cfg()
    one = trl_plan.rank_plan(cfg, trl_plan.Layout("single", 1), {})
    ddp = trl_plan.rank_plan(cfg, trl_plan.Layout("ddp", 8), {})
    assert _item(ddp, "policy weights").bytes == _item(one, "policy weights").bytes
    assert _item(ddp, "DDP gradient buckets").bytes == _item(ddp, "gradients", "update").bytes


def test_trls_generation_on_the_rank_vllm_share_server_or_transformers_kv():
    cfg = _cfg()
    layout = trl_plan.Layout("zero3", 8)
    colocate = trl_plan.rank_plan(cfg, layout, {"use_vllm": True, "vllm_mode": "colocate",
                                                "vllm_gpu_memory_utilization": 0.25})
    assert _item(colocate, "TRL vLLM share").bytes == pytest.approx(0.25 * 80 * GIB)
    assert _item(colocate, "TRL vLLM share (awake)", "update").bytes == pytest.approx(0.25 * 80 * GIB)
    asleep = trl_plan.rank_plan(cfg, layout, {"use_vllm": True, "vllm_enable_sleep_mode": True})
    assert _item(asleep, "TRL vLLM asleep", "update").bytes < 2 * GIB
    server = trl_plan.rank_plan(cfg, layout, {"use_vllm": True, "vllm_mode": "server"})
    assert not [i for i in server.items if i.phase == "generate"] and "server" in server.engine
    hf = trl_plan.rank_plan(cfg, layout, {})
    kv = _item(hf, "transformers KV cache")
    step = cfg.allocation.budget or cfg.allocation.rollouts_per_prompt * cfg.train.prompts_per_step
    width = cfg.task.max_prompt_tokens + cfg.completion_tokens()
    assert f"up to {-(-step // 8)} rows x {width} tokens" in kv.note  # the rank's share of a round, unbounded


def test_a_plan_that_does_not_fit_is_refused_in_one_line_naming_the_keys():
    from vigor_cli.errors import UserError

    out = SimpleNamespace(printed=[], print=lambda *a, **k: out.printed.append(a))
    with pytest.raises(UserError) as e:
        trl_plan.announce(_cfg(), {}, out, trl_plan.Layout("single", 1))
    line = str(e.value)
    assert line.startswith("memory plan: generate needs") and "on each rank" in line and "\n" not in line
    assert "--vllm-mode" in line and out.printed  # the plan was printed before the refusal
    fits = trl_plan.announce(_cfg(), {"use_vllm": True, "vllm_mode": "server"}, None, trl_plan.Layout("fsdp", 8))
    assert fits.fits


@pytest.mark.slow
def test_the_entry_point_prints_the_plan_and_refuses_before_the_model_loads(tmp_path, capsys):
    from vigor_cli.integrations.trl import main

    out = tmp_path / "out"
    code = main(["--cpu", "--output-dir", str(out), "--set", "train.gpu_memory_gib=0.001", "--set", "train.steps=1"])
    captured = capsys.readouterr()
    assert code == 2 and "memory plan:" in captured.out
    errors = [x for x in captured.err.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: memory plan: ") and "on each rank" in errors[0]
    assert not out.exists()  # nothing written


def test_fsdp_micro_batches_keep_the_gradient_sync_so_no_rank_holds_a_full_copy():
    """FSDP's no_sync accumulates unsharded gradients: under FSDP each micro-batch's backward
    reduce-scatters into the shard; DDP (and DeepSpeed) keep accelerate's no_sync."""
    from accelerate.utils import DistributedType

    from vigor_cli.integrations import trl_update

    calls = []

    class State:
        sync_gradients = True

        def _set_sync_gradients(self, v):
            self.sync_gradients = v

    def accelerator(kind):
        import contextlib

        @contextlib.contextmanager
        def no_sync(model):
            calls.append(kind)
            yield

        return SimpleNamespace(distributed_type=kind, gradient_state=State(), no_sync=no_sync)

    for kind in (DistributedType.FSDP, DistributedType.MULTI_GPU, DistributedType.MULTI_CPU, DistributedType.DEEPSPEED):
        acc = accelerator(kind)
        with trl_update.accumulating(acc, None):
            assert acc.gradient_state.sync_gradients is False
        assert acc.gradient_state.sync_gradients is True
    assert calls == [DistributedType.MULTI_GPU, DistributedType.MULTI_CPU, DistributedType.DEEPSPEED]


def test_a_cpu_run_is_planned_on_the_cpu_and_not_refused():
    """--cpu (TRL's use_cpu) plans a CPU run even where a GPU answers; train.gpu_memory_gib
    still states the memory to plan against."""
    cfg = build_config(str(REPO / "configs" / "qwen3-8b-lcb.yaml"), sets=[f"model.name_or_path={QWEN3_8B}"])
    gpu = lambda: (int(2 * GIB), int(80 * GIB))  # noqa: E731 - a GPU with 2 GiB free
    plan = trl_plan.rank_plan(cfg, trl_plan.Layout("single", 1), {"use_cpu": True}, gpu)
    assert plan.device == "cpu" and plan.fits
    refused = trl_plan.rank_plan(cfg, trl_plan.Layout("single", 1), {}, gpu)
    assert refused.device == "cuda" and not refused.fits
