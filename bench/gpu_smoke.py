"""GPU smoke check: what vigor does on a GPU, one verdict per check, every check able to fail.

Run it first on a GPU (about 8 minutes on one H100-class GPU; nothing is downloaded)::

    python bench/gpu_smoke.py                      # every check this machine can run
    python bench/gpu_smoke.py --only memory,sampling
    python bench/gpu_smoke.py --model tiny         # the bundled tiny model instead (faster)

The model has Qwen2.5-1.5B's shape (``tests/fixtures/model_configs/Qwen2.5-1.5B/config.json``:
28 layers, hidden 1536, vocabulary 151936) and random weights; it is saved in bf16 with the
bundled tiny model's tokenizer into a temporary directory. What it samples is noise, which is
all these checks need; the vLLM trainer check, which needs a policy that learns, uses the
tiny model.

Checks on CUDA (one child process, the model built first):

- ``memory``: the memory plan (``vigor_cli/memory_plan.py``) against
  ``torch.cuda.max_memory_allocated`` for one transformers generation call, one LoRA update
  and one full fine-tuning update with float32 master weights (``Learner.update``, the
  trainer's code), and against ``torch.cuda.memory_allocated`` for the full fine-tuning
  policy and the weight check's frozen base copy. A check fails when the measurement exceeds
  the plan by more than ``--under`` or the plan exceeds it by more than ``--over``.
- ``logprobs``: the chunked completion-only log-probs (``grpo.logits_chunk_tokens``) against the
  full-logits path, at temperatures 1.0 and 0.7.
- ``merge``: every weight the engine is sent (``rollout/weights.py``: LoRA merged as
  base + (alpha/r)·B·A) against that sum computed here in float64, after every B moved by a
  seeded delta; the names are the checkpoint's.
- ``sampling``: the transformers engine at temperatures 0.7 and 1.0: its log-probs equal the
  policy's recomputed at that temperature (and, at 0.7, not those at 1.0: the log-prob mode
  is visible), and its tokens follow softmax(logits / T): over the sampled tokens the mean of
  log p_T + H_T is 0 within ``--z`` standard errors.
- ``train``: ``vigor train`` (transformers engine, LoRA) for 3 steps, then ``--resume`` to 4.

With vllm and bitsandbytes importable, each in its own child process (vLLM holds a share of
the GPU): ``engine`` (bf16 policy with LoRA) and ``engine-4bit`` (NF4 + LoRA through the
trainer's loader) check, at temperatures 1.0 and 0.7, that the weight check says
not-discriminating at step 1, that a known LoRA delta moves the policy at least ``--min-gap``
from the base, that a pushed tensor reads back from vLLM bit for bit, that the engine tracks
the policy, that pushing the base on purpose makes the check say stale, and that each sleep
gives the engine's memory back; ``trainer-vllm`` runs 3 steps of ``vigor train --engine vllm
--load-in-4bit`` on the tiny model with ``engine.weight_check=error``.

Prints a verdict per check (PASS, FAIL, SKIP) and a summary, writes
``bench/results/gpu_smoke.json``. Exit codes: 0 every check that ran passed; 1 a check failed;
2 bad arguments; 3 no CUDA GPU here (one line; nothing ran).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RESULTS = REPO / "bench" / "results" / "gpu_smoke.json"
TINY = str(REPO / "vigor_cli" / "assets" / "tiny")
SHAPE = REPO / "tests" / "fixtures" / "model_configs" / "Qwen2.5-1.5B"
UNAVAILABLE = 3
CORE_CHECKS = ("memory", "logprobs", "merge", "sampling", "train")
VLLM_CHECKS = ("engine", "engine-4bit", "trainer-vllm")
QUESTIONS = [f"{a}+{b}=" for a in range(3, 19) for b in (4, 7)]
READBACK = "model.layers.0.mlp.down_proj.weight"
TEMPERATURES = (1.0, 0.7)
GIB = float(1 << 30)


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(CORE_CHECKS + VLLM_CHECKS),
                   help=f"comma-separated checks (default all): {', '.join(CORE_CHECKS + VLLM_CHECKS)}")
    p.add_argument("--model", default="qwen2.5-1.5b-shape",
                   help="'qwen2.5-1.5b-shape' (random weights, default), 'tiny', or a model directory")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--micro-batch-tokens", type=int, default=8192, help="grpo.micro_batch_tokens of the update checks")
    p.add_argument("--gen-batch-tokens", type=int, default=8192, help="engine.gen_batch_tokens of the generation check")
    p.add_argument("--under", type=float, default=0.10, help="measured may exceed the plan by this share")
    p.add_argument("--over", type=float, default=0.60, help="the plan may exceed the measurement by this share")
    p.add_argument("--logprob-tol", type=float, default=0.01, help="chunked vs full: mean |difference| allowed")
    p.add_argument("--logprob-max", type=float, default=0.1, help="chunked vs full: largest |difference| allowed")
    p.add_argument("--z", type=float, default=4.0, help="sampling: standard errors allowed")
    p.add_argument("--rollouts", type=int, default=4, help="vLLM checks: samples per prompt")
    p.add_argument("--questions", type=int, default=16, help=f"vLLM checks: prompts (at most {len(QUESTIONS)})")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument("--delta", type=float, default=0.1, help="std of the seeded change added to every LoRA B")
    p.add_argument("--min-gap", type=float, default=0.05, help="vLLM: policy vs base, mean |log-prob| per token, after the delta")
    p.add_argument("--memory-slack-gib", type=float, default=1.0)
    p.add_argument("--timeout", type=int, default=420, help="seconds allowed to each child process")
    p.add_argument("--json", type=Path, default=RESULTS)
    p.add_argument("--group", help=argparse.SUPPRESS)  # a child: core, or one vLLM check
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = set(args.only.split(",")) - set(CORE_CHECKS + VLLM_CHECKS)
    if unknown:
        p.error(f"--only: unknown check(s) {', '.join(sorted(unknown))}")
    return args


class Verdicts:
    def __init__(self, say: Callable[[str], None] = print):
        self.rows: list[dict] = []
        self.say = say

    def add(self, name: str, ok: bool | None, detail: str) -> bool:
        word = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
        self.say(f"{word}  {name}: {detail}")
        self.rows.append({"check": name, "verdict": word, "detail": detail})
        return bool(ok)

    @property
    def failed(self) -> bool:
        return any(r["verdict"] == "FAIL" for r in self.rows)


# --------------------------------------------------------------------------- measuring
class CudaMeter:
    """Bytes allocated by PyTorch on the GPU since :meth:`start` (now, and the peak)."""

    def start(self) -> None:
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.base = torch.cuda.memory_allocated()

    def now(self) -> float:
        import torch

        torch.cuda.synchronize()
        return float(torch.cuda.memory_allocated() - self.base)

    def peak(self) -> float:
        import torch

        torch.cuda.synchronize()
        return float(torch.cuda.max_memory_allocated() - self.base)

    def free_total(self) -> tuple[float | None, float | None]:
        import torch

        free, total = torch.cuda.mem_get_info()
        return float(free), float(total)


@dataclass
class Context:
    """What every check needs: the model directory, the device, the arguments, the meter."""

    model_dir: str
    device: Any
    args: argparse.Namespace
    meter: Any
    results: dict = field(default_factory=dict)


def _release() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _config(ctx: Context, *sets: str) -> Any:
    from vigor_cli.settings import build_config

    a = ctx.args
    return build_config(sets=[
        f"model.name_or_path={ctx.model_dir}", "engine.kind=hf", f"task.max_prompt_tokens={a.prompt_tokens}",
        f"sampling.max_new_tokens={a.new_tokens}", f"grpo.micro_batch_tokens={a.micro_batch_tokens}",
        "grpo.logits_chunk_tokens=512", f"engine.gen_batch_tokens={a.gen_batch_tokens}", "model.lora.r=16",
        "model.lora.alpha=32", *sets])


def _plan(ctx: Context, cfg: Any, free: float | None = None, total: float | None = None) -> Any:
    from vigor_cli import memory_plan as mp

    return mp.make_plan(cfg, mp.model_shape(cfg.model), ctx.device.type, free, total, "gpu smoke")


def _random_rows(vocab: int, rows: int, width: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(width)] for _ in range(rows)]


def judge_memory(v: Verdicts, name: str, planned: float, measured: float, under: float, over: float) -> bool:
    """The plan must hold what was measured (within ``under``) and not exceed it by more than ``over``."""
    ratio = measured / planned if planned > 0 else math.inf
    ok = measured <= planned * (1 + under) and planned <= measured * (1 + over)
    return v.add(name, ok, f"planned {planned / GIB:.3f} GiB, measured {measured / GIB:.3f} GiB "
                           f"({ratio:.2f} x the plan; allowed {1 / (1 + over):.2f} to {1 + under:.2f})")


# --------------------------------------------------------------------------- memory
def _update_samples(vocab: int, cfg: Any) -> tuple[dict, list]:
    """Rows filling one micro-batch exactly (prompt + completion = task.max_prompt_tokens +
    sampling.max_new_tokens each), advantages +-1 so every row runs forward and backward."""
    p, c = cfg.task.max_prompt_tokens, cfg.sampling.max_new_tokens
    rows = max(1, cfg.grpo.micro_batch_tokens // (p + c))
    prompts = _random_rows(vocab, rows, p, 1)
    completions = _random_rows(vocab, rows, c, 2)
    prompt_ids = {f"u{i}": prompts[i] for i in range(rows)}
    samples = [SimpleNamespace(uid=f"u{i}", advantage=1.0 if i % 2 else -1.0,
                               rollout=SimpleNamespace(token_ids=completions[i], logprobs=[-12.0] * c,
                                                       truncated=False))
               for i in range(rows)]
    return prompt_ids, samples


class OwnWeightsEngine:
    """An engine that keeps its own copy of the weights (as vLLM does): the weight check then
    loads its frozen base copy and importance sampling turns on (``Learner.watch_engine``)."""

    shares_policy = False


def memory_generate(ctx: Context, v: Verdicts) -> None:
    from vigor_cli.models import load_policy
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.hf import HFEngine

    cfg = _config(ctx)
    plan = _plan(ctx, cfg)
    policy, tokenizer, _ = load_policy(cfg.model)
    engine = HFEngine(policy, tokenizer, gen_batch_tokens=cfg.engine.gen_batch_tokens)
    rows = max(1, cfg.engine.gen_batch_tokens // (cfg.task.max_prompt_tokens + cfg.sampling.max_new_tokens))
    prompts = _random_rows(policy.config.vocab_size, rows, cfg.task.max_prompt_tokens, 3)
    ctx.meter.start()
    engine.generate(prompts, [1] * rows, SamplingParams(temperature=1.0, max_new_tokens=cfg.sampling.max_new_tokens, seed=0))
    measured = ctx.meter.peak()
    planned = plan.phase("generate") - plan.phase("resident")
    ctx.results["memory_generate"] = {"planned_gib": planned / GIB, "measured_gib": measured / GIB, "rows": rows}
    judge_memory(v, "memory: one transformers generation call", planned, measured, ctx.args.under, ctx.args.over)
    del policy, engine
    _release()


def memory_update(ctx: Context, v: Verdicts, lora: bool) -> None:
    """One Learner.update: LoRA, or full fine-tuning (float32 master weights, the weight check's
    frozen base copy as with vLLM) with its resident weights measured as they load."""
    from vigor_cli import memory_plan as mp
    from vigor_cli.learner import Learner
    from vigor_cli.models import load_tokenizer

    what = "LoRA" if lora else "full fine-tuning"
    # full fine-tuning as with vLLM: the plan and the learner then count and load the base copy
    cfg = _config(ctx, f"model.lora.enabled={str(lora).lower()}", *(() if lora else ("engine.kind=vllm",)))
    free, total = ctx.meter.free_total()
    shape = mp.model_shape(cfg.model)
    plan = mp.make_plan(cfg, shape, ctx.device.type, free, total, "gpu smoke")
    if not plan.fits:
        v.add(f"memory: one {what} update", None, "does not fit this GPU: " + "; ".join(plan.problems))
        return
    items = {i.name: i.bytes for i in plan.items}
    prompt_ids, samples = _update_samples(shape.vocab, cfg)
    ctx.meter.start()
    learner = Learner(cfg, load_tokenizer(cfg.model).pad_token_id, prompt_ids)
    loaded = ctx.meter.now()
    if not lora:
        judge_memory(v, "memory: full fine-tuning policy (float32 master weights)", items["policy weights"],
                     loaded, ctx.args.under, ctx.args.over)
        ctx.meter.start()
        learner.watch_engine(OwnWeightsEngine())
        judge_memory(v, "memory: the weight check's frozen base copy", items[mp.BASE_COPY], ctx.meter.now(),
                     ctx.args.under, ctx.args.over)
    ctx.meter.start()
    metrics = learner.update(samples)
    measured = ctx.meter.peak()
    planned = plan.allocated_by_update()
    ctx.results[f"memory_update_{'lora' if lora else 'full'}"] = {
        "planned_gib": planned / GIB, "measured_gib": measured / GIB, "loaded_gib": loaded / GIB,
        "items_gib": {k: b / GIB for k, b in items.items()}, "grad_norm": metrics["losses/grad_norm"]}
    judge_memory(v, f"memory: one {what} update ({cfg.grpo.micro_batch_tokens} tokens)", planned, measured,
                 ctx.args.under, ctx.args.over)
    del learner
    _release()


def check_memory(ctx: Context, v: Verdicts) -> None:
    if ctx.meter is None:
        v.add("memory", None, "no CUDA: torch.cuda.max_memory_allocated not available")
        return
    memory_generate(ctx, v)
    memory_update(ctx, v, lora=True)
    memory_update(ctx, v, lora=False)


# --------------------------------------------------------------------------- log-probs
def check_logprobs(ctx: Context, v: Verdicts) -> None:
    import torch

    from vigor_cli import logprobs
    from vigor_cli.models import load_policy

    cfg = _config(ctx)
    policy, tokenizer, device = load_policy(cfg.model)
    vocab = policy.config.vocab_size
    batch = logprobs.make_batch(_random_rows(vocab, 8, ctx.args.prompt_tokens, 4),
                                _random_rows(vocab, 8, ctx.args.new_tokens, 5), tokenizer.pad_token_id or 0)
    mask = batch.mask.to(device).bool()
    for t in TEMPERATURES:
        with torch.no_grad():
            lp_c, ent_c = logprobs.completion_logprobs(policy, batch, device, t, 512)
            lp_f, ent_f = logprobs.full_logprobs(policy, batch, device, t)
        d = (lp_c - lp_f)[mask].abs()
        de = (ent_c - ent_f)[mask].abs()
        mean, worst, ent = float(d.mean()), float(d.max()), float(de.mean())
        ok = mean <= ctx.args.logprob_tol and worst <= ctx.args.logprob_max and ent <= ctx.args.logprob_tol
        v.add(f"logprobs: chunked = full (T={t})", ok,
              f"mean |difference| {mean:.2e}, largest {worst:.2e}, entropy mean |difference| {ent:.2e} over "
              f"{int(mask.sum())} tokens (allowed mean {ctx.args.logprob_tol}, largest {ctx.args.logprob_max})")
    del policy
    _release()


# --------------------------------------------------------------------------- merge
def _perturb(policy: Any, delta: float, seed: int = 0) -> int:
    """Add a seeded N(0, delta) change to every LoRA B (in place: the policy version changes)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.add_((torch.randn(p.shape, generator=g) * delta).to(p.device, p.dtype))
                n += 1
    return n


