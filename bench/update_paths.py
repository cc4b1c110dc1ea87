"""One update's peak memory on each trainer's path as a rank's rows grow under one token budget
(``python bench/update_memory.py --section paths``).

Details: docs/modules.md.
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ROW = (64, 64)
"""Prompt and completion tokens of a row."""
BUDGET = 1024
"""Token budget of a micro-batch (8 rows)."""
BASE_ROWS = 16
"""1x: 16 rows per rank, 8 of them in the update: one full micro-batch."""
MULTIPLES = (1, 2, 4)
ARMS = ("vigor", "trl", "trl-unbatched")
UNBATCHED_UP_TO = 2
"""TRL's own update over the whole rank is run at 1x and 2x only (it grows with the rows)."""
LORA_R = 32


def _rows(vocab: int, n: int) -> tuple[list, list, list[float]]:
    """Random prompts and completions; the first half of the rows in the update (+-1)."""
    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(ROW[0])] for _ in range(n)]
    completions = [[rng.randrange(3, vocab) for _ in range(ROW[1])] for _ in range(n)]
    advantages = [rng.choice([-1.0, 1.0]) if i < n // 2 else 0.0 for i in range(n)]
    return prompts, completions, advantages


def _measure(run) -> dict:
    import gc

    from storage_tracker import StorageTracker, reset_rss_peak, rss

    gc.collect()
    before = rss()
    exact = reset_rss_peak()
    tracker = StorageTracker()
    with tracker:
        run()
    return {"tensor_peak": tracker.peak, "rss_peak_over_before": rss("VmHWM") - before, "peak_reset": exact}


def vigor_arm(model_path: str, rows: int) -> dict:
    import torch

    from vigor_cli.train.learner import Learner
    from vigor_cli.settings import build_config

    cfg = build_config(sets=[
        f"model.name_or_path={model_path}", "model.dtype=float32", "model.gradient_checkpointing=true",
        "model.lora.enabled=true", f"model.lora.r={LORA_R}", f"model.lora.alpha={2 * LORA_R}",
        "model.lora.target_modules=all-linear", "model.cpu_threads=1", "engine.kind=hf", "engine.weight_check=off",
        f"grpo.micro_batch_tokens={BUDGET}", "grpo.logits_chunk_tokens=512", f"task.max_prompt_tokens={ROW[0]}",
        f"sampling.max_new_tokens={ROW[1]}",
    ])
    torch.manual_seed(0)
    prompt_ids: dict[str, list[int]] = {}
    learner = Learner(cfg, 0, prompt_ids)
    prompts, completions, advantages = _rows(learner.model.config.vocab_size, rows)
    samples = []
    for i, (p, c, a) in enumerate(zip(prompts, completions, advantages)):
        prompt_ids[f"q{i}"] = p
        if a:  # vigor train hands the update the allocator's rows only
            samples.append(SimpleNamespace(uid=f"q{i}", advantage=a,
                                           rollout=SimpleNamespace(token_ids=c, logprobs=[], truncated=False)))
    return _measure(lambda: learner.update(samples))


def trl_arm(model_path: str, rows: int, unbatched: bool) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from vigor_cli.integrations.trl import VigorGRPOConfig, VigorGRPOTrainer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_path)
    args = VigorGRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=False, per_device_train_batch_size=2,
                           num_generations=2, gradient_checkpointing=True, micro_batch_tokens=BUDGET, report_to=[],
                           max_steps=1, save_strategy="no", learning_rate=1e-5, max_completion_length=ROW[1])
    lora = LoraConfig(r=LORA_R, lora_alpha=2 * LORA_R, target_modules="all-linear", task_type="CAUSAL_LM")
    data = Dataset.from_list([{"prompt": "1+1=", "uid": "a"}, {"prompt": "2+2=", "uid": "b"}])
    tr = VigorGRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                          train_dataset=data, processing_class=tok, peft_config=lora)
    tr.model.train()
    tr.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    tr.model.enable_input_require_grads()
    tr.current_gradient_accumulation_steps = 1
    tr.create_optimizer()
    prompts, completions, advantages = _rows(model.config.vocab_size, rows)
    in_update = torch.tensor([[1 if a else 0] * ROW[1] for a in advantages])
    inputs = {
        "prompt_ids": torch.tensor(prompts), "prompt_mask": torch.ones(rows, ROW[0], dtype=torch.long),
        "completion_ids": torch.tensor(completions), "completion_mask": torch.ones(rows, ROW[1], dtype=torch.long),
        "tool_mask": in_update, "advantages": torch.tensor(advantages), "num_items_in_batch": in_update.sum(),
    }

    def update() -> None:
        if unbatched:
            loss = GRPOTrainer._compute_loss(tr, tr.model, inputs)
        else:
            loss = tr.compute_loss(tr.model, inputs)
        loss.backward()
        tr.optimizer.step()
        tr.optimizer.zero_grad(set_to_none=True)

    return _measure(update)


def worker(arm: str, model_path: str, rows: int) -> dict:
    if arm == "vigor":
        out = vigor_arm(model_path, rows)
    else:
        out = trl_arm(model_path, rows, unbatched=arm == "trl-unbatched")
    out.update(arm=arm, rows=rows, tokens=rows * sum(ROW), update_rows=rows // 2)
    return out


def arms_and_rows() -> list[tuple[str, int]]:
    """Every (arm, rows per rank) the section runs."""
    return [(arm, BASE_ROWS * k) for arm in ARMS for k in MULTIPLES
            if arm != "trl-unbatched" or k <= UNBATCHED_UP_TO]


def flatness(results: list[dict]) -> dict[str, float]:
    """Per arm: its largest peak over its smallest (1.0 is flat)."""
    out = {}
    for arm in ARMS:
        peaks = [r["tensor_peak"] for r in results if r.get("arm") == arm and "tensor_peak" in r]
        if peaks:
            out[arm] = max(peaks) / min(peaks)
    return out
