"""GPU smoke check of the colocated vLLM engine: a few training steps, on one CUDA GPU, in minutes.

Default mode drives ``VLLMEngine`` directly with a minimal policy-gradient
update, so it checks exactly the engine's job: each step samples with vLLM,
recomputes the sampled tokens' log-probs with the policy, reports the mean
absolute difference (``engine/logprob_diff``; near 0 when the pushed weights
are the policy's, large when the engine samples from stale or base weights),
takes an optimizer step and syncs. ``--via-cli`` instead runs
``vigor train --engine vllm`` for a few steps and reads the same numbers from
the run's ``metrics.jsonl``.

    python bench/gpu_smoke.py                      # tiny model, LoRA, 4 steps
    python bench/gpu_smoke.py --no-lora            # full-weight push
    python bench/gpu_smoke.py --model Qwen/Qwen2.5-0.5B --load-in-4bit
    python bench/gpu_smoke.py --via-cli

Prints a table and writes ``bench/results/gpu_smoke.json``. Exit code 1 when
any step's log-prob difference exceeds ``engine.logprob_check_threshold``;
exit code 2 with one line when CUDA or vllm is missing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vigor_cli.rollout.vllm import vllm_unavailable_reason  # noqa: E402

RESULTS = REPO / "bench" / "results" / "gpu_smoke.json"
QUESTIONS = [f"Question: what is {a} plus {b}? Answer:" for a in range(3, 11) for b in (4, 7)]


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(REPO / "vigor_cli" / "assets" / "tiny"),
                   help="HF checkpoint directory or hub id (default: the bundled tiny model)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rollouts", type=int, default=8, help="rollouts per prompt")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument("--lora", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--load-in-4bit", action="store_true")
    p.add_argument("--sleep-level", type=int, choices=(1, 2), default=2)
    p.add_argument("--via-cli", action="store_true", help="run `vigor train --engine vllm` instead")
    return p.parse_args()


def _load_policy(args):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    kwargs = {"dtype": torch.bfloat16, "device_map": {"": 0}}
    if args.load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
    model = AutoModelForCausalLM.from_pretrained(args.model, **kwargs)
    if args.lora or args.load_in_4bit:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    return model, tokenizer


def _policy_logprobs(model, prompts, rollouts, temperature):
    """Per rollout, the policy's log-probs of its sampled tokens under softmax(logits / T)."""
    import torch

    rows = [(p, r) for p, group in zip(prompts, rollouts) for r in group]
    out = []
    with torch.no_grad():
        for start in range(0, len(rows), 32):
            chunk = rows[start : start + 32]
            seqs = [list(p) + r.token_ids for p, r in chunk]
            width = max(len(s) for s in seqs)
            ids = torch.zeros((len(seqs), width), dtype=torch.long, device="cuda")
            mask = torch.zeros_like(ids)
            for i, s in enumerate(seqs):
                ids[i, : len(s)] = torch.tensor(s)
                mask[i, : len(s)] = 1
            logits = model(input_ids=ids, attention_mask=mask).logits.float() / temperature
            logp = torch.log_softmax(logits, dim=-1)
            for i, (p, r) in enumerate(chunk):
                positions = torch.arange(len(p) - 1, len(p) - 1 + len(r.token_ids), device="cuda")
                target = torch.tensor(r.token_ids, device="cuda")
                out.append(logp[i, positions, target].tolist())
    return out


def _update(model, optimizer, prompts, rollouts, temperature):
    """One REINFORCE step with a toy reward (shorter completions score higher), group-normalised."""
    import torch

    model.train()
    optimizer.zero_grad()
    for p, group in zip(prompts, rollouts):
        lengths = torch.tensor([len(r.token_ids) for r in group], dtype=torch.float32)
        adv = -(lengths - lengths.mean()) / (lengths.std() + 1e-6)
        for r, a in zip(group, adv.tolist()):
            ids = torch.tensor([list(p) + r.token_ids], device="cuda")
            logits = model(input_ids=ids).logits[0, len(p) - 1 : -1].float() / temperature
            logp = torch.log_softmax(logits, -1).gather(-1, ids[0, len(p):, None]).sum()
            (-a * logp / len(rollouts)).backward()
    optimizer.step()
    model.eval()


