"""The memory plan against measurement, phase by phase, on real-width 2-layer model slices.

Each planned phase runs for real on CPU in a child process and the tensor storages it
allocates are tracked (bench/storage_tracker.py: peak bytes of tensors created inside the
phase; the weights loaded before it are not counted). The plan (vigor_cli/model/memory_plan.py)
says the same thing for the same config: what the phase adds to what is loaded.

    python bench/memory_phases.py            # both slices; writes bench/results/memory_phases.json
    python bench/memory_phases.py --quick    # the 1.5B slice only

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

MIB = float(1 << 20)
SLICES = {
    "qwen2.5-1.5b-2l": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=2,
                            num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                            tie_word_embeddings=True, rope_theta=1e6),
    "qwen2.5-3b-2l": dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=2,
                          num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=32768,
                          tie_word_embeddings=True, rope_theta=1e6),
}
SHAPE = {"prompt": 256, "completion": 256, "new_tokens": 4, "gen_batch_tokens": 4096, "micro_batch_tokens": 2048,
         "logits_chunk_tokens": 512, "lora_r": 32}
"""Run sizes: prompt and completion tokens per row, generated tokens, the engine's and the
update's token budgets, the output layer's chunk, the LoRA rank (the shipped GPU configs')."""
PHASES = ("generate", "update", "optimizer")


def model_dir(name: str, workdir: Path) -> Path:
    """A directory holding the slice (config.json, random bf16 weights) and the tiny
    model's tokenizer (its ids are only used for padding and stop tokens)."""
    from vigor_cli.model.loading import TINY_DIR

    path = workdir / name
    if not (path / "config.json").is_file():
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        Qwen2ForCausalLM(Qwen2Config(**SLICES[name])).to(torch.bfloat16).save_pretrained(path)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(TINY_DIR / f, path / f)
    return path


def run_config(model_path: str | Path):
    from vigor_cli.settings import build_config

    s = SHAPE
    return build_config(sets=[
        f"model.name_or_path={model_path}", "model.dtype=bfloat16", "model.gradient_checkpointing=true",
        "model.lora.enabled=true", f"model.lora.r={s['lora_r']}", f"model.lora.alpha={2 * s['lora_r']}",
        "model.lora.target_modules=all-linear", "model.cpu_threads=1", "engine.kind=hf",
        f"engine.gen_batch_tokens={s['gen_batch_tokens']}", f"grpo.micro_batch_tokens={s['micro_batch_tokens']}",
        f"grpo.logits_chunk_tokens={s['logits_chunk_tokens']}", f"task.max_prompt_tokens={s['prompt']}",
        f"sampling.max_new_tokens={s['completion']}",
    ])


def planned(model_path: str | Path) -> dict[str, float]:
    """What the plan says each phase allocates beyond the loaded weights, in bytes."""
    from vigor_cli.model import memory_plan

    cfg = run_config(model_path)
    plan = memory_plan.make_plan(cfg, memory_plan.model_shape(cfg.model), "cpu", None, None, "bench")
    resident = plan.phase("resident")
    items = {(i.phase, i.name): i.bytes for i in plan.items}
    # the step creates AdamW's states and its temporary; the gradients are there before it
    step = items["resident", "AdamW states"] + plan.phase("optimizer") - resident - items["optimizer", "gradients"]
    return {"generate": plan.phase("generate") - resident, "update": plan.phase("update") - resident,
            "optimizer": step, "items": {f"{p}/{n}": b for (p, n), b in items.items()}}


def worker(model_path: str, phase: str) -> dict:
    """Run one phase in this process and measure it (module doc)."""
    import random

    import torch

    from storage_tracker import StorageTracker
    from vigor_cli import grpo
    from vigor_cli.train import logprobs
    from vigor_cli.model.loading import load_policy, trainable_parameters
    from vigor_cli.rollout.base import SamplingParams
    from vigor_cli.rollout.hf import HFEngine

    torch.manual_seed(0)
    cfg = run_config(model_path)
    model, tokenizer, device = load_policy(cfg.model)
    vocab = model.config.vocab_size
    rng = random.Random(0)
    s = SHAPE
    tracker = StorageTracker()
    if phase == "generate":
        rows = s["gen_batch_tokens"] // (s["prompt"] + s["completion"])
        engine = HFEngine(model, tokenizer, s["gen_batch_tokens"])
        engine.eos_ids = []  # random weights: no row stops early
        prompts = [[rng.randrange(3, vocab) for _ in range(s["prompt"])] for _ in range(rows)]
        params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=s["new_tokens"], seed=0)
        with tracker:
            engine.generate(prompts, [1] * rows, params)
        return {"phase": phase, "rows": rows, "measured": tracker.peak}
    rows = s["micro_batch_tokens"] // (s["prompt"] + s["completion"])
    prompts = [[rng.randrange(3, vocab) for _ in range(s["prompt"])] for _ in range(rows)]
    completions = [[rng.randrange(3, vocab) for _ in range(s["completion"])] for _ in range(rows)]
    batch = logprobs.make_batch(prompts, completions, tokenizer.pad_token_id or 0)
    advantages = torch.tensor([rng.choice([-1.0, 1.0]) for _ in range(rows)])
    totals = grpo.StepTotals(tokens=int(batch.mask.sum()), sequences=rows, max_new_tokens=s["completion"])

    def backward() -> None:
        lp, _ = logprobs.completion_logprobs(model, batch, device, 1.0, s["logits_chunk_tokens"])
        loss, _, _ = grpo.clipped_policy_loss(lp, lp.detach(), advantages, 0.2, 0.28)
        grpo.aggregate(loss, batch.mask, totals, "dapo").backward()

    if phase == "update":
        with tracker:
            backward()
        return {"phase": phase, "rows": rows, "measured": tracker.peak}
    for p in trainable_parameters(model):  # the gradients exist before the step, as after the update
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=1e-5, foreach=True)
    with tracker:
        optimizer.step()
    return {"phase": phase, "rows": rows, "measured": tracker.peak,
            "trainable": sum(p.numel() for p in trainable_parameters(model))}


