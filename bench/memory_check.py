"""The memory plan against an execution at full size, phase by phase, under fake tensors.

A run config's policy is built on the meta device and given fake CPU storage
(torch's FakeTensorMode: shapes and dtypes, no bytes), then vigor's own code runs each
phase of the plan: the transformers engine's generate call at the plan's batch, the
Learner's update (LoRA, checkpointing, chunked output layer) and its AdamW step. A tracker
of live tensor storages gives each phase's peak (the TRL path's update is not run).

    python bench/memory_check.py --config configs/qwen2.5-1.5b-math-vigor.yaml \\
        --set model.name_or_path=tests/fixtures/model_configs/Qwen2.5-1.5B --json out.json

Details: docs/gpu-memory.md ("Checked at full size").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from storage_tracker import StorageTracker  # noqa: E402

GIB = float(1 << 30)
PHASES = ("resident", "generate", "update", "optimizer")
UNSEEN = {
    "4-bit weights": "bitsandbytes has no fake-tensor path: NF4 linears are stood in for by "
                     "packed uint8 storage of NF4's size (4 bits + absmax + scales) that dequantises "
                     "to a 16-bit weight per call, as bitsandbytes' matmul_4bit does",
    "attention backend": "CPU attention (sdpa's math path) is what runs; flash/memory-efficient "
                         "kernels on CUDA keep less (no [heads, q, k] scores)",
    "cuBLAS workspace": "cuBLAS/cuBLASLt workspaces (tens of MiB per stream) are outside torch's tensors",
    "allocator fragmentation": "the CUDA caching allocator rounds and caches blocks: reserved > allocated",
    "vLLM": "vLLM's working memory and what it keeps asleep are the plan's assumptions "
            "(the engine compared here is transformers')",
}
"""What fake tensors cannot see, named beside every figure (docs/gpu-memory.md)."""


# --------------------------------------------------------------------------- the tracker
def _is_fake(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


class LiveStorages(StorageTracker):
    """Bytes of the tensor storages alive now, and their peak, over every storage an op
    creates while the mode is on (fake storages count their size: nothing is allocated).
    Python numbers read from a fake tensor (``float(t)``, ``bool(t)``, ``t.tolist()``) come back
    as 1 (False for a boolean): its values do not exist. Unlike :class:`StorageTracker` it
    counts an op's outputs by storage alone (fake storages have no address to compare)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is torch.ops.aten._local_scalar_dense.default and _is_fake(args[0]):
            return False if args[0].dtype == torch.bool else 1
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.add(t)
        return out

    def add(self, t: torch.Tensor) -> None:
        self.track(t.untyped_storage())


# --------------------------------------------------------------------------- 4-bit stand-in
NF4_BLOCK, NF4_SCALE_BLOCKS = 64, 256