def _checkpoint_names(model_dir: str) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for f in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(f), "pt") as s:
            names |= set(s.keys())
    return names


def check_merge(ctx: Context, v: Verdicts) -> None:
    import torch
    from peft.tuners.lora import LoraLayer

    from vigor_cli.models import load_policy
    from vigor_cli.rollout.weights import policy_weights

    cfg = _config(ctx)
    policy = load_policy(cfg.model)[0]
    _perturb(policy, ctx.args.delta)
    root = policy.get_base_model()
    layers = {f"{path}.weight": m for path, m in root.named_modules() if isinstance(m, LoraLayer)}
    names, wrong, moved, worst = set(), [], 0, 0.0
    for name, sent in policy_weights(policy, torch.bfloat16):
        names.add(name)
        layer = layers.get(name)
        if layer is None:
            continue
        adapter = policy.active_adapter
        base = layer.get_base_layer().weight.detach().double()
        a, b = layer.lora_A[adapter].weight.detach().double(), layer.lora_B[adapter].weight.detach().double()
        scaling = layer.scaling[adapter]
        want = base + scaling * (b @ a)
        err = (sent.double() - want).abs()
        # bf16 rounding (half a unit in the last place) of a sum computed in float32 (a few float32
        # units of its terms' size: where base and delta cancel, that is all that is left)
        allowed = want.abs() * 2.0 ** -8 * 1.001 + 2.0 ** -21 * (base.abs() + scaling * (b.abs() @ a.abs()))
        worst = max(worst, float((err / (allowed + 1e-30)).max()))
        if not bool((err <= allowed).all()):
            wrong.append(name)
        if bool(((sent.double() - base).abs() > base.abs() * 2.0 ** -7).any()):
            moved += 1
    expected = _checkpoint_names(ctx.model_dir)
    ok = not wrong and moved == len(layers) > 0 and names == expected
    v.add("merge: pushed weights = base + (alpha/r)·B·A", ok,
          f"{len(layers)} LoRA layers, {len(wrong)} off by more than bf16 rounding ({wrong[:2]}), "
          f"{moved} moved from the base, largest error {worst:.2f} x its rounding allowance; "
          f"names {'match' if names == expected else 'DIFFER from'} the checkpoint's ({len(names)} vs {len(expected)})")
    del policy
    _release()


