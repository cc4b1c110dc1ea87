"""Completion-only, chunked log-probs equal the full-vocabulary computation (values and gradients).

The reference below is the update's previous code path written out independently: the
model's logits at every position and the whole vocabulary, log-softmax in float32, gathered
at the completion tokens. The new path (vigor_cli/train/logprobs.py) runs the decoder, keeps the
completion positions and applies the output layer a chunk at a time under checkpointing.
Both are run on the real bundled tiny model, full fine-tuning and with a peft LoRA adapter
(also with the adapter switched off, the KL reference's path).
"""

from __future__ import annotations

import random

import pytest
import torch

from vigor_cli.config import ModelConfig
from vigor_cli.train.logprobs import completion_logprobs, full_logprobs, make_batch
from vigor_cli.model.loading import load_policy

DEVICE = torch.device("cpu")


def reference(model, prompts, completions, pad, temperature):
    """Independent reference: full logits, log_softmax, gather (no chunking, no slicing)."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for k, s in enumerate(seqs):
        ids[k, : len(s)] = torch.tensor(s)
        attn[k, : len(s)] = 1
    logits = model(input_ids=ids, attention_mask=attn).logits.float() / temperature
    logp_all = torch.log_softmax(logits, -1)
    lps, ents = [], []
    for k, (p, c) in enumerate(zip(prompts, completions)):
        pos = torch.arange(len(p) - 1, len(p) - 1 + len(c))
        rows = logp_all[k, pos]
        lps.append(rows.gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1))
        ents.append(-(rows.exp() * rows).sum(-1).detach())
    return lps, ents


def random_rows(seed, n=5, vocab=263):
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(1, 12))] for _ in range(n)]
    completions = [[rng.randrange(3, vocab) for _ in range(rng.randint(1, 9))] for _ in range(n)]
    return prompts, completions


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _compare(model, chunk, temperature, seed=0):
    prompts, completions = random_rows(seed)
    pad = 0
    weights = [torch.randn(len(c), generator=torch.Generator().manual_seed(seed + k)) for k, c in enumerate(completions)]

    model.zero_grad(set_to_none=True)
    ref_lp, ref_ent = reference(model, prompts, completions, pad, temperature)
    sum((lp * w).sum() for lp, w in zip(ref_lp, weights)).backward()
    ref_grads = _grads(model)
    assert ref_grads, "the reference produced no gradient"

    model.zero_grad(set_to_none=True)
    batch = make_batch(prompts, completions, pad)
    lp, ent = completion_logprobs(model, batch, DEVICE, temperature, chunk)
    assert lp.shape == batch.mask.shape and ent.shape == batch.mask.shape
    assert float((lp.detach() * (1 - batch.mask)).abs().sum()) == 0.0  # padding is exactly zero
    sum((lp[k, : len(c)] * w).sum() for k, (c, w) in enumerate(zip(completions, weights))).backward()
    grads = _grads(model)

    for k, c in enumerate(completions):
        torch.testing.assert_close(lp[k, : len(c)], ref_lp[k], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ent[k, : len(c)], ref_ent[k], rtol=1e-5, atol=1e-5)
    assert set(grads) == set(ref_grads)
    for name in ref_grads:
        # float32 summation order differs (chunked head, sliced rows): compare at the tensor's scale
        scale = float(ref_grads[name].abs().max())
        diff = float((grads[name] - ref_grads[name]).abs().max())
        assert diff <= 1e-5 * scale + 1e-7, (name, diff, scale)
    return grads


@pytest.fixture(scope="module")
def full_model():
    return load_policy(ModelConfig(name_or_path="tiny", lora={"enabled": False}))[0]


@pytest.fixture(scope="module")
def lora_model():
    torch.manual_seed(0)
    model = load_policy(ModelConfig(name_or_path="tiny", lora={"enabled": True, "r": 4, "alpha": 8}))[0]
    with torch.no_grad():  # peft starts B at zero; give the adapter a real effect
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model


@pytest.mark.parametrize("chunk", [1, 7, 512])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_full_finetuning_values_and_gradients_match(full_model, chunk, temperature):
    grads = _compare(full_model, chunk, temperature)
    assert "lm_head.weight" in grads or "model.embed_tokens.weight" in grads  # tied head gets its share


@pytest.mark.parametrize("chunk", [3, 512])
def test_lora_values_and_gradients_match(lora_model, chunk):
    grads = _compare(lora_model, chunk, 1.0, seed=1)
    assert grads and all("lora_" in n for n in grads)


def test_lora_adapter_disabled_matches_the_base(lora_model):
    """The KL reference runs the policy with its adapter switched off: same path, base values."""
    prompts, completions = random_rows(2)
    batch = make_batch(prompts, completions, 0)
    with torch.no_grad():
        on, _ = completion_logprobs(lora_model, batch, DEVICE, 1.0, 4)
        with lora_model.disable_adapter():
            off, _ = completion_logprobs(lora_model, batch, DEVICE, 1.0, 4)
            ref_lp, _ = reference(lora_model, prompts, completions, 0, 1.0)
    for k, c in enumerate(completions):
        torch.testing.assert_close(off[k, : len(c)], ref_lp[k], rtol=1e-5, atol=1e-5)
    assert float((on - off).abs().max()) > 1e-3  # the adapter matters, so the switch was real


def test_kept_full_path_matches_the_reference(full_model):
    """grpo.logits_chunk_tokens=0 (the 'before' arm of bench/update_memory.py) is today's path."""
    prompts, completions = random_rows(3)
    batch = make_batch(prompts, completions, 0)
    with torch.no_grad():
        lp, ent = full_logprobs(full_model, batch, DEVICE, 0.8)
        ref_lp, ref_ent = reference(full_model, prompts, completions, 0, 0.8)
    for k, c in enumerate(completions):
        torch.testing.assert_close(lp[k, : len(c)], ref_lp[k], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ent[k, : len(c)], ref_ent[k], rtol=1e-5, atol=1e-5)