def nf4_bytes(numel: int) -> int:
    """Bytes bitsandbytes' NF4 with double quantisation keeps for a weight of ``numel``
    entries: packed 4-bit codes, a uint8 absmax per 64 weights, a float32 scale (and offset)
    per 256 absmax blocks (bench/memory_check.py --nf4-layer checks it against bitsandbytes)."""
    blocks = -(-numel // NF4_BLOCK)
    return numel // 2 + blocks + 4 * -(-blocks // NF4_SCALE_BLOCKS)


def bitsandbytes_nf4_bytes(in_features: int, out_features: int) -> int:
    """Bytes bitsandbytes itself keeps for one NF4 linear layer (double quantisation), quantised
    on this machine's CPU: the packed codes, the absmax codes, their float32 scales and offset."""
    import bitsandbytes as bnb

    weight = torch.nn.Linear(in_features, out_features, bias=False, dtype=torch.bfloat16).weight.data
    layer = bnb.nn.Linear4bit(in_features, out_features, bias=False, compute_dtype=torch.bfloat16,
                              quant_type="nf4", compress_statistics=True)
    layer.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4", compress_statistics=True)
    layer = layer.to("cpu")
    state = layer.weight.quant_state
    parts = [layer.weight.data, state.absmax] + ([state.state2.absmax, state.offset] if state.nested else [])
    return sum(t.numel() * t.element_size() for t in parts)


class _NF4MatMul(torch.autograd.Function):
    """bitsandbytes' matmul_4bit's memory: the weight dequantised to the compute dtype for the
    call (forward, and again in backward), the compute-dtype input saved for backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, packed: torch.Tensor, out_features: int) -> torch.Tensor:
        w = packed.new_empty((out_features, x.shape[-1]), dtype=x.dtype)
        ctx.save_for_backward(x, packed)
        ctx.out_features = out_features
        return torch.nn.functional.linear(x, w)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x, packed = ctx.saved_tensors
        w = packed.new_empty((ctx.out_features, x.shape[-1]), dtype=grad.dtype)
        return grad @ w, None, None


class NF4Linear(torch.nn.Linear):
    """A linear layer whose weight is NF4 storage (uint8, :func:`nf4_bytes`), computed in
    ``compute_dtype`` and returned in its input's dtype (bitsandbytes' Linear4bit)."""

    def __init__(self, in_features: int, out_features: int, compute_dtype: torch.dtype, device: Any = None) -> None:
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features, self.compute_dtype = in_features, out_features, compute_dtype
        self.weight = torch.nn.Parameter(torch.empty(nf4_bytes(in_features * out_features), dtype=torch.uint8,
                                                           device=device),
                                         requires_grad=False)
        self.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _NF4MatMul.apply(x.to(self.compute_dtype), self.weight, self.out_features).to(x.dtype)


# --------------------------------------------------------------------------- the fake model
def _fake_from_pretrained(path: str, dtype: torch.dtype = torch.float32, quantization_config: Any = None,
                          **_: Any) -> Any:
    """What ``AutoModelForCausalLM.from_pretrained`` returns, built from config.json alone:
    on the meta device, then fake CPU storage (the ambient FakeTensorMode); under
    ``load_in_4bit`` the decoder's linear layers are :class:`NF4Linear`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from torch.utils._python_dispatch import _disable_current_modes

    config = AutoConfig.from_pretrained(path)
    with _disable_current_modes(), torch.device("meta"):  # real meta tensors, not fake ones
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if quantization_config is not None:
        head = model.get_output_embeddings()
        for module in list(model.modules()):
            for child_name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Linear) and child is not head:
                    setattr(module, child_name, NF4Linear(child.in_features, child.out_features, dtype, "meta"))
        model.is_loaded_in_4bit = True
    model.to_empty(device="cpu")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    model.eval()
    return model


@contextlib.contextmanager
def fake_loading() -> Iterator[None]:
    """vigor's ``load_policy`` unchanged, with the hub load replaced by :func:`_fake_from_pretrained`,
    the tokenizer by the bundled tiny model's (its ids pad and stop; the text is never read) and
    bitsandbytes' config by a marker."""
    from transformers import AutoModelForCausalLM

    from vigor_cli.model import loading as models

    saved = (AutoModelForCausalLM.__dict__["from_pretrained"], models.load_tokenizer, models._four_bit_config)
    AutoModelForCausalLM.from_pretrained = staticmethod(_fake_from_pretrained)  # type: ignore[assignment]
    models.load_tokenizer = lambda cfg, path=None: saved[1](cfg, str(models.TINY_DIR))
    models._four_bit_config = lambda dtype: SimpleNamespace(load_in_4bit=True, compute_dtype=dtype)
    try:
        yield
    finally:
        AutoModelForCausalLM.from_pretrained = saved[0]
        models.load_tokenizer, models._four_bit_config = saved[1], saved[2]


@contextlib.contextmanager
def fake_moves() -> Iterator[None]:
    """``Module.to`` on fake parameters: torch swaps fake tensors in place and refuses a tensor
    that has weak references, which FakeTensorMode itself keeps to every fake tensor it makes;
    the check is lifted for the run (nothing here relies on those references after a move)."""
    import torch.utils as tu

    original = tu.weakref
    tu.weakref = SimpleNamespace(getweakrefs=lambda t: [])  # type: ignore[assignment]
    try:
        yield
    finally:
        tu.weakref = original


