"""Peak memory of one GRPO update: full logits against completion-only chunked log-probs, and
each trainer's path as a rank's rows grow (``--section paths``, bench/update_paths.py).

Each variant runs in a child process (one forward + backward + AdamW step on one micro-batch:
vigor_cli.train.logprobs and vigor_cli.grpo) and reports its peak resident memory (VmHWM, reset just
before the update) over the resident memory just before it, beside the memory plan's estimate
(vigor_cli/model/memory_plan.py). Models: ``tiny`` (the bundled model, configs/tiny-math.yaml's
shape) and ``qwen2-152k`` (a Qwen2 shape with a 151,936-entry vocabulary, hidden 256, 2 layers,
random weights, float32). 'before' is ``grpo.logits_chunk_tokens: 0``, 'after' chunks of 512;
the 152k model's 'before' arm runs at 1024-3072 tokens and is extrapolated to 16,384 (marked).

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from storage_tracker import reset_rss_peak, rss  # noqa: E402

GIB = float(1 << 30)
QWEN2_152K = dict(vocab_size=151936, hidden_size=256, intermediate_size=768, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                  tie_word_embeddings=True)
SHAPES = {"tiny": (48, 16), "qwen2-152k": (128, 896)}  # prompt, completion tokens per row


def model_dir(name: str, workdir: Path) -> str:
    """A directory holding the variant's model (config.json + weights)."""
    if name == "tiny":
        from vigor_cli.model.loading import TINY_DIR

        return str(TINY_DIR)
    path = workdir / name
    if not (path / "config.json").is_file():
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        Qwen2ForCausalLM(Qwen2Config(**QWEN2_152K)).save_pretrained(path)
    return str(path)


def run_config(model_path: str, tokens: int, chunk: int, checkpointing: bool, prompt: int, completion: int,
               dtype: str = "auto"):
    from vigor_cli.settings import build_config

    return build_config(sets=[
        f"model.name_or_path={model_path}", "model.lora.enabled=false", f"model.gradient_checkpointing={str(checkpointing).lower()}",
        f"model.dtype={dtype}",
        f"grpo.micro_batch_tokens={tokens}", f"grpo.logits_chunk_tokens={chunk}",
        f"task.max_prompt_tokens={prompt}", f"sampling.max_new_tokens={completion}", "engine.kind=hf",
    ])


def worker(args: argparse.Namespace) -> dict:
    """One update in this process; returns the measurements (run in a child)."""
    import gc
    import random

    import torch

    from vigor_cli import grpo
    from vigor_cli.train import logprobs
    from vigor_cli.model.loading import load_policy, trainable_parameters

    torch.set_num_threads(1)
    rss_imports = rss("VmRSS")
    cfg = run_config(args.model_path, args.tokens, args.chunk, args.checkpointing, args.prompt, args.completion,
                     args.dtype)
    model, tokenizer, device = load_policy(cfg.model)
    vocab = model.config.vocab_size
    rows = max(1, args.tokens // (args.prompt + args.completion))
    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(args.prompt)] for _ in range(rows)]
    completions = [[rng.randrange(3, vocab) for _ in range(args.completion)] for _ in range(rows)]
    batch = logprobs.make_batch(prompts, completions, tokenizer.pad_token_id or 0)
    params = trainable_parameters(model)
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    advantages = torch.tensor([rng.choice([-1.0, 1.0]) for _ in range(rows)])
    totals = grpo.StepTotals(tokens=int(batch.mask.sum()), sequences=rows, max_new_tokens=args.completion)
    gc.collect()
    rss_before = rss("VmRSS")
    exact = reset_rss_peak()

    if args.chunk > 0:
        lp, _ = logprobs.completion_logprobs(model, batch, device, 1.0, args.chunk)
    else:
        lp, _ = logprobs.full_logprobs(model, batch, device, 1.0)
    loss, _, _ = grpo.clipped_policy_loss(lp, lp.detach(), advantages, 0.2, 0.28)
    grpo.aggregate(loss, batch.mask, totals, "dapo").backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

    peak = rss("VmHWM")
    return {
        "rows": rows, "padded_tokens": rows * (args.prompt + args.completion),
        "completion_tokens": int(batch.mask.sum()), "vocab": vocab,
        "params": sum(p.numel() for p in model.parameters()),
        "rss_imports_gib": rss_imports / GIB, "rss_before_update_gib": rss_before / GIB,
        "peak_gib": peak / GIB, "update_peak_over_imports_gib": (peak - rss_imports) / GIB,
        "update_peak_over_loaded_gib": (peak - rss_before) / GIB, "peak_reset": exact,
    }