def test_no_vocabulary_sized_tensor_beyond_one_chunk(full_model):
    """Every tensor autograd keeps for backward has at most chunk x vocabulary entries... and none
    of them spans all completion positions x vocabulary (the old path keeps several)."""
    prompts, completions = random_rows(4, n=8)
    batch = make_batch(prompts, completions, 0)
    vocab = full_model.config.vocab_size
    n_tokens = int(batch.mask.sum())
    chunk = 4
    largest = {"new": 0, "old": 0}

    def run(key, fn):
        def pack(t):
            if t.dim() >= 1 and t.shape[-1] == vocab and t.numel() != full_model.lm_head.weight.numel():
                largest[key] = max(largest[key], t.numel() // vocab)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, _ = fn()
            lp.sum().backward()

    run("new", lambda: completion_logprobs(full_model, batch, DEVICE, 1.0, chunk))
    run("old", lambda: full_logprobs(full_model, batch, DEVICE, 1.0))
    assert largest["new"] <= chunk
    assert largest["old"] >= n_tokens


@pytest.mark.slow
def test_gradient_checkpointing_gives_the_same_values_and_gradients():
    """The default on CUDA ('auto'): checkpointed decoder layers + chunked head == reference."""
    torch.manual_seed(0)
    model = load_policy(ModelConfig(name_or_path="tiny", gradient_checkpointing=True,
                                    lora={"enabled": True, "r": 4, "alpha": 8}))[0]
    assert model.is_gradient_checkpointing
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    _compare(model, 5, 1.0, seed=5)


def test_lora_on_an_untied_output_layer():
    """A LoRA-wrapped head (target_modules includes lm_head) is applied as a module per chunk."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    base = Qwen2ForCausalLM(Qwen2Config(vocab_size=263, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "lm_head"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    grads = _compare(model, 3, 0.7, seed=6)
    assert any("lm_head" in n for n in grads)
