"""Stop tokens: a base model under a Qwen2.5-style chat template stops at <|im_end|>.

The tokenizer is the bundled tiny one plus Qwen's three special tokens and a
Qwen2.5-style chat template (no download). "Base" is set up as
Qwen2.5-1.5B ships: EOS and generation config name only <|endoftext|>.
"""

from __future__ import annotations

import pytest
import torch
from vllm_stand_in import ScriptedStandInLLM, stand_in_api

from vigor_cli.config import RunConfig, TaskConfig
from vigor_cli.evaluate.evaluation import evaluate_examples
from vigor_cli.model.loading import TINY_DIR
from vigor_cli.rollout.base import SamplingParams
from vigor_cli.rollout.hf import HFEngine
from vigor_cli.rollout.weights import cut_at_stop, end_of_turn_ids, stop_token_ids
from vigor_cli.rollout.vllm import VLLMEngine
from vigor_cli.tasks import get_task
from vigor_cli.tasks.base import Example

QWEN25_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def qwen_style_tokenizer(instruct: bool = False):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    tok.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>" if instruct else "<|endoftext|>"
    tok.pad_token = "<|endoftext|>"
    tok.chat_template = QWEN25_TEMPLATE
    return tok


def ids(tok, *names):
    return [tok.convert_tokens_to_ids(n) for n in names]


@pytest.fixture(scope="module")
def base_model():
    """The tiny model as a 'base' model that ends its turn with <|im_end|>: the new token's
    (tied) embedding is the old EOS row scaled up, so greedy decoding writes <|im_end|> where
    the model would have stopped, and keeps writing after it."""
    from transformers import AutoModelForCausalLM

    tok = qwen_style_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(TINY_DIR, dtype=torch.float32)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    end, text_end = ids(tok, "<|im_end|>", "<|endoftext|>")
    with torch.no_grad():
        weight = model.get_input_embeddings().weight
        weight[end] = weight[2] * 1.5  # 2 = the tiny tokenizer's <eos>
        weight[text_end] = 0.0
    model.generation_config.eos_token_id = text_end  # as Qwen2.5-1.5B's generation_config.json
    return model.eval(), tok


def test_end_of_turn_token_from_the_template():
    tok = qwen_style_tokenizer()
    assert end_of_turn_ids(tok) == ids(tok, "<|im_end|>")
    from transformers import AutoTokenizer

    assert end_of_turn_ids(AutoTokenizer.from_pretrained(TINY_DIR)) == []  # no template
    plain = qwen_style_tokenizer()
    plain.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n\n{% endfor %}"
                           "{% if add_generation_prompt %}assistant: {% endif %}")
    assert end_of_turn_ids(plain) == []  # a turn closed by ordinary text gives no stop


def test_base_and_instruct_stop_at_end_of_turn_and_eos(base_model):
    model, tok = base_model
    both = sorted(ids(tok, "<|endoftext|>", "<|im_end|>"))
    assert stop_token_ids(model, tok) == both  # base: EOS and generation config say <|endoftext|> only
    instruct = qwen_style_tokenizer(instruct=True)

    class GenCfg:
        eos_token_id = both  # Qwen2.5-Instruct's generation_config lists both

    assert stop_token_ids(type("M", (), {"generation_config": GenCfg()})(), instruct) == both


def test_hf_engine_stops_at_end_of_turn_and_the_reward_reads_the_cut_text(base_model):
    model, tok = base_model
    end = tok.convert_tokens_to_ids("<|im_end|>")
    engine = HFEngine(model, tok)
    prompt = tok("3+4=", add_special_tokens=False)["input_ids"]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    [[rollout]] = engine.generate([prompt], [1], greedy)
    assert rollout.token_ids[-1] == end and not rollout.truncated
    assert rollout.token_ids.count(end) == 1 and len(rollout.logprobs) == len(rollout.token_ids)
    assert rollout.text == "\\boxed{7}"
    task = get_task(TaskConfig(name="tiny-math"))
    gold = Example(uid="t/0", question="3+4", answer="7")
    assert task.score([gold], [rollout.text])[0].reward == 1.0

    # Without the end-of-turn stop (EOS ids only, as before) the same model runs on past it.
    engine.eos_ids = [tok.eos_token_id]
    [[runaway]] = engine.generate([prompt], [1], greedy)
    assert runaway.token_ids[: len(rollout.token_ids)] == rollout.token_ids
    assert len(runaway.token_ids) > len(rollout.token_ids) and runaway.text != rollout.text


def _invented_turns(tok):
    """A base model's completion that answers, ends its turn, then invents the next turns."""
    text = ("\\boxed{7}<|im_end|>\n<|im_start|>user\nAnd 1+1?<|im_end|>\n"
            "<|im_start|>assistant\n\\boxed{2}<|endoftext|>")
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("honour_stops", [True, False], ids=["vllm-stops", "engine-ignores-stops"])
@pytest.mark.slow
def test_vllm_engine_stops_at_end_of_turn_in_evaluation(base_model, honour_stops):
    """vLLM stops at its stop_token_ids (kept in the output); the engine sends <|im_end|> among
    them and cuts at it again, so the reward never reads the invented turn's \\boxed{2}."""
    model, tok = base_model
    script = _invented_turns(tok)
    names = {n for n, _ in model.named_parameters()}
    api = stand_in_api(names, llm=ScriptedStandInLLM, script=script, honour_stops=honour_stops)
    cfg = RunConfig()
    engine = VLLMEngine(cfg, model, tok, vllm_api=api)
    task = get_task(TaskConfig(name="tiny-math"))
    examples = [Example(uid="t/0", question="3+4", answer="7")]
    result = evaluate_examples(engine, task, tok, examples, 2, SamplingParams(max_new_tokens=64, seed=1))
    assert set(engine._sampling_params(SamplingParams(), 0, 1).stop_token_ids) >= set(ids(tok, "<|im_end|>", "<|endoftext|>"))
    assert result.accuracy == 1.0
    assert [s.completion for s in result.samples] == ["\\boxed{7}", "\\boxed{7}"]
    assert all(s.tokens == script.index(tok.convert_tokens_to_ids("<|im_end|>")) + 1 for s in result.samples)
    assert not any(s.truncated for s in result.samples)

    # The same completion with EOS as the only stop: the reward reads the invented \boxed{2}.
    end = cut_at_stop(script, [tok.eos_token_id])
    assert task.score(examples, [tok.decode(script[:end], skip_special_tokens=True)])[0].reward == 0.0


def test_cut_at_stop():
    assert cut_at_stop([5, 6, 9, 7, 9], {9}) == 3
    assert cut_at_stop([5, 6], {9}) is None
    assert cut_at_stop([], [1]) is None
