"""The GPU smoke check's core checks, run in one child process on the model under test:

- memory: the memory plan against CUDA's measured allocation (generation, LoRA and full
  fine-tuning updates, the full fine-tuning policy and the weight check's base copy);
- logprobs: chunked completion-only log-probs against the full-logits path;
- merge: every weight the engine is sent against base + (alpha/r)·B·A in float64;
- sampling: the transformers engine's log-probs and tokens at temperatures 0.7 and 1.0;
- train: `vigor train` for 3 steps, then --resume to step 4.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from .common import (
    GIB, REPO, TEMPERATURES, Context, Verdicts, judge_memory, perturb_lora, plan_memory, random_rows, release,
    smoke_config,
)

def _update_samples(vocab: int, cfg: Any) -> tuple[dict, list]:
    """Rows filling one micro-batch exactly (prompt + completion = task.max_prompt_tokens +
    sampling.max_new_tokens each), advantages +-1 so every row runs forward and backward."""
    p, c = cfg.task.max_prompt_tokens, cfg.sampling.max_new_tokens
    rows = max(1, cfg.grpo.micro_batch_tokens // (p + c))
    prompts = random_rows(vocab, rows, p, 1)
    completions = random_rows(vocab, rows, c, 2)
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


def measure_optimizer_step(learner: Any, meter: Any) -> dict[str, float]:
    """Split the update's peak at the optimizer step: ``update`` is the peak before it and
    ``optimizer`` the step's own (both over the meter's start); filled as the step runs."""
    seen: dict[str, float] = {}
    step = learner.optimizer.step

    def measured(*args: Any, **kwargs: Any) -> Any:
        seen["update"] = meter.peak()
        meter.reset_peak()
        out = step(*args, **kwargs)
        seen["optimizer"] = meter.peak()
        return out

    learner.optimizer.step = measured
    return seen


def memory_generate(ctx: Context, v: Verdicts) -> None:
    from vigor_cli.model.loading import load_policy
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.hf import HFEngine

    cfg = smoke_config(ctx)
    plan = plan_memory(ctx, cfg)
    policy, tokenizer, _ = load_policy(cfg.model)
    engine = HFEngine(policy, tokenizer, gen_batch_tokens=cfg.engine.gen_batch_tokens)
    rows = max(1, cfg.engine.gen_batch_tokens // (cfg.task.max_prompt_tokens + cfg.sampling.max_new_tokens))
    prompts = random_rows(policy.config.vocab_size, rows, cfg.task.max_prompt_tokens, 3)
    ctx.meter.start()
    engine.generate(prompts, [1] * rows, SamplingParams(temperature=1.0, max_new_tokens=cfg.sampling.max_new_tokens, seed=0))
    measured = ctx.meter.peak()
    planned = plan.phase("generate") - plan.phase("resident")
    ctx.results["memory_generate"] = {"planned_gib": planned / GIB, "measured_gib": measured / GIB, "rows": rows}
    judge_memory(v, "memory: one transformers generation call", planned, measured, ctx.args.under, ctx.args.over)
    del policy, engine
    release()


def memory_update(ctx: Context, v: Verdicts, lora: bool) -> None:
    """One Learner.update: LoRA, or full fine-tuning (float32 master weights, the weight check's
    frozen base copy as with vLLM) with its resident weights measured as they load."""
    from vigor_cli.model import memory_plan as mp
    from vigor_cli.train.learner import Learner
    from vigor_cli.model.loading import load_tokenizer

    what = "LoRA" if lora else "full fine-tuning"
    # full fine-tuning as with vLLM: the plan and the learner then count and load the base copy
    cfg = smoke_config(ctx, f"model.lora.enabled={str(lora).lower()}", *(() if lora else ("engine.kind=vllm",)))
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
    seen = measure_optimizer_step(learner, ctx.meter)
    metrics = learner.update(samples)
    measured = seen.get("update", ctx.meter.peak())
    planned = plan.allocated_by_update()
    # the first step creates AdamW's states: the step allocates them, the gradients are there
    planned_step = plan.phase("optimizer") - plan.phase("resident") + items["AdamW states"]
    ctx.results[f"memory_update_{'lora' if lora else 'full'}"] = {
        "planned_gib": planned / GIB, "measured_gib": measured / GIB, "loaded_gib": loaded / GIB,
        "optimizer_planned_gib": planned_step / GIB, "optimizer_measured_gib": seen.get("optimizer", 0.0) / GIB,
        "items_gib": {k: b / GIB for k, b in items.items()}, "grad_norm": metrics["losses/grad_norm"]}
    judge_memory(v, f"memory: one {what} update ({cfg.grpo.micro_batch_tokens} tokens)", planned, measured,
                 ctx.args.under, ctx.args.over)
    if "optimizer" in seen:
        judge_memory(v, f"memory: the {what} AdamW step", planned_step, seen["optimizer"], ctx.args.under, ctx.args.over)
    del learner
    release()


def check_memory(ctx: Context, v: Verdicts) -> None:
    if ctx.meter is None:
        v.add("memory", None, "no CUDA: torch.cuda.max_memory_allocated not available")
        return
    memory_generate(ctx, v)
    memory_update(ctx, v, lora=True)
    memory_update(ctx, v, lora=False)


def check_logprobs(ctx: Context, v: Verdicts) -> None:
    import torch

    from vigor_cli.train import logprobs
    from vigor_cli.model.loading import load_policy

    cfg = smoke_config(ctx)
    policy, tokenizer, device = load_policy(cfg.model)
    vocab = policy.config.vocab_size
    batch = logprobs.make_batch(random_rows(vocab, 8, ctx.args.prompt_tokens, 4),
                                random_rows(vocab, 8, ctx.args.new_tokens, 5), tokenizer.pad_token_id or 0)
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
    release()


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

    from vigor_cli.model.loading import load_policy
    from vigor_cli.rollout.weights import policy_weights

    cfg = smoke_config(ctx)
    policy = load_policy(cfg.model)[0]
    perturb_lora(policy, ctx.args.delta)
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
    release()


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

    from vigor_cli.train import logprobs
    from vigor_cli.config import EngineConfig
    from vigor_cli.model.loading import load_policy
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.hf import HFEngine

    cfg = smoke_config(ctx)
    policy, tokenizer, device = load_policy(cfg.model)
    make = engine_factory or (lambda m, tok: HFEngine(m, tok, gen_batch_tokens=cfg.engine.gen_batch_tokens))
    engine = make(policy, tokenizer)
    prompts = random_rows(min(policy.config.vocab_size, len(tokenizer)), 16, ctx.args.prompt_tokens, 6)
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
    release()


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