def measure(model: str, tokens: int, chunk: int, checkpointing: bool, workdir: Path) -> dict:
    """Run one variant in a child process; add the memory plan's estimate for it."""
    prompt, completion = SHAPES[model]
    path = model_dir(model, workdir)
    cmd = [sys.executable, __file__, "--worker", "--model-path", path, "--tokens", str(tokens),
           "--chunk", str(chunk), "--prompt", str(prompt), "--completion", str(completion)]
    if checkpointing:
        cmd.append("--checkpointing")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"model": model, "tokens": tokens, "chunk": chunk, "error": proc.stderr.strip().splitlines()[-1:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result.update(model=model, tokens=tokens, chunk=chunk, checkpointing=checkpointing)
    result["plan_gib"] = plan_estimate(path, tokens, chunk, checkpointing, prompt, completion) / GIB
    result["plan_over_measured"] = result["plan_gib"] / result["update_peak_over_loaded_gib"]
    return result


def plan_estimate(model_path: str, tokens: int, chunk: int, checkpointing: bool, prompt: int, completion: int) -> float:
    """The memory plan's bytes allocated by this update on CPU (AdamW states, gradients,
    activations, output-layer chunk; the loaded weights are already in the RSS before it)."""
    from vigor_cli.model import memory_plan

    cfg = run_config(model_path, tokens, chunk, checkpointing, prompt, completion)
    plan = memory_plan.make_plan(cfg, memory_plan.model_shape(cfg.model), "cpu", None, None, "bench")
    return plan.allocated_by_update()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-path")
    ap.add_argument("--tokens", type=int)
    ap.add_argument("--chunk", type=int)
    ap.add_argument("--prompt", type=int)
    ap.add_argument("--completion", type=int)
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--dtype", default="auto", help="model.dtype of the worker's policy (bfloat16: float32 "
                    "master weights under bf16 autocast, as full fine-tuning on CUDA)")
    ap.add_argument("--quick", action="store_true", help="tiny model only")
    ap.add_argument("--section", choices=("chunks", "paths", "all"), default="all",
                    help="chunks: full vs chunked log-probs; paths: the trainers' paths as rows grow")
    ap.add_argument("--path-worker", nargs=3, metavar=("ARM", "MODEL", "ROWS"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "update_memory.json"))
    return ap


def main() -> None:
    args = build_parser().parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if args.path_worker:
        import update_paths

        arm, model, rows = args.path_worker
        print(json.dumps(update_paths.worker(arm, model, int(rows))))
        return
    paths = None
    if args.section == "paths" or (args.section == "all" and not args.quick):
        paths = run_paths(args)
        if args.section == "paths":
            _write(args.out, {"paths": paths})
            return
    result = run_chunks(args.quick)
    if paths is not None:
        result["paths"] = paths
    _write(args.out, result)


def run_chunks(quick: bool) -> dict:
    """The chunks section: full against chunked log-probs, each variant in a child; the table."""
    workdir = ROOT / "bench" / "results" / "models"
    workdir.mkdir(parents=True, exist_ok=True)
    variants = [("tiny", 8192, 0, False), ("tiny", 8192, 512, False)]
    if not quick:
        variants += [("qwen2-152k", t, 0, False) for t in (1024, 2048, 3072)]
        variants += [("qwen2-152k", 3072, 512, False), ("qwen2-152k", 16384, 512, False),
                     ("qwen2-152k", 16384, 512, True)]
    rows = []
    for model, tokens, chunk, ckpt in variants:
        r = measure(model, tokens, chunk, ckpt, workdir)
        rows.append(r)
        print(json.dumps({k: r.get(k) for k in ("model", "tokens", "chunk", "update_peak_over_loaded_gib", "plan_gib", "error")}), flush=True)
    extrapolated = extrapolate_before(rows)
    print_chunks(rows, extrapolated)
    return {"rows": rows, "extrapolated_before_16384": extrapolated}