def run_engine(args) -> dict:
    import torch

    from vigor_cli.config import RunConfig
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.vllm import VLLMEngine

    model, tokenizer = _load_policy(args)
    cfg = RunConfig()
    cfg.sampling.max_new_tokens = args.max_new_tokens
    cfg.engine.gpu_memory_utilization = args.gpu_memory_utilization
    cfg.engine.sleep_level = args.sleep_level
    cfg.engine.enforce_eager = True  # a smoke run: start fast
    t0 = time.perf_counter()
    engine = VLLMEngine(cfg, model, tokenizer)
    startup = time.perf_counter() - t0
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4 if args.lora or args.load_in_4bit else 1e-5)
    prompts = [tokenizer(q)["input_ids"] for q in QUESTIONS]
    steps = []
    for step in range(1, args.steps + 1):
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                                  seed=step)
        rollouts = engine.generate(prompts, [args.rollouts] * len(prompts), sampling)
        engine.end_generation()
        generate_s = time.perf_counter() - t0
        policy = _policy_logprobs(model, prompts, rollouts, args.temperature)
        engine_lp = [lp for group in rollouts for r in group for lp in r.logprobs]
        policy_lp = [lp for row in policy for lp in row]
        diff = sum(abs(a - b) for a, b in zip(engine_lp, policy_lp)) / max(1, len(engine_lp))
        t1 = time.perf_counter()
        _update(model, optimizer, prompts, rollouts, args.temperature)
        engine.sync_weights(model)
        n_rollouts = sum(len(g) for g in rollouts)
        steps.append({
            "step": step,
            "engine/logprob_diff": diff,
            "rollouts": n_rollouts,
            "tokens": len(engine_lp),
            "time/generate": generate_s,
            "rollouts_per_s": n_rollouts / generate_s,
            "tokens_per_s": len(engine_lp) / generate_s,
            "time/update": time.perf_counter() - t1,
            "trainer_peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "pushes": engine.pushes,
        })
    engine.close()
    return {"mode": "engine", "startup_s": startup, "memory": engine.memory_report(),
            "threshold": cfg.engine.logprob_check_threshold, "steps": steps}


def run_cli(args) -> dict:
    out_dir = Path(tempfile.mkdtemp(prefix="vigor-gpu-smoke-"))
    cmd = [sys.executable, "-m", "vigor_cli", "train", "--engine", "vllm",
           "--set", f"model.name_or_path={args.model}", "--set", f"train.steps={args.steps}",
           "--set", "train.prompts_per_step=16", "--set", f"train.output_dir={out_dir}",
           "--set", "train.run_name=smoke", "--set", "train.eval_every=0",
           "--set", f"sampling.max_new_tokens={args.max_new_tokens}",
           "--set", f"engine.gpu_memory_utilization={args.gpu_memory_utilization}",
           "--set", "engine.enforce_eager=true", "--set", f"model.load_in_4bit={args.load_in_4bit}"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"gpu_smoke: `vigor train --engine vllm` failed (exit {done.returncode})")
    lines = [json.loads(x) for x in (out_dir / "smoke" / "metrics.jsonl").read_text().splitlines()]
    steps = [{
        "step": m["step"],
        "engine/logprob_diff": m.get("engine/logprob_diff", float("nan")),
        "rollouts": m["rollouts/step"],
        "tokens": m["tokens/step"],
        "time/generate": m["time/generate"],
        "rollouts_per_s": m["rollouts/step"] / m["time/generate"],
        "tokens_per_s": m["tokens/step"] / m["time/generate"],
        "time/update": m["time/update"],
    } for m in lines if "rollouts/step" in m]
    from vigor_cli.config import EngineConfig

    return {"mode": "cli", "wall_s": time.perf_counter() - t0, "run_dir": str(out_dir / "smoke"),
            "threshold": EngineConfig().logprob_check_threshold, "steps": steps}


def main() -> int:
    reason = vllm_unavailable_reason()
    if reason is not None:
        print(f"bench/gpu_smoke.py needs CUDA + vllm: {reason.split(': ', 1)[1]}")
        return 2
    args = _parse()
    if not args.via_cli and not (Path(args.model).is_dir() or "/" in args.model):
        print(f"bench/gpu_smoke.py: model not found: {args.model} (pass --model PATH)")
        return 2
    result = run_cli(args) if args.via_cli else run_engine(args)

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"vLLM engine smoke ({result['mode']})")
    for col in ("step", "logprob diff", "rollouts/s", "tokens/s", "generate s", "update s",
                "trainer peak GiB"):
        table.add_column(col, justify="right")
    for s in result["steps"]:
        table.add_row(str(s["step"]), f"{s['engine/logprob_diff']:.4f}",
                      f"{s['rollouts_per_s']:.1f}", f"{s['tokens_per_s']:.0f}",
                      f"{s['time/generate']:.2f}", f"{s['time/update']:.2f}",
                      f"{s.get('trainer_peak_gib', float('nan')):.2f}")
    console = Console()
    console.print(table)
    if "memory" in result:
        console.print("memory at start (GiB): " + ", ".join(
            f"{k.removesuffix('_gib')} {v:.2f}" for k, v in result["memory"].items()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    bad = [s["step"] for s in result["steps"] if not s["engine/logprob_diff"] <= result["threshold"]]
    if bad:
        console.print(f"[red]log-prob difference above {result['threshold']} at steps {bad}: "
                      "the engine is not sampling from the policy's weights[/red]")
        return 1
    console.print(f"[green]engine and policy agree (diff <= {result['threshold']}) at every step[/green]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
