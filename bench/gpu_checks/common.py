"""What every GPU smoke check shares: the verdict list, the CUDA memory meter, the context a
check runs in, the run config the checks build, seeded random token rows, the memory verdict,
and a seeded change to every LoRA B (so a merge or a pushed weight can be told from the base)."""

from __future__ import annotations

import argparse
import gc
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "vigor_cli" / "assets" / "tiny")
TEMPERATURES = (1.0, 0.7)
GIB = float(1 << 30)


class Verdicts:
    """The checks' verdicts in order (PASS, FAIL or SKIP with a detail), each said as it is added."""

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


class CudaMeter:
    """Bytes allocated by PyTorch on the GPU since :meth:`start` (now, and the peak)."""

    def start(self) -> None:
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.base = torch.cuda.memory_allocated()

    def reset_peak(self) -> None:
        """Start a new peak from what is allocated now (the start stays)."""
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

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


def release() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def smoke_config(ctx: Context, *sets: str) -> Any:
    from vigor_cli.settings import build_config

    a = ctx.args
    return build_config(sets=[
        f"model.name_or_path={ctx.model_dir}", "engine.kind=hf", f"task.max_prompt_tokens={a.prompt_tokens}",
        f"sampling.max_new_tokens={a.new_tokens}", f"grpo.micro_batch_tokens={a.micro_batch_tokens}",
        "grpo.logits_chunk_tokens=512", f"engine.gen_batch_tokens={a.gen_batch_tokens}", "model.lora.r=16",
        "model.lora.alpha=32", *sets])


def plan_memory(ctx: Context, cfg: Any, free: float | None = None, total: float | None = None) -> Any:
    from vigor_cli.model import memory_plan as mp

    return mp.make_plan(cfg, mp.model_shape(cfg.model), ctx.device.type, free, total, "gpu smoke")


def random_rows(vocab: int, rows: int, width: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(width)] for _ in range(rows)]


def judge_memory(v: Verdicts, name: str, planned: float, measured: float, under: float, over: float) -> bool:
    """The plan must hold what was measured (within ``under``) and not exceed it by more than ``over``."""
    ratio = measured / planned if planned > 0 else math.inf
    ok = measured <= planned * (1 + under) and planned <= measured * (1 + over)
    return v.add(name, ok, f"planned {planned / GIB:.3f} GiB, measured {measured / GIB:.3f} GiB "
                           f"({ratio:.2f} x the plan; allowed {1 / (1 + over):.2f} to {1 + under:.2f})")


def perturb_lora(policy: Any, delta: float, seed: int = 0) -> int:
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