def measure(name: str, workdir: Path) -> list[dict]:
    path = model_dir(name, workdir)
    plan = planned(path)
    out = []
    for phase in PHASES:
        proc = subprocess.run([sys.executable, __file__, "--worker", str(path), phase], capture_output=True,
                              text=True, cwd=ROOT)
        if proc.returncode != 0:
            out.append({"model": name, "phase": phase, "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row.update(model=name, planned=plan[phase], ratio=row["measured"] / plan[phase])
        out.append(row)
        print(json.dumps({k: row.get(k) for k in ("model", "phase", "measured", "planned", "ratio")}), flush=True)
    out.append({"model": name, "phase": "plan items", "items": plan["items"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "PHASE"), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="the 1.5B slice only")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "memory_phases.json"))
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    from rich.console import Console
    from rich.table import Table

    workdir = ROOT / "bench" / "results" / "models"
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in (["qwen2.5-1.5b-2l"] if args.quick else list(SLICES)):
        rows += measure(name, workdir)
    table = Table(title="memory plan vs measured, per phase: tensor storages the phase allocates (MiB), "
                  "bf16 base + float32 LoRA r=32, CPU, 2-layer real-width slices")
    for col in ("model", "phase", "rows", "measured MiB", "planned MiB", "measured / planned"):
        table.add_column(col, justify="left" if col in ("model", "phase") else "right")
    for r in rows:
        if r["phase"] == "plan items":
            continue
        if "error" in r:
            table.add_row(r["model"], r["phase"], "", "error", "", "")
            continue
        table.add_row(r["model"], r["phase"], str(r["rows"]), f"{r['measured'] / MIB:.1f}",
                      f"{r['planned'] / MIB:.1f}", f"{r['ratio']:.3f}")
    Console(width=140).print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"shape": SHAPE, "rows": rows}, indent=1))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