# --------------------------------------------------------------------------- sampling
def sampling_verdicts(v: Verdicts, t: float, err_t: float, err_1: float, z: float, threshold: float,
                      z_max: float, tokens: int) -> None:
    """The engine's log-probs are the policy's at T (and, at T != 1, visibly not those at 1);
    its tokens follow softmax(logits / T)."""
    mode_ok = err_t <= threshold and (t == 1.0 or 2 * err_t < err_1)
    v.add(f"sampling: engine log-probs are the policy's at T={t}", mode_ok,
          f"mean |engine - policy at T| {err_t:.2e}, at T=1 {err_1:.2e} nats/token over {tokens} tokens "
          f"(allowed {threshold}; at T != 1 the T=1 distance must be over twice the T one)")
    v.add(f"sampling: tokens follow softmax(logits/T) at T={t}", abs(z) <= z_max,
          f"mean of log p_T + H_T over the sampled tokens is {z:+.2f} standard errors from 0 (allowed {z_max})")


def check_sampling(ctx: Context, v: Verdicts, engine_factory: Callable | None = None) -> None:
    import torch

    from vigor_cli import logprobs
    from vigor_cli.config import EngineConfig
    from vigor_cli.models import load_policy
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.hf import HFEngine

    cfg = _config(ctx)
    policy, tokenizer, device = load_policy(cfg.model)
    make = engine_factory or (lambda m, tok: HFEngine(m, tok, gen_batch_tokens=cfg.engine.gen_batch_tokens))
    engine = make(policy, tokenizer)
    prompts = _random_rows(min(policy.config.vocab_size, len(tokenizer)), 16, ctx.args.prompt_tokens, 6)
    threshold = EngineConfig().logprob_check_threshold
    for t in (0.7, 1.0):
        groups = engine.generate(prompts, [4] * len(prompts), SamplingParams(temperature=t, max_new_tokens=ctx.args.new_tokens, seed=7))
        rows = [(p, r) for p, g in zip(prompts, groups) for r in g if r.token_ids]
        batch = logprobs.make_batch([p for p, _ in rows], [r.token_ids for _, r in rows], tokenizer.pad_token_id or 0)
        mask = batch.mask.to(device).bool()
        engine_lp = torch.zeros(mask.shape, device=device)
        for k, (_, r) in enumerate(rows):
            engine_lp[k, : len(r.logprobs)] = torch.tensor(r.logprobs, device=device)
        with torch.no_grad():
            lp_t, ent_t = logprobs.completion_logprobs(policy, batch, device, t, 512)
            lp_1, _ = logprobs.completion_logprobs(policy, batch, device, 1.0, 512)
        err_t = float((engine_lp - lp_t)[mask].abs().mean())
        err_1 = float((engine_lp - lp_1)[mask].abs().mean())
        s = (lp_t + ent_t)[mask].double()
        z = float(s.mean() / (s.std() / math.sqrt(s.numel()))) if s.numel() > 1 and float(s.std()) > 0 else 0.0
        ctx.results[f"sampling_T{t}"] = {"err_t": err_t, "err_1": err_1, "z": z, "tokens": int(mask.sum())}
        sampling_verdicts(v, t, err_t, err_1, z, threshold, ctx.args.z, int(mask.sum()))
    del policy, engine
    _release()


