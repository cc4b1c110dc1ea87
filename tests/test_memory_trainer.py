"""The trainer's memory hygiene on the real tiny model: the plan is printed before anything
loads, and after the update the gradients are freed and the CUDA cache handed back before the
engine wakes (the CUDA call is checked at its seam: no GPU here)."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

from vigor_cli.settings import build_config
from vigor_cli.run.directory import RunDir
from vigor_cli.train.trainer import Trainer


def _sets(tmp_path, *extra):
    return [
        "model.name_or_path=tiny", "model.lora.enabled=false", "task.name=tiny-math",
        "train.prompts_per_step=4", "sampling.max_new_tokens=8", "allocation.strategy=grpo",
        "allocation.group_size=4", "task.max_prompt_tokens=32", "engine.kind=hf",
        "engine.gen_batch_tokens=2048", "train.reward_workers=1", f"train.output_dir={tmp_path}", *extra,
    ]


@pytest.mark.slow
def test_plan_is_printed_first_and_memory_released_after_the_update(tmp_path, monkeypatch):
    buffer = io.StringIO()
    out = Console(file=buffer, width=200)
    trainer = Trainer(build_config(sets=_sets(tmp_path)), RunDir(tmp_path / "run"), None, out)
    first = buffer.getvalue().lstrip().splitlines()[0]
    assert first.startswith("memory plan: tiny on cpu")
    assert trainer.memory_plan.engine == "hf"

    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    pushed_with_grads = []
    real_sync = trainer.engine.sync_weights
    trainer.engine.sync_weights = lambda m: (pushed_with_grads.append(
        any(p.grad is not None for p in m.parameters())), real_sync(m))
    log = trainer.train_step(1)
    monkeypatch.undo()
    assert log.metrics["losses/grad_norm"] > 0  # the update had gradients to free
    assert emptied == [True]
    assert pushed_with_grads == [False]
    trainer.task.close()
