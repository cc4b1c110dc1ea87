"""The vLLM engine against a recording stand-in for ``vllm.LLM`` (vLLM cannot run without a GPU).

The stand-in (``tests/vllm_stand_in.py``) has the signatures of vLLM 0.33.0, the
pinned release: ``tests/fixtures/vllm_signatures.json`` was extracted from its
wheel by ``scripts/extract_vllm_signatures.py``, and the first tests check the
stand-in against it. It also enforces what the real engine does and the engine relies
on: keyword arguments must exist on ``LLM``/``EngineArgs``, ``SamplingParams``
takes only its real fields and refuses ``n > 1`` when greedy, ``wake_up`` only
wakes sleeping tags, generation needs every tag awake, and after a level-2
sleep the weights are garbage until pushed. The policy is a real (small,
random) Qwen2 with a real peft LoRA.
"""

from __future__ import annotations

import copy

import pytest
import torch

from vllm_stand_in import (
    EOS, SIGNATURES, VOCAB, LauncherStandInLLM, StandInLLM, StandInVLLMModel, _constant, _fields,
    _params, _real_params, stand_in_api,
)

from vigor_cli.config import RunConfig
from vigor_cli.errors import UserError
from vigor_cli.rollout.base import SamplingParams
from vigor_cli.rollout.vllm import VLLMEngine, policy_weights, vllm_unavailable_reason


# --------------------------------------------------------------------------- policy
def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": EOS, **{f"t{i}": i for i in range(2, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=False,
                         eos_token_id=EOS, pad_token_id=0)
    path = tmp_path_factory.mktemp("qwen2")
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok = _tokenizer()
    tok.save_pretrained(path)
    return path


def _base(checkpoint):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)


def _lora_policy(checkpoint, modules_to_save=None):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        _base(checkpoint),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", modules_to_save=modules_to_save),
    )
    with torch.no_grad():  # peft starts B at zero; a trained adapter does not
        for name, p in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _cfg(**engine):
    cfg = RunConfig()
    cfg.sampling.max_new_tokens = 6
    for key, value in engine.items():
        setattr(cfg.engine, key, value)
    return cfg


def _engine(checkpoint, model, **engine):
    names = {n for n, _ in _base(checkpoint).named_parameters()}
    return VLLMEngine(_cfg(**engine), model, _tokenizer(), vllm_api=stand_in_api(names))


def _optimizer_step(model):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.1)
    model(input_ids=torch.tensor([[2, 3, 4]])).logits.sum().backward()
    opt.step()
    opt.zero_grad()


# --------------------------------------------------------------------------- signatures
@pytest.mark.parametrize(
    "method", ["generate", "sleep", "wake_up", "reset_prefix_cache", "apply_model", "collective_rpc"]
)
def test_stand_in_has_the_pinned_release_signatures(method):
    assert SIGNATURES["vllm_version"].startswith("0.33.")
    assert _params(getattr(StandInLLM, method)) == _real_params(f"LLM.{method}")


def test_stand_in_constructor_and_model_match_the_pinned_release():
    real = _real_params("LLM.__init__")
    assert _params(StandInLLM.__init__)[:2] == real[:2]  # (self, model), then keywords
    assert real[-1][1] == "VAR_KEYWORD"  # the rest go to EngineArgs, which the stand-in checks
    assert _params(StandInVLLMModel.load_weights) == _real_params("Qwen2ForCausalLM.load_weights")
    assert _params(StandInLLM.apply_model) == [
        ("self", "POSITIONAL_OR_KEYWORD", None), ("func", "POSITIONAL_OR_KEYWORD", None)
    ]
    assert {"n", "temperature", "top_p", "max_tokens", "seed", "logprobs", "stop_token_ids",
            "detokenize"} <= _fields("SamplingParams")
    assert {"index", "token_ids", "logprobs", "finish_reason"} <= _fields("CompletionOutput")
    assert "prompt_token_ids" in _fields("TokensPrompt")
    assert _constant("SLEEP_TAGS") == {"weights", "kv_cache"}
    assert "processed_logprobs" in _constant("LogprobsMode")


def test_fixture_matches_vllm_when_importable():
    """Where vllm imports (it needs its dependencies, not a GPU), inspect agrees with the ast fixture."""
    llm_module = pytest.importorskip("vllm.entrypoints.llm")
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import SamplingParams as RealSamplingParams

    for method in ["__init__", "generate", "sleep", "wake_up", "reset_prefix_cache",
                   "apply_model", "collective_rpc"]:
        assert _params(getattr(llm_module.LLM, method)) == _real_params(f"LLM.{method}")
    assert {f.name for f in dataclasses.fields(EngineArgs)} >= _fields("EngineArgs")
    assert set(RealSamplingParams.__struct_fields__) >= _fields("SamplingParams")