# --------------------------------------------------------------------------- vigor train
def _steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [m["step"] for m in lines if "losses/loss" in m]


def check_train(ctx: Context, v: Verdicts, run: Callable = subprocess.run) -> None:
    """`vigor train` for 3 steps (transformers engine, LoRA), then --resume to step 4."""
    out = Path(tempfile.mkdtemp(prefix="vigor-gpu-smoke-train-"))
    base = [sys.executable, "-m", "vigor_cli", "train"]
    first = base + ["--config", str(REPO / "configs" / "tiny-math.yaml"), "--model", ctx.model_dir,
                    "--engine", "hf", "--steps", "3", "--output-dir", str(out), "--run-name", "smoke",
                    "--set", "model.lora.enabled=true", "--set", "train.prompts_per_step=8",
                    "--set", "train.eval_limit=8", "--set", "train.eval_every=0", "--set", "train.save_every=0",
                    "--set", f"sampling.max_new_tokens={min(ctx.args.new_tokens, 16)}", "--set", "grpo.beta=0.01"]
    rundir = out / "smoke"
    t0 = time.perf_counter()
    done = run(first, cwd=REPO, capture_output=True, text=True, timeout=ctx.args.timeout)
    steps = _steps(rundir)
    tail = (done.stderr.strip().splitlines() or [""])[-1][:200]
    v.add("train: vigor train, 3 steps", done.returncode == 0 and steps == [1, 2, 3],
          f"exit {done.returncode}, steps logged {steps}; {tail}")
    again = run(base + ["--resume", str(rundir), "--steps", "4"], cwd=REPO, capture_output=True, text=True,
                timeout=ctx.args.timeout)
    resumed = _steps(rundir)
    tail = (again.stderr.strip().splitlines() or [""])[-1][:200]
    v.add("train: --resume continues to step 4", again.returncode == 0 and resumed == [1, 2, 3, 4],
          f"exit {again.returncode}, steps logged {resumed}; {tail}")
    ctx.results["train"] = {"wall_s": time.perf_counter() - t0, "run_dir": rundir.name}


