"""GPU smoke check of the colocated vLLM engine: checks that can fail, each with a verdict.

Run on one CUDA GPU with the ``gpu`` extra installed (minutes on the bundled
tiny model; pass ``--model`` for a real checkpoint)::

    python bench/gpu_smoke.py                          # every variant below, one subprocess each
    python bench/gpu_smoke.py --variant engine         # bf16 policy with LoRA
    python bench/gpu_smoke.py --variant engine-4bit    # the trainer's real 4-bit path (NF4 + LoRA)
    python bench/gpu_smoke.py --variant trainer        # `vigor train --engine vllm --load-in-4bit`, 3 steps
    python bench/gpu_smoke.py --model Qwen/Qwen2.5-0.5B

The engine variants load the policy with the trainer's own loader
(``models.load_policy``; ``engine-4bit`` goes through bitsandbytes NF4 and
peft's k-bit preparation exactly as ``--load-in-4bit`` does), start the real
``VLLMEngine`` and check, in order:

1. ``memory``: free GPU memory after every wake and every sleep; each sleep
   must give the engine's memory back (free within ``--memory-slack-gib`` of
   free before the engine started) and each wake must stay within
   ``engine.gpu_memory_utilization`` of the GPU (plus the slack);
2. ``step 1``: with the LoRA at its start (policy = base) the weight check
   must say ``not-discriminating`` (it cannot tell yet), never ``ok``;
3. ``policy far from base``: every LoRA ``B`` is moved by a known seeded
   delta (``--delta``); the policy's log-probs on the engine's samples must
   then differ from the base model's by at least ``--min-gap`` nats/token;
4. ``readback``: one pushed tensor (layer 0's ``mlp.down_proj.weight``, a
   LoRA-merged weight vLLM keeps unfused) is read back from the engine's
   model and must equal the merged weight the trainer pushed, bit for bit,
   and differ from the base weight;
5. ``engine tracks policy``: after the push, the weight check on fresh
   samples must say ``ok`` (``vigor_cli/rollout/weight_check.py``);
6. ``check can fail``: the base weights are pushed on purpose (adapter
   switched off); the same check must now say ``stale``; then the policy is
   pushed again and the check must say ``ok`` again.

The ``trainer`` variant runs three real training steps with
``engine.weight_check=error`` and needs every step's ``engine/weight_check``
to be 0 or 1 and the last one 1.

Prints a verdict per check and a table, writes ``bench/results/gpu_smoke.json``.
Exit codes: 0 every check passed; 1 a check failed; 3 no CUDA GPU or no
working vllm here (one line says which; nothing ran); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vigor_cli.rollout.vllm import vllm_unavailable_reason  # noqa: E402

RESULTS = REPO / "bench" / "results" / "gpu_smoke.json"
TINY = str(REPO / "vigor_cli" / "assets" / "tiny")
UNAVAILABLE = 3
QUESTIONS = [f"{a}+{b}=" for a in range(3, 19) for b in (4, 7)]
READBACK = "model.layers.0.mlp.down_proj.weight"
GIB = float(1 << 30)


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", choices=("all", "engine", "engine-4bit", "trainer"), default="all")
    p.add_argument("--model", default=TINY, help="HF checkpoint directory or hub id (default: the bundled tiny model)")
    p.add_argument("--rollouts", type=int, default=4, help="samples per prompt per check")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument("--delta", type=float, default=0.1, help="std of the seeded change added to every LoRA B")
    p.add_argument("--min-gap", type=float, default=0.05, help="policy vs base, mean |log-prob| per token, after the delta")
    p.add_argument("--memory-slack-gib", type=float, default=1.0)
    p.add_argument("--json", type=Path, default=RESULTS)
    return p.parse_args(argv)


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
def _free_gib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0] / GIB


def _total_gib() -> float | None:
    import torch

    return torch.cuda.mem_get_info()[1] / GIB if torch.cuda.is_available() else None


def _logprobs(model: Any, rows: list[tuple[list[int], list[int]]], temperature: float) -> list[list[float]]:
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


def weight_check(engine: Any, policy: Any, prompts: list[list[int]], args: Any, seed: int) -> Any:
    """Sample with the engine, score the samples with engine, policy and base (adapter off)."""
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.weight_check import WeightCheckSums

    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=seed)
    groups = engine.generate(prompts, [args.rollouts] * len(prompts), sampling)
    rows = [(p, r) for p, g in zip(prompts, groups) for r in g if r.token_ids]
    pairs = [(p, r.token_ids) for p, r in rows]
    policy_lp = _logprobs(policy, pairs, 1.0)
    with policy.disable_adapter():
        base_lp = _logprobs(policy, pairs, 1.0)
    sums = WeightCheckSums()
    for (_, r), p_lp, b_lp in zip(rows, policy_lp, base_lp):
        sums.add(r.logprobs, p_lp, b_lp)
    from vigor_cli.config import EngineConfig

    return sums.result(EngineConfig().logprob_check_threshold)


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


def _pushed(policy: Any, name: str) -> Any:
    from vigor_cli.rollout.weights import policy_weights

    for n, t in policy_weights(policy):
        if n == name:
            return t.detach().cpu()
    raise KeyError(name)


def _readback(engine: Any, name: str) -> Any:
    """The engine model's copy of ``name`` (fetched through LLM.apply_model, in process)."""
    return engine.llm.apply_model(lambda m: m.get_parameter(name).detach().cpu().clone())[0]


