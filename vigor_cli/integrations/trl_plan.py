"""The TRL path's memory plan for one rank: `vigor train`'s plan (vigor_cli/model/memory_plan.py)
with the sharding of the distributed strategy (DDP, FSDP, ZeRO-3), TRL's generation (its vLLM
share, colocated or on a server, or transformers' unbounded KV cache for a rank's round) and
the update's micro-batch budget. Printed by the TRL entry point and refused as `vigor train`
refuses a plan that does not fit (exit 2 naming the keys), before the model loads.

Details: docs/scaling.md.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from vigor_cli.model.memory_plan import GIB, Item, Plan, make_plan

STRATEGIES = ("single", "ddp", "fsdp", "zero3", "zero2", "zero1")


@dataclass(frozen=True)
class Layout:
    """How the ranks hold the model: ``strategy`` (one of :data:`STRATEGIES`) over ``ranks``."""

    strategy: str
    ranks: int

    @property
    def shards_weights(self) -> bool:
        return self.strategy in ("fsdp", "zero3")

    @property
    def shards_gradients(self) -> bool:
        return self.strategy in ("fsdp", "zero3", "zero2")

    @property
    def shards_states(self) -> bool:
        return self.strategy in ("fsdp", "zero3", "zero2", "zero1")


def layout_from_env(env: Mapping[str, str] | None = None) -> Layout:
    """The strategy ``accelerate launch`` / ``torchrun`` set up, read from the environment they
    give every process (no process group is needed): WORLD_SIZE, ACCELERATE_USE_FSDP (and
    FSDP_SHARDING_STRATEGY), ACCELERATE_USE_DEEPSPEED (and ACCELERATE_DEEPSPEED_ZERO_STAGE)."""
    env = os.environ if env is None else env
    ranks = max(1, int(env.get("WORLD_SIZE", "1") or 1))
    if str(env.get("ACCELERATE_USE_FSDP", "")).lower() in ("1", "true"):
        sharding = str(env.get("FSDP_SHARDING_STRATEGY", "FULL_SHARD")).upper()
        kind = {"NO_SHARD": "ddp", "3": "ddp", "SHARD_GRAD_OP": "zero2", "2": "zero2"}.get(sharding, "fsdp")
        return Layout(kind, ranks)
    if str(env.get("ACCELERATE_USE_DEEPSPEED", "")).lower() in ("1", "true"):
        stage = str(env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"))
        return Layout({"0": "ddp", "1": "zero1", "2": "zero2"}.get(stage, "zero3"), ranks)
    return Layout("ddp" if ranks > 1 else "single", ranks)


def _shard(plan: Plan, names: tuple[str, ...], ranks: int, why: str) -> None:
    for item in plan.items:
        if item.name in names:
            item.bytes /= ranks
            item.note = f"{item.note + '; ' if item.note else ''}1/{ranks} ({why})"


def rank_plan(cfg: Any, layout: Layout, trl: Mapping[str, Any],
              mem_get_info: Callable[[], tuple[int, int]] | None = None) -> Plan:
    """One rank's plan for ``cfg`` under ``layout`` with TRL's generation keys ``trl``
    (``use_vllm``, ``vllm_mode``, ``vllm_gpu_memory_utilization``, ``vllm_enable_sleep_mode``)."""
    import copy

    from vigor_cli.model.memory_plan import _cpu_available, gpu_memory
    from vigor_cli.model.shape import model_shape

    if trl.get("use_cpu") and cfg.train.gpu_memory_gib is None:  # --cpu: a CPU run even beside a GPU
        device, available, total, source = "cpu", _cpu_available(), None, "MemAvailable (CPU run)"
    else:
        device, available, total, source = gpu_memory(cfg, mem_get_info)
    shape = model_shape(cfg.model)
    hf = copy.deepcopy(cfg)
    hf.engine.kind = "hf"  # TRL generates; vigor's engine is not started on this path
    plan = make_plan(hf, shape, device, available, total, source, vllm_present=False)
    plan.model = f"{shape.name}, rank of {layout.ranks} ({layout.strategy})"
    plan.items = [i for i in plan.items if i.phase != "generate"]
    _trl_generation(plan, cfg, shape, layout, trl)
    _sharding(plan, shape, layout)
    plan.notes.append(f"update micro-batches of grpo.micro_batch_tokens={cfg.grpo.micro_batch_tokens} tokens")
    if device == "cpu" or available is None:
        plan.problems = []  # a CPU run is not refused on an estimate
        return plan
    plan.problems = [p for p in plan.problems if not p.startswith("generation needs")]
    _verdict(plan, cfg, layout, trl)
    return plan


def _trl_generation(plan: Plan, cfg: Any, shape: Any, layout: Layout, trl: Mapping[str, Any]) -> None:
    """TRL's generation on this rank: colocated vLLM's share (resident unless its sleep mode
    is on: then asleep in the update), nothing for a vLLM server, else transformers' KV cache
    for the rank's largest round (TRL generates a round's rows in one call, unbounded)."""
    from vigor_cli.model.memory_plan import VLLM_ASLEEP_BYTES, _kv_per_token

    width = cfg.task.max_prompt_tokens + cfg.completion_tokens()
    if trl.get("use_vllm") and trl.get("vllm_mode", "colocate") == "colocate":
        share = float(trl.get("vllm_gpu_memory_utilization", 0.3))
        plan.engine, plan.engine_utilization = "vllm", share
        engine = share * (plan.total or 0.0)
        sleeps = bool(trl.get("vllm_enable_sleep_mode", False))
        plan.items.append(Item("generate", "TRL vLLM share", engine,
                               f"vllm_gpu_memory_utilization={share:g} of the GPU"))
        for phase in ("update", "optimizer"):
            kept = VLLM_ASLEEP_BYTES if sleeps else engine
            plan.items.append(Item(phase, "TRL vLLM " + ("asleep" if sleeps else "share (awake)"), kept,
                                   "vllm_enable_sleep_mode" if sleeps else "no sleep mode: held through the update"))
        return
    if trl.get("use_vllm"):
        plan.engine = "vllm server"
        plan.notes.append("vLLM server mode: generation's memory is the server's, not this rank's")
        return
    a = cfg.allocation
    step = a.budget or max(a.rollouts_per_prompt, getattr(a, "group_size", 0) or 0) * cfg.train.prompts_per_step
    rows = math.ceil(step / layout.ranks)  # a round is at most the step's rollouts
    act = 2 if plan.device == "cuda" and cfg.model.dtype != "float32" else 4
    kv = rows * width * _kv_per_token(shape) * act / 2
    plan.items.append(Item("generate", "transformers KV cache", kv,
                           f"up to {rows} rows x {width} tokens: a round's rows on this rank, one call"))
    plan.items.append(Item("generate", "transformers logits", rows * shape.vocab * (act + 8), f"{rows} rows"))


def _sharding(plan: Plan, shape: Any, layout: Layout) -> None:
    """Divide what the strategy shards by the ranks, and add what it gathers or buckets."""
    n = layout.ranks
    if n <= 1:
        return
    if layout.shards_weights:
        _shard(plan, ("policy weights", "KL reference copy", "LoRA adapters"), n, layout.strategy)
        per_layer = (shape.params - shape.vocab * shape.hidden) / max(1, shape.layers)
        widest = max(per_layer, shape.vocab * shape.hidden) * 2  # gathered 16-bit, one unit and the prefetch
        plan.items.append(Item("update", "gathered unit", 2 * widest,
                               "one wrapped unit gathered in full, and the next prefetched"))
    if layout.shards_states:
        _shard(plan, ("AdamW states", "AdamW step temporary"), n, layout.strategy)
    if layout.shards_gradients:
        _shard(plan, ("gradients",), n, layout.strategy + ": reduce-scattered per micro-batch")
    elif layout.strategy == "ddp":
        grads = next((i.bytes for i in plan.items if i.name == "gradients"), 0.0)
        plan.items.append(Item("update", "DDP gradient buckets", grads, "all-reduce buckets beside the gradients"))


def _verdict(plan: Plan, cfg: Any, layout: Layout, trl: Mapping[str, Any]) -> None:
    room = (plan.available or 0.0) - plan.margin
    keys = {"update": "grpo.micro_batch_tokens, model.lora.enabled=true, FSDP or ZeRO-3 over more ranks",
            "optimizer": "model.lora.enabled=true, FSDP or ZeRO-3 over more ranks",
            "generate": ("--trl vllm_gpu_memory_utilization, or --vllm-mode server" if plan.engine == "vllm"
                         else "train.prompts_per_step, sampling.max_new_tokens, or --vllm-mode colocate|server")}
    plan.problems = [p for p in plan.problems if p.startswith("the vLLM")]
    for phase, change in keys.items():
        need = plan.phase(phase)
        if need > room:
            plan.problems.append(f"{phase} needs {need / GIB:.1f} GiB of {room / GIB:.1f} GiB on each rank: "
                                 f"change {change}")


def announce(cfg: Any, trl: Mapping[str, Any], out: Any, layout: Layout | None = None,
             mem_get_info: Callable[[], tuple[int, int]] | None = None) -> Plan:
    """Print one rank's plan (main process) and refuse, in one line, one that does not fit
    (train.gpu_memory_gib states the memory to plan against, as for `vigor train`)."""
    from vigor_cli.model.memory_plan import check, render

    plan = rank_plan(cfg, layout or layout_from_env(), trl, mem_get_info)
    if out is not None:
        out.print(render(plan))
        for note in plan.notes:
            out.print(f"note: {note}", markup=False, highlight=False)
    check(plan)
    return plan
