"""The GPU smoke check's vLLM checks, each in its own child process: the engine (bf16 or NF4
policy with LoRA) at temperatures 1.0 and 0.7 (weight check verdicts, a pushed tensor read
back, sleep and wake memory), and 3 steps of `vigor train --engine vllm --load-in-4bit`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .common import GIB, REPO, TEMPERATURES, TINY, Verdicts, perturb_lora

QUESTIONS = [f"{a}+{b}=" for a in range(3, 19) for b in (4, 7)]
READBACK = "model.layers.0.mlp.down_proj.weight"


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
    from vigor_cli.model.loading import load_policy
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
    changed = perturb_lora(policy, args.delta)
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