# --------------------------------------------------------------------------- variants
def run_engine(args: Any, four_bit: bool, v: Verdicts, vllm_api: Any = None) -> dict:
    import torch

    from vigor_cli.config import RunConfig
    from vigor_cli.models import load_policy
    from vigor_cli.rollout.vllm import VLLMEngine

    cfg = RunConfig()
    cfg.model.name_or_path = args.model
    cfg.model.load_in_4bit = four_bit
    cfg.model.lora.enabled = True
    cfg.model.lora.r, cfg.model.lora.alpha = 8, 16
    cfg.sampling.max_new_tokens = args.max_new_tokens
    cfg.task.max_prompt_tokens = 64
    cfg.engine.gpu_memory_utilization = args.gpu_memory_utilization
    cfg.engine.enforce_eager = True  # a smoke run: start fast
    policy, tokenizer, _ = load_policy(cfg.model)  # the trainer's loader (4-bit: NF4 + k-bit prep)
    policy.eval()
    prompts = [tokenizer(q, add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    memory: dict[str, list] = {"free_before_engine_gib": _free_gib(), "total_gib": _total_gib(),
                               "awake_free_gib": [], "asleep_free_gib": []}
    t0 = time.perf_counter()
    engine = VLLMEngine(cfg, policy, tokenizer, vllm_api=vllm_api)
    startup = time.perf_counter() - t0
    memory["after_start_asleep_free_gib"] = _free_gib()

    def phase(seed: int, push_base: bool = False):
        engine._begin_generation()  # wake weights, push if changed, wake KV cache
        if push_base:
            with policy.disable_adapter():
                engine._push()
            engine.llm.reset_prefix_cache()
        memory["awake_free_gib"].append(_free_gib())
        result = weight_check(engine, policy, prompts, args, seed)
        engine.end_generation()
        memory["asleep_free_gib"].append(_free_gib())
        return result

    results = {}
    results["step1"] = phase(1)
    v.add("step 1 not yet discriminating", results["step1"].status == "not-discriminating",
          results["step1"].describe())
    changed = _perturb(policy, args.delta)
    engine.sync_weights(policy)
    results["pushed"] = phase(2)
    gap = results["pushed"].policy_base
    v.add("policy far from base", changed > 0 and gap >= args.min_gap,
          f"{changed} LoRA B matrices moved by N(0, {args.delta}); mean |policy - base| {gap:.4g} "
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
    v.add("engine tracks policy", results["pushed"].status == "ok", results["pushed"].describe())
    results["base_pushed"] = phase(3, push_base=True)
    v.add("check can fail (base pushed on purpose)", results["base_pushed"].status == "stale",
          results["base_pushed"].describe())
    engine.sync_weights(policy)
    engine._engine_version = None  # the base is in the engine now: force the next push
    results["repushed"] = phase(4)
    v.add("engine tracks policy again", results["repushed"].status == "ok", results["repushed"].describe())

    before, total = memory["free_before_engine_gib"], memory["total_gib"]
    if before is None:
        v.add("memory", None, "no CUDA: not measured")
    else:
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
    engine.close()
    return {"variant": "engine-4bit" if four_bit else "engine", "startup_s": startup, "memory": memory,
            "engine_memory": engine.memory_report(),
            "checks": {k: {"status": r.status, "engine_policy": r.engine_policy,
                           "policy_base": r.policy_base, "engine_base": r.engine_base,
                           "tokens": r.tokens} for k, r in results.items()}}


def run_trainer(args: Any, v: Verdicts) -> dict:
    out_dir = Path(tempfile.mkdtemp(prefix="vigor-gpu-smoke-"))
    cmd = [sys.executable, "-m", "vigor_cli", "train", "--engine", "vllm", "--load-in-4bit",
           "--model", args.model, "--task", "tiny-math", "--steps", "3", "--output-dir", str(out_dir),
           "--run-name", "smoke", "--set", "model.lora.enabled=true", "--set", "grpo.learning_rate=5e-3",
           "--set", "train.prompts_per_step=16", "--set", "train.eval_every=0", "--set", "train.eval_limit=16",
           "--set", f"sampling.max_new_tokens={args.max_new_tokens}",
           "--set", f"engine.gpu_memory_utilization={args.gpu_memory_utilization}",
           "--set", "engine.enforce_eager=true", "--set", "engine.weight_check=error"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    metrics = out_dir / "smoke" / "metrics.jsonl"
    lines = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.is_file() else []
    steps = [m for m in lines if "engine/weight_check" in m]
    codes = [m["engine/weight_check"] for m in steps]
    tail = (done.stderr.strip().splitlines() or [""])[-1]
    v.add("trainer: 3 steps, 4-bit, engine.weight_check=error", done.returncode == 0 and len(codes) == 3,
          f"exit {done.returncode}; {tail[:200]}")
    v.add("trainer: weight check passes by the last step", bool(codes) and codes[-1] == 1
          and all(c in (0, 1) for c in codes), f"engine/weight_check per step: {codes}")
    return {"variant": "trainer", "wall_s": time.perf_counter() - t0, "run_dir": str(out_dir / "smoke"),
            "steps": [{k: m.get(k) for k in ("step", "engine/weight_check", "engine/logprob_diff",
                                             "engine/policy_base_diff", "time/generate", "time/update")}
                      for m in steps]}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    reason = vllm_unavailable_reason()
    if reason is not None:
        print(f"bench/gpu_smoke.py needs CUDA + vllm and did not run: {reason.split(': ', 1)[-1]}")
        return UNAVAILABLE
    if args.variant == "all":
        codes = {}
        for variant in ("engine", "engine-4bit", "trainer"):
            print(f"== {variant}", flush=True)
            child = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]),
                     "--variant", variant, "--json", str(args.json.with_name(f"gpu_smoke-{variant}.json"))]
            codes[variant] = subprocess.run(child).returncode
        print("== summary: " + ", ".join(f"{k} {'PASS' if c == 0 else 'FAIL'}" for k, c in codes.items()))
        return 0 if all(c == 0 for c in codes.values()) else 1
    v = Verdicts()
    if args.variant == "trainer":
        result = run_trainer(args, v)
    else:
        result = run_engine(args, args.variant == "engine-4bit", v)
    result["verdicts"] = v.rows
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{sum(r['verdict'] == 'PASS' for r in v.rows)} passed, "
          f"{sum(r['verdict'] == 'FAIL' for r in v.rows)} failed -> {args.json}")
    return 1 if v.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