CORE = {"memory": check_memory, "logprobs": check_logprobs, "merge": check_merge, "sampling": check_sampling,
        "train": check_train}


# --------------------------------------------------------------------------- vLLM
def _free_gib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0] / GIB


def _total_gib() -> float | None:
    import torch

    return torch.cuda.mem_get_info()[1] / GIB if torch.cuda.is_available() else None


def _recompute(model: Any, rows: list[tuple[list[int], list[int]]], temperature: float) -> list[list[float]]:
    """Per row, log-probs of the completion tokens under softmax(logits / T)."""
    import torch

    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for prompt, completion in rows:
            ids = torch.tensor([list(prompt) + list(completion)], device=device)
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
            lp = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt):, None])[:, 0]
            out.append(lp.tolist())
    return out


def weight_check(engine: Any, policy: Any, prompts: list[list[int]], args: Any, seed: int, temperature: float) -> Any:
    """Sample with the engine at ``temperature``, score the samples with engine, policy and base
    (adapter off) at that temperature; the importance-sampling ratio's mean rides along."""
    from vigor_cli.config import EngineConfig
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.weight_check import WeightCheckSums

    sampling = SamplingParams(temperature=temperature, max_new_tokens=args.new_tokens, seed=seed)
    groups = engine.generate(prompts, [args.rollouts] * len(prompts), sampling)
    rows = [(p, r) for p, g in zip(prompts, groups) for r in g if r.token_ids]
    pairs = [(p, r.token_ids) for p, r in rows]
    policy_lp = _recompute(policy, pairs, temperature)
    with policy.disable_adapter():
        base_lp = _recompute(policy, pairs, temperature)
    sums = WeightCheckSums()
    ratios = []
    for (_, r), p_lp, b_lp in zip(rows, policy_lp, base_lp):
        sums.add(r.logprobs, p_lp, b_lp)
        ratios += [math.exp(max(-20.0, min(20.0, p - e))) for p, e in zip(p_lp, r.logprobs)]
    result = sums.result(EngineConfig().logprob_check_threshold)
    result.is_ratio_mean = sum(ratios) / max(len(ratios), 1)
    return result


