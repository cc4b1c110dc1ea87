"""GPU smoke check: what vigor does on a GPU, one verdict per check, every check able to fail.

The driver (the checks live in bench/gpu_checks/): it builds a model of Qwen2.5-1.5B's shape
with random weights (``tests/fixtures/model_configs/Qwen2.5-1.5B``) and the tiny model's
tokenizer, runs the core checks (memory, logprobs, merge, sampling, train) in one child process
and, with vllm and bitsandbytes importable, each vLLM check (engine, engine-4bit, trainer-vllm)
in its own; docs/vllm.md says what each check compares.

Details: docs/modules.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The checks' public names, for the tests and for running one check from Python.
from bench.gpu_checks.common import GIB, TINY, Context, CudaMeter, Verdicts, judge_memory  # noqa: E402,F401
from bench.gpu_checks.core import (  # noqa: E402,F401
    CORE, _checkpoint_names, check_logprobs, check_memory, check_merge, check_sampling, check_train,
    sampling_verdicts,
)
from bench.gpu_checks.engine import QUESTIONS, run_engine, run_trainer_vllm, weight_check  # noqa: E402,F401

RESULTS = REPO / "bench" / "results" / "gpu_smoke.json"
SHAPE = REPO / "tests" / "fixtures" / "model_configs" / "Qwen2.5-1.5B"
UNAVAILABLE = 3
CORE_CHECKS = ("memory", "logprobs", "merge", "sampling", "train")
VLLM_CHECKS = ("engine", "engine-4bit", "trainer-vllm")


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
