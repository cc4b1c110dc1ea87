"""Full fine-tuning in bf16 keeps float32 master weights, so an lr 1e-5 AdamW step is not lost.

Both arms load the real tiny model with model.dtype=bfloat16 and take the same AdamW step
(lr 1e-5) on the same GRPO-style loss through the trainer's log-prob path. Pure bf16 weights
(model.fp32_master_weights=false) round almost every update away: AdamW's first step moves
each weight by about lr, far below half a bf16 step for weights above ~0.003. With master
weights the policy is float32 and the forward runs under bf16 autocast (on CPU here as on
CUDA), and every weight with a gradient moves.
"""

from __future__ import annotations

import random

import pytest
import torch

from vigor_cli.config import ModelConfig
from vigor_cli.train.logprobs import completion_logprobs, make_batch
from vigor_cli.model.loading import Reference, load_policy, trainable_parameters

LR = 1e-5


def _batch(vocab=263):
    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(10)] for _ in range(4)]
    completions = [[rng.randrange(3, vocab) for _ in range(6)] for _ in range(4)]
    return make_batch(prompts, completions, 0)


def _one_step(master: bool):
    model, _, device = load_policy(ModelConfig(name_or_path="tiny", dtype="bfloat16", lora={"enabled": False},
                                               fp32_master_weights=master))
    params = trainable_parameters(model)
    before = [p.detach().clone() for p in params]
    batch = _batch()
    lp, _ = completion_logprobs(model, batch, device, 1.0, 512)
    (-(lp * batch.mask).sum() / batch.mask.sum()).backward()
    with_grad = [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params]
    torch.optim.AdamW(params, lr=LR, weight_decay=0.0).step()
    moved = total = 0
    for p, b, g in zip(params, before, with_grad):
        if g:
            nonzero = p.grad != 0
            moved += int((p.detach() != b)[nonzero].sum())
            total += int(nonzero.sum())
    return model, moved / total


@pytest.mark.slow
def test_bf16_update_is_kept_with_master_weights_and_lost_without():
    pure, pure_moved = _one_step(master=False)
    master, master_moved = _one_step(master=True)
    assert next(pure.parameters()).dtype == torch.bfloat16
    assert next(master.parameters()).dtype == torch.float32
    assert master.vigor_autocast_dtype == torch.bfloat16
    assert pure_moved < 0.2, f"pure bf16 AdamW kept {pure_moved:.0%} of the lr 1e-5 updates"
    assert master_moved > 0.99, f"master weights kept only {master_moved:.0%} of the updates"


def test_master_weights_forward_runs_in_bf16():
    """The float32 master weights compute under bf16 autocast: their log-probs carry bf16
    rounding (differ from a float32 forward of the same weights), those of dtype=float32 do not."""
    master, _, device = load_policy(ModelConfig(name_or_path="tiny", dtype="bfloat16", lora={"enabled": False}))
    fp32, _, _ = load_policy(ModelConfig(name_or_path="tiny", dtype="float32", lora={"enabled": False}))
    assert getattr(fp32, "vigor_autocast_dtype", None) is None
    for a, b in zip(master.parameters(), fp32.parameters()):
        assert torch.equal(a, b)  # same float32 weights
    batch = _batch()
    with torch.no_grad():
        lp_master, _ = completion_logprobs(master, batch, device, 1.0, 512)
        lp_fp32, _ = completion_logprobs(fp32, batch, device, 1.0, 512)
    diff = float((lp_master - lp_fp32).abs().max())
    assert 1e-4 < diff < 0.5


@pytest.mark.parametrize("lora", [True, False])
def test_lora_and_float32_runs_are_unchanged(lora):
    model, _, _ = load_policy(ModelConfig(name_or_path="tiny", lora={"enabled": lora}))
    base = model.get_base_model() if lora else model
    assert base.vigor_autocast_dtype is None
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_frozen_reference_is_held_in_the_compute_dtype():
    cfg = ModelConfig(name_or_path="tiny", dtype="bfloat16", lora={"enabled": False})
    policy = load_policy(cfg)[0]
    ref = Reference(policy, load_policy(cfg)[0])
    with ref.model() as m:
        assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in m.parameters())