def _pushed(policy: Any, name: str) -> Any:
    from vigor_cli.rollout.weights import policy_weights

    for n, t in policy_weights(policy):
        if n == name:
            return t.detach().cpu()
    raise KeyError(name)


def _readback(engine: Any, name: str) -> Any:
    """The engine model's copy of ``name`` (fetched through LLM.apply_model, in process)."""
    return engine.llm.apply_model(lambda m: m.get_parameter(name).detach().cpu().clone())[0]


def run_engine(args: Any, four_bit: bool, v: Verdicts, vllm_api: Any = None, model_dir: str | None = None) -> dict:
    """The vLLM engine checks (module docstring), each at temperatures 1.0 and 0.7."""
    import torch

    from vigor_cli.config import RunConfig
    from vigor_cli.models import load_policy
    from vigor_cli.rollout.vllm import VLLMEngine

    cfg = RunConfig()
    cfg.model.name_or_path = model_dir or args.model_dir or TINY
    cfg.model.load_in_4bit = four_bit
    cfg.model.lora.enabled = True
    cfg.model.lora.r, cfg.model.lora.alpha = 8, 16
    cfg.sampling.max_new_tokens = args.new_tokens
    cfg.task.max_prompt_tokens = 64
    cfg.engine.gpu_memory_utilization = args.gpu_memory_utilization
    cfg.engine.enforce_eager = True  # a smoke run: start fast
    policy, tokenizer, _ = load_policy(cfg.model)  # the trainer's loader (4-bit: NF4 + k-bit prep)
    policy.eval()
    prompts = [tokenizer(q, add_special_tokens=False)["input_ids"] for q in QUESTIONS[: args.questions]]
    memory: dict[str, list] = {"free_before_engine_gib": _free_gib(), "total_gib": _total_gib(),
                               "awake_free_gib": [], "asleep_free_gib": []}
    t0 = time.perf_counter()
    engine = VLLMEngine(cfg, policy, tokenizer, vllm_api=vllm_api)
    startup = time.perf_counter() - t0
    memory["after_start_asleep_free_gib"] = _free_gib()

    def phase(seed: int, push_base: bool = False) -> dict:
        engine._begin_generation()  # wake weights, push if changed, wake KV cache
        if push_base:
            with policy.disable_adapter():
                engine._push()
            engine.llm.reset_prefix_cache()
        memory["awake_free_gib"].append(_free_gib())
        result = {t: weight_check(engine, policy, prompts, args, seed, t) for t in TEMPERATURES}
        engine.end_generation()
        memory["asleep_free_gib"].append(_free_gib())
        return result

    def each(name: str, results: dict, want: str) -> None:
        for t, r in results.items():
            v.add(f"{name} (T={t})", r.status == want, r.describe())

    results = {"step1": phase(1)}
    each("step 1 not yet discriminating", results["step1"], "not-discriminating")
    changed = _perturb(policy, args.delta)
    engine.sync_weights(policy)
    results["pushed"] = phase(2)
    for t, r in results["pushed"].items():
        v.add(f"policy far from base (T={t})", changed > 0 and r.policy_base >= args.min_gap,
              f"{changed} LoRA B matrices moved by N(0, {args.delta}); mean |policy - base| {r.policy_base:.4g} "
              f"nats/token (need >= {args.min_gap})")
    engine._begin_generation()
    back = _readback(engine, READBACK)
    expected = _pushed(policy, READBACK)
    with policy.disable_adapter():
        base = _pushed(policy, READBACK)
    engine.end_generation()
    same = back.shape == expected.shape and torch.equal(back.to(expected.dtype), expected)
    v.add("readback", same and not torch.equal(expected, base),
          f"{READBACK} read from the engine {'equals' if same else 'DIFFERS from'} the pushed merged "
          f"weight; max |pushed - base| {float((expected.float() - base.float()).abs().max()):.3g}")
    each("engine tracks policy", results["pushed"], "ok")
    results["base_pushed"] = phase(3, push_base=True)
    each("check can fail (base pushed on purpose)", results["base_pushed"], "stale")
    engine.sync_weights(policy)
    engine._engine_version = None  # the base is in the engine now: force the next push
    results["repushed"] = phase(4)
    each("engine tracks policy again", results["repushed"], "ok")
    _memory_verdicts(args, memory, v)
    engine.close()
    return {"variant": "engine-4bit" if four_bit else "engine", "startup_s": startup, "memory": memory,
            "engine_memory": engine.memory_report(),
            "checks": {f"{k} T={t}": {"status": r.status, "engine_policy": r.engine_policy, "policy_base": r.policy_base,
                                      "engine_base": r.engine_base, "tokens": r.tokens, "is_ratio_mean": r.is_ratio_mean}
                       for k, by_t in results.items() for t, r in by_t.items()}}


