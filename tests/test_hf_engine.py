"""The transformers engine and policy loading, on the bundled tiny model."""

from __future__ import annotations

import pytest
import torch

from vigor_cli.config import ModelConfig
from vigor_cli.settings import build_config
from vigor_cli.errors import UserError
from vigor_cli.model.loading import load_policy, resolve_model_path
from vigor_cli.rollout import make_engine
from vigor_cli.rollout.base import SamplingParams
from vigor_cli.rollout.hf import HFEngine


@pytest.fixture(scope="module")
def policy():
    model, tokenizer, _ = load_policy(ModelConfig(lora={"enabled": False}))
    return model, tokenizer


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def full_forward_logprobs(model, prompt, completion):
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return [float(lp[len(prompt) - 1 + j, tok]) for j, tok in enumerate(completion)]


def test_counts_padding_and_logprobs(policy):
    model, tok = policy
    engine = HFEngine(model, tok, gen_batch_tokens=4096)
    prompts = [encode(tok, "3+4="), encode(tok, "31+12=")]
    out = engine.generate(prompts, [2, 3], SamplingParams(max_new_tokens=12, seed=5))
    assert [len(o) for o in out] == [2, 3]
    # The short prompt was left-padded next to the long one: its log-probs must equal an
    # unpadded forward pass, token by token.
    for prompt, rollouts in zip(prompts, out):
        for r in rollouts:
            assert len(r.logprobs) == len(r.token_ids) > 0
            ref = full_forward_logprobs(model, prompt, r.token_ids)
            assert max(abs(a - b) for a, b in zip(ref, r.logprobs)) < 1e-4
            if not r.truncated:
                assert r.token_ids[-1] == tok.eos_token_id
                assert tok.eos_token not in r.text


def test_seeded_and_truncation(policy):
    model, tok = policy
    engine = HFEngine(model, tok)
    prompts = [encode(tok, "17+25=")]
    a = engine.generate(prompts, [6], SamplingParams(max_new_tokens=12, seed=1))
    b = engine.generate(prompts, [6], SamplingParams(max_new_tokens=12, seed=1))
    c = engine.generate(prompts, [6], SamplingParams(max_new_tokens=12, seed=2, temperature=2.0))
    assert [r.token_ids for r in a[0]] == [r.token_ids for r in b[0]]
    assert [r.token_ids for r in a[0]] != [r.token_ids for r in c[0]]
    short = engine.generate(prompts, [3], SamplingParams(max_new_tokens=2, seed=1))
    assert all(r.truncated and len(r.token_ids) == 2 for r in short[0])


def test_token_budget_batching_keeps_greedy_results(policy):
    model, tok = policy
    prompts = [encode(tok, q) for q in ("1+1=", "22+13=", "9-4=", "30-17=")]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    one_call = HFEngine(model, tok, gen_batch_tokens=4096).generate(prompts, [1, 2, 1, 1], greedy)
    tiny_batches = HFEngine(model, tok, gen_batch_tokens=20).generate(prompts, [1, 2, 1, 1], greedy)
    assert [[r.token_ids for r in o] for o in one_call] == [[r.token_ids for r in o] for o in tiny_batches]
    # greedy = argmax at every position
    first = one_call[1][0]
    ids = torch.tensor([prompts[1] + first.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    assert first.token_ids == logits[len(prompts[1]) - 1 : -1].argmax(-1).tolist()[: len(first.token_ids)]


def test_engine_factory(policy, capsys):
    model, tok = policy
    with pytest.raises(UserError, match="engine.kind=vllm"):
        make_engine(build_config(sets=["engine.kind=vllm"]), model, tok)
    notes = []
    engine = make_engine(build_config(sets=["engine.kind=auto"]), model, tok, announce=notes.append)
    assert engine.name == "hf" and "transformers" in notes[0]


def test_loading_errors_and_lora(tmp_path):
    assert resolve_model_path("tiny").endswith("assets/tiny")
    assert resolve_model_path("Qwen/Qwen2.5-1.5B") == "Qwen/Qwen2.5-1.5B"
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        resolve_model_path(str(tmp_path / "empty"))
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA"):
            load_policy(ModelConfig(load_in_4bit=True))
    model, _, _ = load_policy(ModelConfig(lora={"enabled": True, "r": 4, "alpha": 8}))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    # all-linear: attention and MLP projections of every layer, not the output head
    assert any("q_proj" in n for n in trainable) and any("down_proj" in n for n in trainable)
    assert not any("lm_head" in n for n in trainable)