# --------------------------------------------------------------------------- behaviour
def test_step_call_order_and_no_reload_after_push(checkpoint):
    policy = _lora_policy(checkpoint)
    engine = _engine(checkpoint, policy)
    llm = engine.llm
    assert llm.init_kwargs["enable_sleep_mode"] is True
    assert llm.init_kwargs["distributed_executor_backend"] == "external_launcher"
    assert llm.init_kwargs["logprobs_mode"] == "processed_logprobs"
    assert llm.init_kwargs["dtype"] == "bfloat16"
    assert llm.init_kwargs["model"] == str(checkpoint)
    assert llm.init_kwargs["max_model_len"] == 128  # 1024 + 6 capped at max_position_embeddings
    assert llm.calls == [("sleep", 2)]  # the checkpoint's weights are dropped at once

    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=1)
    phase = [("wake_up", ("weights",)), ("push",), ("wake_up", ("kv_cache",)),
             ("reset_prefix_cache",), ("generate", [2, 2]), ("generate", [4]), ("sleep", 2)]
    for step in range(2):
        llm.calls.clear()
        engine.generate([[2, 3], [4, 5, 6]], [2, 2], sampling)  # round 1
        engine.generate([[2, 3], [4, 5, 6]], [4, 0], sampling)  # round 2
        engine.end_generation()
        _optimizer_step(policy)
        engine.sync_weights(policy)  # asleep: the push waits for the next phase
        assert llm.calls == phase, f"step {step}"
    assert engine.pushes == 2
    assert llm.weights_valid is False  # asleep at level 2; nothing reloaded the checkpoint


def test_pushed_weights_equal_peft_merge_under_checkpoint_names(checkpoint):
    policy = _lora_policy(checkpoint, modules_to_save=["lm_head"])
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    engine = _engine(checkpoint, policy)
    engine.generate([[2, 3]], [1], SamplingParams(max_new_tokens=4))
    pushed = engine.llm.vllm_model.loads[-1]

    merged = copy.deepcopy(policy).merge_and_unload()
    expected = {n: p.detach().to(torch.bfloat16) for n, p in merged.named_parameters()}
    assert set(pushed) == set(expected) == {n for n, _ in _base(checkpoint).named_parameters()}
    for name, tensor in expected.items():
        assert pushed[name].dtype == torch.bfloat16
        assert torch.equal(pushed[name], tensor), name
    # the LoRA really moved the weights, and the policy itself was not touched
    base = _base(checkpoint).state_dict()
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(pushed[name], base[name].to(torch.bfloat16))
    assert all(torch.equal(p, before[n]) for n, p in policy.named_parameters())


def test_full_weight_policy_is_pushed_as_is(checkpoint):
    policy = _base(checkpoint)
    names = [n for n, _ in policy.named_parameters()]
    pushed = dict(policy_weights(policy))
    assert list(pushed) == names
    for n, p in policy.named_parameters():
        assert torch.equal(pushed[n], p.detach().to(torch.bfloat16))


def test_counts_reach_sampling_params_n(checkpoint):
    engine = _engine(checkpoint, _lora_policy(checkpoint))
    prompts = [[2, 3], [4], [5, 6, 7], [8]]
    out = engine.generate(prompts, [3, 0, 5, 1], SamplingParams(temperature=0.7, top_p=0.9,
                                                                max_new_tokens=6, seed=3))
    sent_prompts, params = engine.llm.last_generate
    assert engine.llm.calls.count(("generate", [3, 5, 1])) == 1
    assert [p["prompt_token_ids"] for p in sent_prompts] == [[2, 3], [5, 6, 7], [8]]
    assert [len(r) for r in out] == [3, 0, 5, 1]
    for p in params:
        assert (p.temperature, p.top_p, p.max_tokens, p.logprobs) == (0.7, 0.9, 6, 0)
        assert EOS in p.stop_token_ids
    assert len({p.seed for p in params}) == 3  # vLLM seeds sample j with seed + j: keep prompts apart
    for rollouts in out:
        for r in rollouts:
            assert len(r.token_ids) == len(r.logprobs) >= 1
            assert r.truncated == (r.token_ids[-1] != EOS)
            assert r.logprobs[0] == -0.5  # read from the sampled token's entry, in order
    # the stand-in returns outputs in reverse; rollouts come back by index
    assert out[0][0].token_ids != out[0][-1].token_ids or len(out[0]) == 1


