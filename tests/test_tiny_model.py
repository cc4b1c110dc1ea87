"""The bundled tiny model: loads like Qwen, generates, and starts inside the learnable band."""

from __future__ import annotations

import json

import pytest

from cli_runner import run_vigor
from vigor_cli.model import tiny as tiny_model
from vigor_cli.tasks.tiny_code import TinyCodeTask
from vigor_cli.tasks.tiny_math import TinyMathTask
from vigor_cli.model.tiny import TINY_DIR


@pytest.fixture(scope="module")
def tiny():
    return tiny_model.load(TINY_DIR)


def test_asset_is_small_hf_format_qwen2():
    files = {p.name: p.stat().st_size for p in TINY_DIR.iterdir()}
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", "recipe.json", "measurements.json"):
        assert name in files, name
    assert sum(files.values()) < 5_000_000
    config = json.loads((TINY_DIR / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"]
    assert json.loads((TINY_DIR / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_loads_with_auto_classes_and_generates(tiny):
    import torch

    model, tokenizer = tiny
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert 500_000 < sum(p.numel() for p in model.parameters()) < 2_000_000
    assert tokenizer.eos_token == "<eos>" and tokenizer.pad_token == "<pad>" and tokenizer.bos_token == "<bos>"
    ids = tokenizer("12+7=", add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, do_sample=False, max_new_tokens=12, pad_token_id=tokenizer.pad_token_id)
    text = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert text.startswith("\\boxed{") and text.endswith("}")
    assert out[0, -1].item() == tokenizer.eos_token_id  # it stops by itself


def test_tokenizer_is_character_level_with_whole_pieces(tiny):
    _, tokenizer = tiny
    ids = tokenizer("\\boxed{19}", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["\\boxed{", "1", "9", "}"]
    text = "```python\nprint(int(input())+3)\n```"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_auto_tokenizer_agrees_with_the_recipe_tokenizer(tiny):
    """AutoTokenizer loads a qwen2 checkpoint as Qwen2Tokenizer (its own normalizer and
    pre-tokenizer): spaces, newlines, tabs and non-ASCII text must still round-trip with the
    ids the warm-up trained on."""
    _, loaded = tiny
    built = tiny_model.build_tokenizer()
    assert len(loaded) == len(built)
    for text in ["Read an integer n. Print n+3.\n", "```python\nprint(input()[::-1])\n```",
                 "a\tb  c\r\n", "héllo ∑ 中"]:
        ids = loaded(text, add_special_tokens=False)["input_ids"]
        assert ids == built(text, add_special_tokens=False)["input_ids"]
        assert loaded.decode(ids) == text


@pytest.mark.slow
def test_held_out_accuracy_in_band_with_spread(tiny):
    """64 held-out problems x 4 samples at temperature 1, fixed seed; graded by the real verifier."""
    model, tokenizer = tiny
    task = TinyMathTask(split_seed=0)
    try:
        rates = tiny_model.pass_rates(task, model, tokenizer, task.eval_examples()[:64], 4, seed=0)
    finally:
        task.close()
    accuracy = sum(rates) / len(rates)
    assert 0.20 <= accuracy <= 0.60, accuracy
    assert sum(r == 0 for r in rates) >= 4 and sum(r >= 0.75 for r in rates) >= 4
    assert sum(0 < r < 1 for r in rates) >= 16


@pytest.mark.slow
def test_tiny_code_pass_rate_is_positive(tiny):
    """Held-out tiny-code problems, real sandbox, all tests: the model writes some working programs."""
    model, tokenizer = tiny
    task = TinyCodeTask(split_seed=0, workers=2)
    try:
        rates = tiny_model.pass_rates(task, model, tokenizer, task.eval_examples()[:16], 2, seed=0, max_new_tokens=48)
    finally:
        task.close()
    assert sum(rates) > 0


def test_recorded_measurements_are_in_band():
    measured = json.loads((TINY_DIR / "measurements.json").read_text())
    assert 0.20 <= measured["tiny_math_heldout_accuracy"] <= 0.60
    hist = measured["pass_count_histogram"]
    assert sum(hist.values()) == measured["tiny_math_heldout_problems"]
    assert measured["tiny_code_heldout_pass_rate"] > 0


@pytest.mark.slow
def test_make_tiny_is_reproducible(tmp_path):
    """Two short builds from one seed give identical weights; the result loads with Auto classes."""
    import torch

    torch.set_num_threads(1)
    # two steps, a probe after each (a training step costs more than a probe)
    a = tiny_model.make_tiny(tmp_path / "a", seed=3, max_steps=2, probe_every=1, target=1.0, log=lambda _: None)
    b = tiny_model.make_tiny(tmp_path / "b", seed=3, max_steps=2, probe_every=1, target=1.0, log=lambda _: None)
    assert a["steps"] == b["steps"] == 2 and len(a["history"]) == 2
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    model, tokenizer = tiny_model.load(tmp_path / "a")
    assert model.config.vocab_size == len(tokenizer)


def test_make_tiny_cli_rejects_bad_target(tmp_path):
    out = run_vigor("make-tiny", "--out", str(tmp_path / "x"), "--target", "2")  # tests/cli_runner.py
    assert out.returncode == 2
    assert "'--target': 2 is out of range: must be > 0 and <= 1" in out.stderr
    assert not (tmp_path / "x").exists()
