"""GPU memory plan of a run, from the model's config.json alone, before anything loads.

``vigor train --dry-run`` prints it and exits; every run prints it first and refuses
(exit 2, naming the keys to change) when a phase cannot fit. The plan counts four phases
of one GPU shared by the trainer and the colocated engine (``resident``, ``generate``,
``update``, ``optimizer``), each item with its bytes and where they come from; what each
phase holds and how the plan compares with measurements is in docs/gpu-memory.md. The
model's shape comes from vigor_cli/model/shape.py (the meta device: no weights, no memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from vigor_cli.model.shape import ModelShape, model_shape

GIB = float(1 << 30)

NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
"""bitsandbytes NF4 with double quantisation: 4 bits, an 8-bit absmax per 64 weights,
a float32 scale per 256 blocks."""

VLLM_WORKING_BYTES = 1.5 * GIB
"""vLLM's memory besides weights and KV cache (profile-run activations, sampler logits,
CUDA graphs): an assumption, not measured here."""

VLLM_ASLEEP_BYTES = 1.0 * GIB
"""What a sleeping vLLM still holds (CUDA graphs, its allocator's cache): an assumption."""

BASE_COPY = "weight-check base copy"
AFTER_ENGINE_START = ("AdamW states", BASE_COPY)
"""Resident items allocated after the vLLM engine has sized itself (AdamW's states at the first
optimizer step, the weight check's base copy when the engine exists): the engine's share must
leave room for them, and they are not yet there when it starts."""

MARGIN_BYTES = 1.0 * GIB
MARGIN_SHARE = 0.05
"""Headroom kept free: 1 GiB + 5% of the GPU (allocator fragmentation, kernels' workspaces)."""

AUTO_UTILIZATION_CAP = 0.9

GPU_CLASSES = {"24 GB": 23.5, "48 GB": 44.5, "80 GB": 79.0}
"""Free GiB after the CUDA context on the GPU classes the shipped configs name (RTX 4090 /
L4-class, L40S (A6000: 47.5), A100/H100 80 GB)."""


# --------------------------------------------------------------------------- the arithmetic
def layer_activation_bytes(s: ModelShape, act: int, stream: int, lora_r: int = 0, casts: bool = False) -> float:
    """Bytes one decoder layer saves for backward per token (no checkpointing).

    ``act`` is the activations' element size, ``stream`` the residual stream's. Under
    4-bit both are 4: peft's ``prepare_model_for_kbit_training`` casts embeddings and
    norms to float32, and bitsandbytes layers return their input's dtype. ``casts``: under
    master weights autocast gives each of q, k, v, gate and up its own 16-bit copy of the
    float32 norm output, and each keeps it (measured with saved-tensor hooks on CPU).
    """
    q = s.heads * s.head_dim
    kv = s.kv_heads * s.head_dim
    norms = 2 * (4 + stream) * s.hidden  # RMSNorm: float32 copy of its input + normalised output
    qkv = act * (q + 2 * kv)  # q and k after rotary, v
    repeat = act * 2 * q if s.kv_heads < s.heads else 0  # GQA: key/value repeated to every head
    attention = act * 2 * q + 4 * s.heads  # output (+ log-sum-exp) and o_proj's contiguous input
    mlp = act * 4 * s.intermediate  # gate, up, SiLU(gate), product
    adapters = 4 * lora_r * s.lora_targets  # LoRA's rank-r intermediates (float32)
    copies = 5 * act * s.hidden if casts else 0
    return norms + qkv + repeat + attention + mlp + adapters + copies


def logits_chunk_bytes(vocab: int, chunk: int, head_bytes: int) -> float:
    """Peak of one output-layer chunk (backward's recompute): the head's output, its float32
    copy, logsumexp's exponentials, the float32 gradient and its cast: about 18 bytes
    per vocabulary entry at 16-bit, 16 at float32 (measured on CPU: bench/update_memory.py)."""
    return chunk * vocab * (head_bytes + (4 if head_bytes < 4 else 0) + 12)


CHECKPOINTED_PEAK = {"16-bit": (27, 17.4), "float32": (7, 27.4), "4-bit": (19, 27.4)}
"""Bytes per token, per unit of hidden and intermediate size, alive at the widest moment of a
checkpointed update under LoRA (one layer's backward, the layer recomputed: its saved tensors,
peft's float32 copies of the adapters' inputs, the gradients in flight, the final norm's
tensors), beside the layer inputs checkpointing keeps; by how the policy is held. Measured by
executing vigor's update at full size under fake tensors (bench/memory_check.py) for
Qwen2.5-1.5B, Qwen2.5-3B and Qwen3-8B."""


def checkpointed_layer_peak(s: ModelShape, p: "_Precision", width: int) -> float:
    """Bytes per token at a checkpointed LoRA update's widest moment beyond the layer inputs
    (:data:`CHECKPOINTED_PEAK`), plus the attention mask (a [width, width] matrix per row in
    the compute dtype and as booleans) and, for models with per-head query/key norms, their
    float32 copies."""
    a, b = CHECKPOINTED_PEAK["4-bit" if p.four_bit else "16-bit" if p.act == 2 else "float32"]
    qk = 12 * (s.heads + s.kv_heads) * s.head_dim if s.qk_norm else 0
    return a * s.hidden + b * s.intermediate + (p.act + 1) * width + qk


PHASES = ("resident", "generate", "update", "optimizer")


@dataclass
class Item:
    phase: str
    name: str
    bytes: float
    note: str = ""


@dataclass
class Plan:
    """Per-phase estimates against the GPU's memory; :attr:`problems` empty when it fits."""

    model: str
    device: str
    available: float | None  # bytes usable now (free GPU memory, or the override)
    total: float | None  # the GPU's size (for gpu_memory_utilization)
    source: str  # where ``available`` came from
    items: list[Item] = field(default_factory=list)
    engine: str = "hf"
    engine_utilization: float | None = None
    kv_sequences: float | None = None  # max-length sequences the vLLM KV cache holds
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def phase(self, name: str) -> float:
        """Peak bytes of a phase (each phase includes the resident memory)."""
        resident = sum(i.bytes for i in self.items if i.phase == "resident")
        if name == "resident":
            return resident
        return resident + sum(i.bytes for i in self.items if i.phase == name)

    @property
    def margin(self) -> float:
        return MARGIN_BYTES + MARGIN_SHARE * (self.total or 0.0) if self.device == "cuda" else 0.0

    def allocated_by_update(self) -> float:
        """Bytes the update allocates beyond the loaded weights: AdamW states (created at the
        first step), gradients, activations, the output-layer chunk (what bench/update_memory.py
        measures as peak RSS over the RSS before the update)."""
        loaded = sum(i.bytes for i in self.items if i.phase == "resident" and i.name != "AdamW states")
        return self.phase("update") - loaded - sum(i.bytes for i in self.items if i.name == "vLLM asleep")

    @property
    def peak(self) -> float:
        return max(self.phase(p) for p in PHASES[1:])

    @property
    def fits(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "model": self.model, "device": self.device, "available_gib": _gib(self.available),
            "total_gib": _gib(self.total), "source": self.source, "engine": self.engine,
            "engine_gpu_memory_utilization": self.engine_utilization,
            "kv_cache_max_length_sequences": self.kv_sequences,
            "phases_gib": {p: _gib(self.phase(p)) for p in PHASES},
            "items": [{"phase": i.phase, "name": i.name, "gib": _gib(i.bytes), "note": i.note} for i in self.items],
            "margin_gib": _gib(self.margin), "fits": self.fits, "problems": self.problems, "notes": self.notes,
        }


def _gib(x: float | None) -> float | None:
    return None if x is None else round(x / GIB, 3)


@dataclass(frozen=True)
class _Precision:
    """How the policy is held and trained: what every phase's arithmetic depends on."""

    act: int  # bytes of an activation (and of the head's output)
    stream: int  # bytes of the residual stream (a layer's input): float32 under master weights
    lora: bool
    four_bit: bool
    master: bool  # float32 master weights under 16-bit autocast
    trainable: float  # trained parameters
    train_bytes: int  # bytes per trained parameter (and per gradient, per AdamW state)


def _precision(cfg: Any, shape: ModelShape, device: str) -> _Precision:
    m = cfg.model
    act = 2 if (m.dtype == "auto" and device == "cuda") or m.dtype in ("bfloat16", "float16") else 4
    if m.load_in_4bit:
        act = 4  # peft upcasts embeddings and norms to float32; bitsandbytes returns its input's dtype
    lora = m.lora.enabled
    master = not lora and not m.load_in_4bit and m.fp32_master_weights and act == 2
    # Under master weights the embedding (float32, not autocast) starts a float32 residual
    # stream and every residual add keeps it float32: the linear layers' outputs are 16-bit, the
    # layer inputs (what checkpointing keeps) and the norms' outputs are not.
    return _Precision(act, 4 if master else act, lora, m.load_in_4bit, master,
                      shape.lora_params if lora else shape.params, 4 if (lora or master or act == 4) else act)


def make_plan(cfg: Any, shape: ModelShape, device: str, available: float | None, total: float | None,
              source: str, vllm_present: bool = True) -> Plan:
    """The arithmetic: a plan for ``cfg`` on ``device`` ('cuda' or 'cpu') with ``available``
    bytes (None: unknown, no verdict). Phase by phase: what stays resident, what generation
    adds, what the update adds, then the verdict."""
    plan = Plan(model=shape.name, device=device, available=available, total=total, source=source)
    p = _precision(cfg, shape, device)
    kind = cfg.engine.kind
    if kind == "auto":
        kind = "vllm" if device == "cuda" and vllm_present else "hf"
    plan.engine = kind
    _plan_resident(plan, cfg, shape, p)
    if kind == "vllm":
        _plan_vllm(plan, cfg, shape)
    else:
        _plan_hf_generate(plan, cfg, shape, p)
    checkpointing = _plan_update(plan, cfg, shape, p)
    _plan_optimizer(plan, p)
    if available is None:
        plan.notes.append("no GPU memory to plan against: set --gpu-memory GIB (train.gpu_memory_gib)")
        return plan
    _verdict(plan, cfg, p, checkpointing)
    return plan


def _plan_resident(plan: Plan, cfg: Any, shape: ModelShape, p: _Precision) -> None:
    """Policy weights, LoRA adapters, AdamW states, the KL reference: held for the whole run."""
    if p.four_bit:
        other = shape.params - shape.quantizable_params
        plan.items.append(Item("resident", "policy weights", shape.quantizable_params * NF4_BYTES_PER_PARAM + other * 4,
                               f"NF4 linear layers + {other / 1e6:.0f}M float32 (embeddings, head, norms)"))
    elif p.master:
        plan.items.append(Item("resident", "policy weights", shape.params * 4, "float32 master weights (autocast to 16-bit)"))
    else:
        count = f"{shape.params / 1e9:.2f}B" if shape.params >= 1e9 else f"{shape.params / 1e6:.1f}M"
        plan.items.append(Item("resident", "policy weights", shape.params * p.act, f"{count} x {p.act} bytes"))
    if p.lora:
        plan.items.append(Item("resident", "LoRA adapters", p.trainable * 4,
                               f"{p.trainable / 1e6:.1f}M float32, r={cfg.model.lora.r}"))
    plan.items.append(Item("resident", "AdamW states", 2 * p.trainable * p.train_bytes, "2 per trained parameter"))
    if not p.lora and cfg.grpo.beta > 0:
        plan.items.append(Item("resident", "KL reference copy", shape.params * p.act, "frozen, compute dtype"))
    from vigor_cli.model.base_copy import loads_base_copy

    if loads_base_copy(cfg, shares_policy=plan.engine != "vllm"):
        plan.items.append(Item("resident", BASE_COPY, shape.params * p.act,
                               "frozen, compute dtype; loads after the engine starts"))


def _max_len(cfg: Any, shape: ModelShape) -> int:
    max_len = cfg.engine.max_model_len or cfg.task.max_prompt_tokens + cfg.completion_tokens()
    return min(max_len, int(shape.max_positions)) if shape.max_positions else max_len


def _kv_per_token(shape: ModelShape) -> int:
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * 2  # bf16 keys and values


def _vllm_utilization(plan: Plan, cfg: Any) -> float | None:
    """engine.gpu_memory_utilization, 'auto' resolved: what is free once the policy is resident."""
    util = cfg.engine.gpu_memory_utilization
    if util != "auto":
        return util
    if plan.available is None or plan.total is None:
        return None
    util = min(AUTO_UTILIZATION_CAP, (plan.available - plan.phase("resident") - plan.margin) / plan.total)
    return math.floor(util * 100) / 100


def _plan_vllm(plan: Plan, cfg: Any, shape: ModelShape) -> None:
    """The colocated vLLM engine: bf16 weights, working memory, a KV cache in its share."""
    available, total = plan.available, plan.total
    max_len, kv_per_token = _max_len(cfg, shape), _kv_per_token(shape)
    engine_weights = shape.params * 2
    util = plan.engine_utilization = _vllm_utilization(plan, cfg)
    budget = util * total if (util is not None and total is not None) else engine_weights + VLLM_WORKING_BYTES
    kv = budget - engine_weights - VLLM_WORKING_BYTES
    plan.kv_sequences = kv / (kv_per_token * max_len) if kv_per_token else None
    plan.items.append(Item("generate", "vLLM weights", engine_weights, "bf16 copy (LoRA merged, 4-bit dequantised)"))
    plan.items.append(Item("generate", "vLLM working memory", VLLM_WORKING_BYTES, "assumed"))
    plan.items.append(Item("generate", "vLLM KV cache", max(kv, 0.0),
                           f"{plan.kv_sequences:.1f} sequences of {max_len} tokens" if plan.kv_sequences is not None else ""))
    if util is not None and total is not None and kv < kv_per_token * max_len:
        plan.problems.append(
            f"the vLLM engine's share ({util:.2f} x {total / GIB:.1f} GiB) holds its bf16 weights "
            f"({engine_weights / GIB:.1f} GiB) + working memory but not the KV cache of one "
            f"{max_len}-token sequence ({kv_per_token * max_len / GIB:.2f} GiB): raise "
            "engine.gpu_memory_utilization (or 'auto'), or lower sampling.max_new_tokens / engine.max_model_len"
        )
    if util is not None and available is not None:
        at_build = available - sum(i.bytes for i in plan.items
                                   if i.phase == "resident" and i.name not in AFTER_ENGINE_START)
        if util * (total or 0) > at_build:
            plan.problems.append(
                f"vLLM starts only if {util:.2f} x {total / GIB:.1f} GiB is free after the policy "
                f"loads ({at_build / GIB:.1f} GiB): lower engine.gpu_memory_utilization (or 'auto')"
            )


def _plan_hf_generate(plan: Plan, cfg: Any, shape: ModelShape, p: _Precision) -> None:
    """transformers generation: two moments, not at once. The prompts' forward (the prompts'
    KV cache, one layer's tensors at a time, peft's float32 branch) and the last decode step
    (the cache of every row at full length, the rows' logits); the plan counts the larger."""
    gen_tokens, prompt = cfg.engine.gen_batch_tokens, cfg.task.max_prompt_tokens
    width = prompt + cfg.completion_tokens()
    rows = max(1, gen_tokens // width)
    per_token = _kv_per_token(shape) * p.act / 2
    kv_hf = rows * width * per_token
    plan.items.append(Item("generate", "hf generate KV cache", kv_hf,
                           f"{rows} rows x {width} tokens (engine.gen_batch_tokens={gen_tokens})"))
    plan.items.append(Item("generate", "hf generate logits", rows * shape.vocab * (p.act + 8), f"{rows} rows"))
    prefill = rows * prompt  # the prompts' forward: one layer's tensors at a time
    mlp = (3 * shape.intermediate + 6 * shape.hidden) * p.act
    extra = max(0.0, lora_float32_moment(shape, p, cfg.model.lora.r) - mlp)
    forward = prefill * (mlp + extra + per_token)
    beyond = max(0.0, forward - kv_hf)
    plan.items.append(Item("generate", "hf generate prefill", beyond,
                           f"{prefill} prompt tokens through one layer{' (LoRA: float32 branch)' if extra else ''}: "
                           f"{forward / GIB:.2f} GiB at its own moment, counted beyond the full cache"))


LORA_ALIVE = {"gate_proj": ("intermediate",), "up_proj": ("intermediate", "intermediate"),
              "down_proj": ("intermediate", "hidden")}
"""16-bit tensors of the layer alive beside an adapted linear's float32 branch, besides the
residual stream and the layer's normalised input (the MLP's: the gate's activation while the
up projection runs, the product while the down projection runs); other layers: its own output."""


def lora_float32_moment(shape: ModelShape, p: _Precision, r: int) -> float:
    """Bytes per prompt token at the widest moment of a layer's forward under LoRA on a 16-bit
    base (0 otherwise): peft casts the linear's input to the adapters' float32 and keeps A's
    output, B's output and its scaled copy (float32) beside the layer's 16-bit output, the
    residual stream and the normalised input (measured with a tensor-storage tracker:
    bench/memory_phases.py)."""
    if not p.lora or p.act >= 4:
        return 0.0
    sizes = {"hidden": shape.hidden, "intermediate": shape.intermediate}
    widest = 0.0
    for name, fan_in, fan_out in shape.lora_linears:
        alive = sum(sizes[k] for k in LORA_ALIVE.get(name, ())) or fan_out
        sixteen = (alive + 2 * shape.hidden) * p.act
        widest = max(widest, sixteen + 4 * fan_in + 4 * r + 8 * fan_out)
    return widest


def _plan_update(plan: Plan, cfg: Any, shape: ModelShape, p: _Precision) -> bool:
    """Gradients, one micro-batch's activations, the output-layer chunk (and vLLM asleep);
    returns whether gradient checkpointing is on."""
    import torch

    from vigor_cli.model.loading import gradient_checkpointing_on

    tokens, stream = cfg.grpo.micro_batch_tokens, p.stream
    checkpointing = gradient_checkpointing_on(cfg.model, torch.device(plan.device))
    width = min(cfg.task.max_prompt_tokens + cfg.completion_tokens(), tokens)
    chunk = cfg.grpo.logits_chunk_tokens
    if chunk > 0:
        head, head_note = logits_chunk_bytes(shape.vocab, min(chunk, tokens), p.act), f"{min(chunk, tokens)} positions x {shape.vocab} vocabulary"
    else:
        head, head_note = tokens * shape.vocab * 10.6, "grpo.logits_chunk_tokens=0: every position x vocabulary, ~10.6 bytes each"
    plan.items.append(Item("update", "gradients", p.trainable * p.train_bytes, ""))
    if checkpointing and p.lora:
        # Two moments, not at once: the output layer's backward (its chunk, the final hidden
        # states and their gradient) and a layer's backward; the layer inputs live through both.
        layer = tokens * checkpointed_layer_peak(shape, p, width)
        plan.items.append(Item("update", "activations", tokens * shape.layers * stream * shape.hidden + layer,
                               f"{tokens} tokens (grpo.micro_batch_tokens), checkpointed: {shape.layers} layer "
                               "inputs + the widest moment of one layer's backward"))
        output = head + tokens * (stream + 8) * shape.hidden
        plan.items.append(Item("update", "output-layer chunk" if chunk > 0 else "full logits", max(0.0, output - layer),
                               f"{head_note}: {output / GIB:.2f} GiB at its own moment, counted beyond the layer's"))
        if plan.engine == "vllm":
            plan.items.append(Item("update", "vLLM asleep", VLLM_ASLEEP_BYTES, f"sleep level {cfg.engine.sleep_level}; assumed"))
        return checkpointing
    per_layer = layer_activation_bytes(shape, p.act, stream, cfg.model.lora.r if p.lora else 0, casts=p.master)
    if checkpointing:
        activations = tokens * (shape.layers * stream * shape.hidden + per_layer)
        how = f"checkpointed: {shape.layers} layer inputs + 1 layer"
    else:
        activations = tokens * shape.layers * per_layer
        how = f"{shape.layers} layers x {per_layer / 1024:.0f} KiB per token"
    outside = tokens * ((4 + stream) * shape.hidden + stream * shape.hidden + width)  # final norm, kept rows, mask
    transient = tokens * 4 * (stream * shape.hidden + p.act * shape.intermediate)  # one layer's gradients in flight
    if p.master:  # autocast's 16-bit casts of the float32 weights (decoder linears and the head)
        copies = (shape.quantizable_params + shape.vocab * shape.hidden) * p.act
        plan.items.append(Item("update", "autocast weight copies", copies,
                               "16-bit casts of the float32 weights, kept until the forward ends"))
    plan.items.append(Item("update", "activations", activations + outside + transient,
                           f"{tokens} tokens (grpo.micro_batch_tokens), {how}"))
    if p.lora and p.act < 4 and shape.lora_linears:  # peft's float32 copy of each adapted linear's input
        kept = 1 if checkpointing else shape.layers
        plan.items.append(Item("update", "LoRA float32 inputs", tokens * kept * 4 * sum(i for _, i, _ in shape.lora_linears),
                               f"kept for the adapters' gradients, {kept} layer(s)"))
    plan.items.append(Item("update", "output-layer chunk" if chunk > 0 else "full logits", head, head_note))
    if plan.engine == "vllm":
        plan.items.append(Item("update", "vLLM asleep", VLLM_ASLEEP_BYTES, f"sleep level {cfg.engine.sleep_level}; assumed"))
    return checkpointing


def _plan_optimizer(plan: Plan, p: _Precision) -> None:
    """The optimizer step: the gradients and the multi-tensor AdamW temporary (and vLLM asleep);
    the states are resident."""
    plan.items.append(Item("optimizer", "gradients", p.trainable * p.train_bytes, ""))
    plan.items.append(Item("optimizer", "AdamW step temporary", p.trainable * p.train_bytes,
                           "one parameter-sized buffer of the multi-tensor step"))
    if plan.engine == "vllm":
        plan.items.append(Item("optimizer", "vLLM asleep", VLLM_ASLEEP_BYTES, "assumed"))


def _verdict(plan: Plan, cfg: Any, p: _Precision, checkpointing: bool) -> None:
    """Problems, each naming the keys to change, when a phase does not fit the room left."""
    room, total = plan.available - plan.margin, plan.total
    if plan.phase("update") > room:
        keys = ["grpo.micro_batch_tokens"]
        if not checkpointing:
            keys.append("model.gradient_checkpointing=true")
        chunk = cfg.grpo.logits_chunk_tokens
        if chunk == 0 or chunk > 512:
            keys.append("grpo.logits_chunk_tokens")
        if not p.lora:
            keys.append("model.lora.enabled=true")
        elif not p.four_bit and plan.device == "cuda":
            keys.append("model.load_in_4bit=true")
        plan.problems.append(
            f"the update needs {plan.phase('update') / GIB:.1f} GiB of {room / GIB:.1f} GiB: change "
            + ", ".join(keys)
        )
    if plan.phase("optimizer") > room:
        keys = ["model.lora.enabled=true"] if not p.lora else ["model.lora.r"]
        plan.problems.append(
            f"the optimizer step needs {plan.phase('optimizer') / GIB:.1f} GiB of {room / GIB:.1f} GiB "
            f"(gradients and AdamW's step buffer beside the weights and states): change {', '.join(keys)}"
        )
    if plan.engine != "vllm" and plan.phase("generate") > room:
        plan.problems.append(
            f"generation needs {plan.phase('generate') / GIB:.1f} GiB of {room / GIB:.1f} GiB: lower engine.gen_batch_tokens"
        )
    util = plan.engine_utilization
    if plan.engine == "vllm" and util is not None and plan.phase("resident") + util * total > room + 1e-9 * room:
        plan.problems.append(
            f"generation needs {(plan.phase('resident') + util * total) / GIB:.1f} GiB "
            f"(trainer {plan.phase('resident') / GIB:.1f} + engine {util:.2f} x {total / GIB:.1f}) "
            f"of {room / GIB:.1f} GiB: lower engine.gpu_memory_utilization (or 'auto')"
        )


# --------------------------------------------------------------------------- the machine
def gpu_memory(cfg: Any, mem_get_info: Callable[[], tuple[int, int]] | None = None) -> tuple[str, float | None, float | None, str]:
    """(device, available bytes, total bytes, source): the override, else the visible GPU, else CPU."""
    import torch

    override = cfg.train.gpu_memory_gib
    if override is not None:
        return "cuda", override * GIB, override * GIB, f"train.gpu_memory_gib={override:g}"
    if mem_get_info is None and torch.cuda.is_available():
        mem_get_info = torch.cuda.mem_get_info
    if mem_get_info is not None:
        try:
            free, total = mem_get_info()
            return "cuda", float(free), float(total), "torch.cuda.mem_get_info (free now)"
        except Exception as e:  # CUDA present but unusable: the device choice reports it
            return "cpu", None, None, f"CUDA unusable ({type(e).__name__})"
    return "cpu", _cpu_available(), None, "MemAvailable (CPU run)"


def _cpu_available() -> float | None:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def plan_run(cfg: Any, mem_get_info: Callable[[], tuple[int, int]] | None = None) -> Plan:
    """The plan for a run config on this machine (or against ``train.gpu_memory_gib``)."""
    import importlib.util

    device, available, total, source = gpu_memory(cfg, mem_get_info)
    shape = model_shape(cfg.model)
    plan = make_plan(cfg, shape, device, available, total, source,
                     vllm_present=cfg.train.gpu_memory_gib is not None or importlib.util.find_spec("vllm") is not None)
    if device == "cpu":
        plan.problems = []  # a CPU run is not refused on an estimate
    return plan


def engine_utilization(cfg: Any, model: Any, mem_get_info: Callable[[], tuple[int, int]] | None = None) -> float:
    """``engine.gpu_memory_utilization`` as vLLM takes it: the number, or for 'auto' what the
    GPU has free now (policy loaded) minus what the trainer allocates after the engine starts
    (AdamW's states, the weight check's base copy: :func:`to_come_after_engine`) and the margin."""
    from vigor_cli.errors import UserError

    util = cfg.engine.gpu_memory_utilization
    if util != "auto":
        return float(util)
    if mem_get_info is None:
        import torch

        if not torch.cuda.is_available():
            raise UserError("engine.gpu_memory_utilization=auto needs a visible CUDA GPU")
        mem_get_info = torch.cuda.mem_get_info
    free, total = mem_get_info()
    share = (free - to_come_after_engine(cfg, model) - MARGIN_BYTES - MARGIN_SHARE * total) / total
    share = math.floor(min(AUTO_UTILIZATION_CAP, share) * 100) / 100
    if share <= 0.05:
        raise UserError(
            f"engine.gpu_memory_utilization=auto: only {free / GIB:.1f} GiB of {total / GIB:.1f} GiB is free "
            "after loading the policy; use a smaller model, model.load_in_4bit, or a larger GPU"
        )
    return share


def to_come_after_engine(cfg: Any, model: Any) -> float:
    """Bytes the trainer allocates after the vLLM engine has started (:data:`AFTER_ENGINE_START`):
    AdamW's two states per trained parameter (in its dtype, as torch allocates them) and, when the weight
    check needs one, the frozen copy of the starting weights in the compute dtype."""
    from vigor_cli.model.base_copy import loads_base_copy

    trained = [p for p in model.parameters() if p.requires_grad]
    total = float(sum(2 * p.numel() * p.element_size() for p in trained))  # torch.zeros_like: the parameter's dtype
    if loads_base_copy(cfg, shares_policy=False):
        compute = getattr(model, "vigor_autocast_dtype", None)
        total += sum(p.numel() * (compute.itemsize if compute is not None else p.element_size())
                     for p in model.parameters())
    return total


# --------------------------------------------------------------------------- output
def render(plan: Plan) -> Any:
    """The plan as a rich table."""
    from rich.table import Table

    head = f"memory plan: {plan.model} on {plan.device}"
    if plan.available is not None:
        head += f", {plan.available / GIB:.1f} GiB available ({plan.source})"
    table = Table(title=head, title_justify="left")
    table.add_column("phase")
    table.add_column("what")
    table.add_column("GiB", justify="right")
    table.add_column("note")
    for phase in PHASES:
        items = [i for i in plan.items if i.phase == phase]
        for n, item in enumerate(items, 1):  # the resident rows close their own section: no empty row
            table.add_row(phase, item.name, f"{item.bytes / GIB:.2f}", item.note,
                          end_section=phase == "resident" and n == len(items))
        if phase != "resident":
            table.add_row(phase, "[bold]peak (with resident)[/]", f"[bold]{plan.phase(phase) / GIB:.2f}[/]", "", end_section=True)
    if plan.available is not None and plan.device == "cuda":
        util = f"engine.gpu_memory_utilization {plan.engine_utilization}" if plan.engine == "vllm" else f"engine {plan.engine}"
        table.caption = (f"{util}; headroom kept {plan.margin / GIB:.1f} GiB; "
                         + ("fits" if plan.fits else "DOES NOT FIT"))
    return table


def check(plan: Plan) -> None:
    """Refuse a plan that does not fit: one line naming the keys to change (exit 2)."""
    from vigor_cli.errors import UserError

    if plan.problems:
        raise UserError("memory plan: " + "; ".join(plan.problems))