def extrapolate_before(rows: list[dict]) -> dict | None:
    """The 152k model's full-logits update at 16384 tokens, from its growth per token between
    the smallest and largest micro-batch measured (None with fewer than two)."""
    before = [r for r in rows if r["model"] == "qwen2-152k" and r["chunk"] == 0 and "error" not in r]
    if len(before) < 2:
        return None
    a, b = before[0], before[-1]
    per_token = (b["update_peak_over_loaded_gib"] - a["update_peak_over_loaded_gib"]) / (b["tokens"] - a["tokens"])
    return {
        "model": "qwen2-152k", "tokens": 16384, "chunk": 0, "extrapolated": True,
        "update_peak_over_loaded_gib": b["update_peak_over_loaded_gib"] + per_token * (16384 - b["tokens"]),
        "bytes_per_token_per_vocab": per_token * GIB / a["vocab"],
    }


def print_chunks(rows: list[dict], extrapolated: dict | None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="memory one update allocates: peak RSS over the RSS before it (CPU, float32, child process per row)")
    for col in ("model", "micro-batch tokens", "log-probs", "checkpointing", "completion tokens",
                "update peak GiB", "plan GiB", "plan / measured"):
        table.add_column(col, justify="right" if "GiB" in col or "tokens" in col or "/" in col else "left")
    for r in rows + ([extrapolated] if extrapolated else []):
        if "error" in r:
            table.add_row(r["model"], str(r["tokens"]), "full" if r["chunk"] == 0 else "chunked", "", "", "error", "", "")
            continue
        table.add_row(
            r["model"], str(r["tokens"]) + (" (extrapolated)" if r.get("extrapolated") else ""),
            "before: full" if r["chunk"] == 0 else f"after: chunks of {r['chunk']}",
            "on" if r.get("checkpointing") else "off", str(r.get("completion_tokens", "")),
            f"{r['update_peak_over_loaded_gib']:.3f}",
            f"{r['plan_gib']:.3f}" if "plan_gib" in r else "", f"{r['plan_over_measured']:.2f}" if "plan_over_measured" in r else "",
        )
    Console(width=150).print(table)
    if extrapolated:
        print(f"before, growth per token: {extrapolated['bytes_per_token_per_vocab']:.1f} bytes per vocabulary entry")


def _write(path: str, result: dict) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def run_paths(args: argparse.Namespace) -> dict:
    """The paths section (bench/update_paths.py): each (arm, rows) in a child; the table."""
    from rich.console import Console
    from rich.table import Table

    import memory_phases
    import update_paths

    workdir = ROOT / "bench" / "results" / "models"
    workdir.mkdir(parents=True, exist_ok=True)
    model = memory_phases.model_dir("qwen2.5-1.5b-2l", workdir)
    results = []
    for arm, n in update_paths.arms_and_rows():
        proc = subprocess.run([sys.executable, __file__, "--path-worker", arm, str(model), str(n)],
                              capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            results.append({"arm": arm, "rows": n, "error": proc.stderr.strip().splitlines()[-3:]})
        else:
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    flat = update_paths.flatness(results)
    table = Table(title=f"one update's peak as a rank's rows grow, budget {update_paths.BUDGET} tokens, half the rows "
                  "outside the update (Qwen2.5-1.5B-width 2-layer slice, LoRA r=32, checkpointing, float32, CPU)")
    for col in ("arm", "rows per rank", "tokens", "tensor peak MiB", "RSS peak MiB", "peak / 1x peak"):
        table.add_column(col, justify="left" if col == "arm" else "right")
    base = {r["arm"]: r["tensor_peak"] for r in results if r.get("rows") == update_paths.BASE_ROWS and "tensor_peak" in r}
    for r in results:
        if "error" in r:
            table.add_row(r["arm"], str(r["rows"]), "", "error", "", "")
            continue
        table.add_row(r["arm"], str(r["rows"]), str(r["tokens"]), f"{r['tensor_peak'] / 2**20:.0f}",
                      f"{r['rss_peak_over_before'] / 2**20:.0f}", f"{r['tensor_peak'] / base[r['arm']]:.2f}")
    Console(width=150).print(table)
    print("largest peak / smallest, per arm: " + ", ".join(f"{k} {v:.2f}" for k, v in flat.items()))
    return {"budget": update_paths.BUDGET, "row_tokens": list(update_paths.ROW), "results": results, "flatness": flat}


if __name__ == "__main__":
    main()