@contextlib.contextmanager
def cuda_adamw() -> Iterator[None]:
    """AdamW as on CUDA: the multi-tensor (foreach) implementation, CUDA's default; on a CPU
    tensor torch picks the per-parameter loop, which keeps no parameter-sized temporary."""
    original = torch.optim.AdamW.__init__

    def init(self: Any, params: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("foreach", True)
        original(self, params, *args, **kwargs)

    torch.optim.AdamW.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.optim.AdamW.__init__ = original  # type: ignore[method-assign]


# --------------------------------------------------------------------------- the run
def gpu_config(path: str | None, sets: list[str]) -> Any:
    """The run config as a CUDA run resolves it, on the transformers engine: model.dtype 'auto'
    is bfloat16 and model.gradient_checkpointing 'auto' is on (a hub model on CUDA). The
    engine's weight check is off: a no-grad forward of a few rows, below the update's peak."""
    from vigor_cli.settings import build_config

    cfg = build_config(path, sets=sets)
    extra = ["engine.kind=hf", "engine.weight_check=off"]
    if cfg.model.dtype == "auto":
        extra.append("model.dtype=bfloat16")
    if cfg.model.gradient_checkpointing == "auto":
        extra.append(f"model.gradient_checkpointing={str(cfg.model.name_or_path != 'tiny').lower()}")
    return build_config(path, sets=[*sets, *extra])


def plan_for(cfg: Any) -> Any:
    from vigor_cli.model import memory_plan

    shape = memory_plan.model_shape(cfg.model)
    return memory_plan.make_plan(cfg, shape, "cuda", None, None, "bench/memory_check.py", vllm_present=False)


def _samples(cfg: Any, micro_batches: int, vocab: int) -> tuple[list[Any], dict[str, list[int]]]:
    """Rows that fill each micro-batch to grpo.micro_batch_tokens, as the plan counts it: the
    fewest rows of at most the run's width (prompts of task.max_prompt_tokens, completions up to
    the run's completion tokens), advantages of both signs (none is skipped)."""
    from vigor_cli.rollout.base import Rollout

    p, budget = cfg.task.max_prompt_tokens, cfg.grpo.micro_batch_tokens
    rows = -(-budget // (p + cfg.completion_tokens()))
    c = max(1, budget // rows - p)
    count = rows * micro_batches
    prompts = {f"u{i}": [3 + (i * 7 + j) % (vocab - 3) for j in range(p)] for i in range(count)}
    samples = [SimpleNamespace(uid=f"u{i}", advantage=1.0 if i % 2 else -1.0,
                               rollout=Rollout(token_ids=[5] * c, logprobs=[-1.0] * c, text="", truncated=False))
               for i in range(count)]
    return samples, prompts


def _generate_peak(cfg: Any, learner: Any, tracker: LiveStorages, full_decode: bool) -> float:
    """Peak of one generate call of the transformers engine (vigor_cli/rollout/hf.py) at the
    plan's batch: engine.gen_batch_tokens // (prompt + completion) rows of task.max_prompt_tokens.

    ``full_decode`` runs the engine's whole decode loop (minutes at full size under fake
    tensors). Otherwise its two widest moments run: the engine's prefill and first token
    (generate with one new token), and a decode step of the same model call against a cache
    already holding prompt + completion - 1 positions (filled by a forward whose transients are
    freed before the step is measured)."""
    from vigor_cli.model.loading import load_tokenizer
    from vigor_cli.rollout import make_engine
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.sampler import Sampler

    p, n = cfg.task.max_prompt_tokens, cfg.completion_tokens()
    rows = max(1, cfg.engine.gen_batch_tokens // (p + n))
    engine = make_engine(cfg, learner.model, load_tokenizer(cfg.model))
    prompts = [[3 + (i * 7 + j) % 1000 for j in range(p)] for i in range(rows)]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=n if full_decode else 1, seed=0)
    tracker.reset_peak()
    engine.generate(prompts, [1] * rows, params)
    peak = tracker.peak
    if full_decode or n < 2:
        return peak
    model, kwarg = learner.model, engine.cache_kwarg
    sampler = Sampler(1.0, 1.0, 0, torch.device("cpu"))
    was_training = model.training
    model.eval()
    with torch.no_grad():
        ids = torch.full((rows, p + n - 1), 5, dtype=torch.long)
        mask = torch.ones((rows, p + n), dtype=torch.long)
        past = model(input_ids=ids, attention_mask=mask[:, :-1], use_cache=True, logits_to_keep=1)[kwarg]
        tracker.reset_peak()
        out = model(input_ids=ids[:, -1:], attention_mask=mask, position_ids=torch.full((rows, 1), p + n - 1),
                    use_cache=True, logits_to_keep=1, **{kwarg: past})
        logits = sampler.scale(out.logits[:, -1, :])
        torch.log_softmax(logits, dim=-1).gather(-1, sampler.draw(logits).unsqueeze(-1))
        peak = max(peak, tracker.peak)
    model.train(was_training)
    return peak


def run_phases(cfg: Any, micro_batches: int = 2, generate: bool = True, full_decode: bool = False) -> dict[str, float]:
    """Execute each phase with vigor's own code under fake tensors; bytes alive at each peak."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vigor_cli.train.learner import Learner

    tracker, peaks = LiveStorages(), {}
    with FakeTensorMode(allow_non_fake_inputs=True), tracker, fake_loading(), fake_moves(), cuda_adamw():
        learner = Learner(cfg, None, {})
        samples, learner.prompt_ids = _samples(cfg, micro_batches, learner.model.config.vocab_size)
        # AdamW's states exist from the first step on: create them as the first step does
        for p in learner.trainable:
            p.grad = torch.zeros_like(p)
        learner.optimizer.step()
        learner.optimizer.zero_grad(set_to_none=True)
        peaks["resident"] = tracker.current
        if generate:
            peaks["generate"] = _generate_peak(cfg, learner, tracker, full_decode)
        step = learner.optimizer.step

        def measured_step(*args: Any, **kwargs: Any) -> Any:
            peaks["update"] = tracker.peak
            tracker.reset_peak()
            out = step(*args, **kwargs)
            peaks["optimizer"] = tracker.peak
            return out

        learner.optimizer.step = measured_step  # type: ignore[method-assign]
        tracker.reset_peak()
        with warnings.catch_warnings():  # the scheduler notices the wrapped step; the order is the learner's
            warnings.filterwarnings("ignore", message="Seems like `optimizer.step\\(\\)` has been overridden")
            learner.update(samples)
    return peaks


def check(config: str | None, sets: list[str], micro_batches: int = 2, generate: bool = True,
          full_decode: bool = False) -> dict:
    """Plan and execution of one config: the JSON memory_check writes."""
    cfg = gpu_config(config, sets)
    plan = plan_for(cfg)
    t0 = time.perf_counter()
    executed = run_phases(cfg, micro_batches, generate, full_decode)
    seconds = time.perf_counter() - t0
    rows = []
    for phase in PHASES:
        if phase not in executed:
            continue
        planned = plan.phase(phase)
        rows.append({"phase": phase, "planned_gib": round(planned / GIB, 3), "executed_gib": round(executed[phase] / GIB, 3),
                     "ratio": round(executed[phase] / planned, 3)})
    m = cfg.model
    return {
        "config": config, "sets": sets, "model": Path(str(m.name_or_path)).name,
        "run": {"dtype": m.dtype, "load_in_4bit": m.load_in_4bit, "lora_r": m.lora.r if m.lora.enabled else None,
                "gradient_checkpointing": m.gradient_checkpointing, "micro_batch_tokens": cfg.grpo.micro_batch_tokens,
                "logits_chunk_tokens": cfg.grpo.logits_chunk_tokens, "gen_batch_tokens": cfg.engine.gen_batch_tokens,
                "max_prompt_tokens": cfg.task.max_prompt_tokens, "completion_tokens": cfg.completion_tokens(),
                "micro_batches": micro_batches, "full_decode": full_decode},
        "phases": rows, "seconds": round(seconds, 1),
        "plan_items": [{"phase": i.phase, "name": i.name, "gib": round(i.bytes / GIB, 3)} for i in plan.items],
        "not_seen": UNSEEN,
    }


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    run = result["run"]
    title = (f"{result['model']}: plan vs execution under fake tensors (GiB, live tensor storages), "
             f"{run['dtype']}{', NF4 base' if run['load_in_4bit'] else ''}"
             f"{', LoRA r=' + str(run['lora_r']) if run['lora_r'] else ', full fine-tuning'}")
    table = Table(title=title, title_justify="left")
    for col in ("phase", "planned GiB", "executed GiB", "executed / planned"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for r in result["phases"]:
        table.add_row(r["phase"], f"{r['planned_gib']:.2f}", f"{r['executed_gib']:.2f}", f"{r['ratio']:.3f}")
    table.caption = "not seen by fake tensors: " + "; ".join(UNSEEN)
    Console(width=140).print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="a run config (as vigor train --config)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key (as vigor train --set); model.name_or_path may be a folder "
                         "holding only config.json")
    ap.add_argument("--json", type=Path, help="write the result here")
    ap.add_argument("--micro-batches", type=int, default=2,
                    help="micro-batches of the update (the second runs with the first's gradients alive)")
    ap.add_argument("--no-generate", action="store_true", help="leave out the generation phase")
    ap.add_argument("--nf4-layer", metavar="IN,OUT",
                    help="quantise one IN x OUT linear layer with bitsandbytes on this CPU and compare its bytes "
                         "with the stand-in's and the plan's, then exit")
    ap.add_argument("--full-decode", action="store_true",
                    help="run the engine's whole decode loop (minutes) instead of its prefill and its last step")
    args = ap.parse_args(argv)
    from vigor_cli.errors import UserError

    if args.nf4_layer:
        from vigor_cli.model.memory_plan import NF4_BYTES_PER_PARAM

        i, o = (int(x) for x in args.nf4_layer.split(","))
        real = bitsandbytes_nf4_bytes(i, o)
        print(f"{i} x {o} NF4 layer: bitsandbytes {real} bytes, stand-in {nf4_bytes(i * o)}, "
              f"plan {i * o * NF4_BYTES_PER_PARAM:.0f}")
        return 0

    try:
        result = check(args.config, args.set, args.micro_batches, not args.no_generate, args.full_decode)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_table(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