def test_greedy_asks_once_per_prompt(checkpoint):
    engine = _engine(checkpoint, _lora_policy(checkpoint))
    out = engine.generate([[2, 3]], [3], SamplingParams(temperature=0.0, max_new_tokens=6))
    assert engine.llm.last_generate[1][0].n == 1
    assert len(out[0]) == 3 and out[0][0] is not out[0][1]
    assert out[0][0].token_ids == out[0][2].token_ids


def test_no_push_when_the_policy_did_not_change(checkpoint):
    policy = _lora_policy(checkpoint)
    engine = _engine(checkpoint, policy, sleep_level=1)  # level 1 keeps the weights
    sampling = SamplingParams(max_new_tokens=4)
    engine.generate([[2]], [1], sampling)
    engine.sync_weights(policy)  # awake, unchanged
    engine.end_generation()
    engine.sync_weights(policy)  # asleep, unchanged
    engine.generate([[2]], [1], sampling)
    assert engine.pushes == 1
    assert ("wake_up", ("weights",)) in engine.llm.calls[-5:]

    _optimizer_step(policy)
    engine.sync_weights(policy)  # awake and changed: pushed at once, cache reset
    assert engine.pushes == 2
    assert engine.llm.calls[-2:] == [("push",), ("reset_prefix_cache",)]
    engine.end_generation()
    engine.generate([[2]], [1], sampling)
    assert engine.pushes == 2


def test_level_two_sleep_always_pushes_again(checkpoint):
    policy = _lora_policy(checkpoint)
    engine = _engine(checkpoint, policy)
    for _ in range(3):
        engine.generate([[2]], [1], SamplingParams(max_new_tokens=4))
        engine.end_generation()
    assert engine.pushes == 3  # the weights were discarded each time


def test_unavailable_here_with_one_clear_line(checkpoint):
    reason = vllm_unavailable_reason()
    assert reason is not None and "CUDA" in reason and "vllm" in reason and "\n" not in reason
    with pytest.raises(UserError, match="CUDA"):
        VLLMEngine(_cfg(), _base(checkpoint), _tokenizer())


def test_lora_on_embeddings_is_refused(checkpoint):
    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(_base(checkpoint), LoraConfig(r=2, target_modules=["embed_tokens"]))
    with pytest.raises(UserError, match="embed_tokens"):
        dict(policy_weights(policy))


# --------------------------------------------------------------------------- process group
TORCHRUN_ENV = {  # rank 3 of 8 under torchrun, its master on an address nothing answers for
    "RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0",
    "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "3", "ROLE_WORLD_SIZE": "8", "ROLE_NAME": "default",
    "MASTER_ADDR": "10.255.255.1", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_RUN_ID": "job-42", "TORCHELASTIC_MAX_RESTARTS": "0",
}


def test_engine_starts_its_own_group_under_a_torchrun_environment(checkpoint, monkeypatch):
    """The launcher's variables are hidden for the engine's start (which then makes a group of
    one on loopback at once, instead of waiting on a master that never answers), and are all
    back afterwards."""
    import os

    for k, v in TORCHRUN_ENV.items():
        monkeypatch.setenv(k, v)
    before = dict(os.environ)
    names = {n for n, _ in _base(checkpoint).named_parameters()}
    try:
        engine = VLLMEngine(_cfg(), _lora_policy(checkpoint), _tokenizer(),
                            vllm_api=stand_in_api(names, llm=LauncherStandInLLM))
        import torch.distributed as dist

        assert dist.get_world_size() == 1 and dist.get_rank() == 0
    finally:
        LauncherStandInLLM.close_group()
    seen = engine.llm.seen_env
    assert (seen["RANK"], seen["LOCAL_RANK"], seen["WORLD_SIZE"], seen["MASTER_ADDR"]) == ("0", "0", "1", "127.0.0.1")
    assert seen["MASTER_PORT"] != "29500"
    assert not [k for k in seen if k.startswith("TORCHELASTIC_") or k in ("GROUP_RANK", "ROLE_RANK")]
    assert dict(os.environ) == before  # the launcher's variables are back, nothing of ours stayed


def test_engine_refuses_a_process_already_in_a_larger_group(checkpoint, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    with pytest.raises(UserError, match="group of its own"):
        _engine(checkpoint, _lora_policy(checkpoint))