def _memory_verdicts(args: Any, memory: dict, v: Verdicts) -> None:
    before, total = memory["free_before_engine_gib"], memory["total_gib"]
    if before is None:
        v.add("memory", None, "no CUDA: not measured")
        return
    slack = args.memory_slack_gib
    budget = args.gpu_memory_utilization * total + slack
    worst_sleep = min(memory["asleep_free_gib"] + [memory["after_start_asleep_free_gib"]])
    worst_wake = min(memory["awake_free_gib"])
    v.add("memory: each sleep gives the engine's memory back", worst_sleep >= before - slack,
          f"free before engine {before:.2f} GiB, lowest free after a sleep {worst_sleep:.2f} GiB "
          f"(slack {slack} GiB); after each sleep: {', '.join(f'{x:.2f}' for x in memory['asleep_free_gib'])}")
    v.add("memory: each wake stays in its budget", before - worst_wake <= budget,
          f"engine awake takes up to {before - worst_wake:.2f} GiB of {total:.1f} "
          f"(gpu_memory_utilization {args.gpu_memory_utilization} -> {budget:.2f} GiB with slack); "
          f"free after each wake: {', '.join(f'{x:.2f}' for x in memory['awake_free_gib'])}")


def run_trainer_vllm(args: Any, v: Verdicts, run: Callable = subprocess.run) -> dict:
    """3 steps of `vigor train --engine vllm --load-in-4bit` on the tiny model (a policy that
    learns, so the weight check can discriminate) with engine.weight_check=error."""
    out_dir = Path(tempfile.mkdtemp(prefix="vigor-gpu-smoke-vllm-"))
    cmd = [sys.executable, "-m", "vigor_cli", "train", "--engine", "vllm", "--load-in-4bit",
           "--model", "tiny", "--task", "tiny-math", "--steps", "3", "--output-dir", str(out_dir),
           "--run-name", "smoke", "--set", "model.lora.enabled=true", "--set", "grpo.learning_rate=5e-3",
           "--set", "train.prompts_per_step=16", "--set", "train.eval_every=0", "--set", "train.eval_limit=16",
           "--set", "sampling.max_new_tokens=24",
           "--set", f"engine.gpu_memory_utilization={args.gpu_memory_utilization}",
           "--set", "engine.enforce_eager=true", "--set", "engine.weight_check=error"]
    t0 = time.perf_counter()
    done = run(cmd, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
    metrics = out_dir / "smoke" / "metrics.jsonl"
    lines = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.is_file() else []
    steps = [m for m in lines if "engine/weight_check" in m]
    codes = [m["engine/weight_check"] for m in steps]
    tail = (done.stderr.strip().splitlines() or [""])[-1]
    v.add("trainer-vllm: 3 steps, 4-bit, engine.weight_check=error", done.returncode == 0 and len(codes) == 3,
          f"exit {done.returncode}; {tail[:200]}")
    v.add("trainer-vllm: weight check passes by the last step", bool(codes) and codes[-1] == 1
          and all(c in (0, 1) for c in codes), f"engine/weight_check per step: {codes}")
    keys = ("step", "engine/weight_check", "engine/logprob_diff", "engine/policy_base_diff",
            "sampling/importance_sampling_ratio/mean", "sampling/importance_sampling_ratio/max",
            "sampling/importance_sampling_ratio/clipped_frac", "time/generate", "time/update")
    return {"variant": "trainer-vllm", "wall_s": time.perf_counter() - t0,
            "steps": [{k: m.get(k) for k in keys} for m in steps]}


# --------------------------------------------------------------------------- driving
def vllm_missing() -> str | None:
    """Why the vLLM checks cannot run here (None when vllm and bitsandbytes import)."""
    from vigor_cli.rollout.vllm import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason is None and importlib.util.find_spec("bitsandbytes") is None:
        reason = "bitsandbytes is not installed (pip install 'vigor[gpu]')"
    return reason


def build_model(out: Path) -> str:
    """Qwen2.5-1.5B's shape with random weights (seed 0), bf16, with the tiny model's tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(SHAPE)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(TINY).save_pretrained(out)
    return str(out)


def run_group(args: argparse.Namespace) -> int:
    """One child: the core checks (``--group core``) or one vLLM check."""
    import torch

    if args.group == "build":
        build_model(Path(args.model_dir))
        return 0
    v = Verdicts()
    result: dict = {"group": args.group}
    if args.group == "core":
        cuda = torch.cuda.is_available()  # the driver runs it on CUDA only; a test runs it on the CPU
        ctx = Context(args.model_dir, torch.device("cuda" if cuda else "cpu"), args, CudaMeter() if cuda else None)
        for name in CORE_CHECKS:
            if name in args.only.split(","):
                t0 = time.perf_counter()
                CORE[name](ctx, v)
                ctx.results[f"{name}_s"] = time.perf_counter() - t0
        result.update(ctx.results)
    elif args.group == "trainer-vllm":
        result.update(run_trainer_vllm(args, v))
    else:
        result.update(run_engine(args, args.group == "engine-4bit", v))
    result["verdicts"] = v.rows
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if v.failed else 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.group:
        return run_group(args)
    import torch

    if not torch.cuda.is_available():
        print("bench/gpu_smoke.py needs a CUDA GPU and did not run: torch.cuda.is_available() is False here")
        return UNAVAILABLE
    only = args.only.split(",")
    missing = vllm_missing()
    work = Path(tempfile.mkdtemp(prefix="vigor-gpu-smoke-"))
    if args.model == "qwen2.5-1.5b-shape":
        t0 = time.perf_counter()
        model_dir = str(work / "model")
        subprocess.run([sys.executable, __file__, "--group", "build", "--model-dir", model_dir],
                       check=True, cwd=REPO, timeout=args.timeout)
        print(f"built a Qwen2.5-1.5B-shaped model with random weights in {time.perf_counter() - t0:.0f}s", flush=True)
    else:
        model_dir = TINY if args.model == "tiny" else args.model
    groups = (["core"] if set(only) & set(CORE_CHECKS) else []) + [g for g in VLLM_CHECKS if g in only]
    rows: list[dict] = []
    merged: dict = {"model": args.model, "vllm_missing": missing, "groups": {}}
    for group in groups:
        if group in VLLM_CHECKS and missing:
            rows.append({"check": group, "verdict": "SKIP", "detail": missing})
            print(f"SKIP  {group}: {missing}", flush=True)
            continue
        print(f"== {group}", flush=True)
        path = work / f"{group}.json"
        child = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]),
                 "--group", group, "--model-dir", model_dir, "--json", str(path)]
        try:
            code = subprocess.run(child, cwd=REPO, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            code = None
        got = json.loads(path.read_text()) if path.is_file() else {}
        merged["groups"][group] = got
        rows += got.get("verdicts", [])
        if code != 0 and not any(r["verdict"] == "FAIL" for r in got.get("verdicts", [])):
            why = "timed out" if code is None else f"exit {code}"
            rows.append({"check": group, "verdict": "FAIL", "detail": f"the child process {why} before its verdicts"})
            print(f"FAIL  {group}: the child process {why} before its verdicts", flush=True)
    merged["verdicts"] = rows
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(merged, indent=1) + "\n")
    counts = {w: sum(r["verdict"] == w for r in rows) for w in ("PASS", "FAIL", "SKIP")}
    print(f"== summary: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped -> {args.json}")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
